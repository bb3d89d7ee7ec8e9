// Distributed Lion on a GPU, in one process: the CUDA passes
// (kernels/lion_kernels.h) equal the CPU passes (src/lion/lion_passes.h) bit
// for bit (a NaN equals any NaN: GPU arithmetic returns the canonical NaN
// where x86 keeps an operand's payload), over fp32/fp16/bf16, both vote encodings,
// with and without the master copy, for counts 0, 1, 63, 64, 65 and ~1M, at
// aligned and unaligned addresses, and gated by the skip flag; the device
// optimizer without a communicator (aggregation "local") equals the host
// one step by step, skipped steps and saved state included; device entry
// points refuse host buffers. Without a GPU every test reports SKIPPED.
// (lion_nccl_mp_test.cc: the optimizer across processes on NCCL.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "kernels/lion_kernels.h"
#include "lion/lion_passes.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using Bytes = std::vector<uint8_t>;

bool gpuAvailable(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "cudaGetDeviceCount found no device";
    return false;
  }
  return true;
}

#define REQUIRE_GPU()                                             \
  do {                                                            \
    std::string why_;                                             \
    if (!gpuAvailable(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

#define CUDA_ASSERT(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// A device buffer with room for `slack` bytes in front (unaligned views).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t slack = 16) : bytes_(bytes), slack_(slack) {
    if (cudaMalloc(&base_, bytes + slack) != cudaSuccess) base_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return base_ != nullptr; }
  // The view `offset` bytes past the (256-byte aligned) allocation.
  void* at(size_t offset) const { return static_cast<char*>(base_) + offset; }
  cudaError_t upload(size_t offset, const Bytes& b) const {
    return cudaMemcpy(at(offset), b.data(), b.size(), cudaMemcpyHostToDevice);
  }
  cudaError_t download(size_t offset, Bytes* b) const {
    return cudaMemcpy(b->data(), at(offset), b->size(), cudaMemcpyDeviceToHost);
  }

 private:
  void* base_ = nullptr;
  size_t bytes_, slack_;
};

void setFloat(Bytes& b, ncclDataType_t dt, size_t i, float v) { bits::storeFloatAs(v, dt, b.data(), i); }

// Values of every kind, with specials at fixed places: +-0, subnormals,
// inf, NaN (quiet, with a payload), the largest finite values.
Bytes inputs(ncclDataType_t dt, size_t count, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Bytes b(count * bits::typeSize(dt));
  const float nanPayload = [] {
    uint32_t u = 0x7fc01234u;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }();
  const float table[] = {0.0f, -0.0f, 1e-41f, -3e-39f, 6e-8f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), nanPayload, 3.0e38f, 65504.0f, -2.5f};
  for (size_t i = 0; i < count; i++) {
    float v = normal(rng) * (i % 5 == 0 ? 1000.0f : 1.0f);
    if (specials && i % 17 == 3) v = table[(i / 17) % (sizeof(table) / sizeof(table[0]))];
    setFloat(b, dt, i, v);
  }
  return b;
}

// Element by element: the same bytes, or both NaN. Names the first difference.
::testing::AssertionResult sameElements(ncclDataType_t dt, const Bytes& got, const Bytes& want) {
  const size_t es = bits::typeSize(dt);
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << ", " << want.size();
  for (size_t i = 0; i < got.size() / es; i++) {
    if (memcmp(got.data() + i * es, want.data() + i * es, es) == 0) continue;
    if (dt != ncclInt8) {
      float a, b;
      lion::toFloat(dt, got.data() + i * es, &a, 1);
      lion::toFloat(dt, want.data() + i * es, &b, 1);
      if (std::isnan(a) && std::isnan(b)) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
    }
    return ::testing::AssertionFailure() << "element " << i << ": " << (int)(int8_t)got[i] << " != "
                                         << (int)(int8_t)want[i];
  }
  return ::testing::AssertionSuccess();
}

Bytes floatBytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  if (!v.empty()) memcpy(b.data(), v.data(), b.size());
  return b;
}

struct PassCase {
  ncclDataType_t type;
  size_t count;
  size_t offset;  // in elements, applied to the caller's buffers (params, grads)
};

std::vector<PassCase> passCases() {
  std::vector<PassCase> cases;
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16})
    for (size_t count : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(1000003)})
      for (size_t offset : {size_t(0), size_t(1)}) cases.push_back({dt, count, offset});
  return cases;
}

std::string caseName(const PassCase& c) {
  return std::string(bits::typeName(c.type)) + " count " + std::to_string(c.count) + " offset " +
         std::to_string(c.offset);
}

// Pass 1 on both sides, then pass 2 from its votes; every output compared.
TEST(LionDevicePasses, EqualTheCpuPassesBitForBit) {
  REQUIRE_GPU();
  const lion::Coefficients k = lion::Coefficients::of(0.9f, 0.99f);
  for (const PassCase& pc : passCases()) {
    SCOPED_TRACE(caseName(pc));
    const size_t es = bits::typeSize(pc.type), n = pc.count, off = pc.offset * es;
    for (lion::VoteEncoding enc : {lion::VoteEncoding::kSignInt8, lion::VoteEncoding::kFloat32}) {
      const ncclDataType_t voteType = enc == lion::VoteEncoding::kSignInt8 ? ncclInt8 : ncclFloat32;
      const size_t vs = bits::typeSize(voteType);
      for (float divisor : {1.0f, 3.0f}) {
        Bytes g = inputs(pc.type, n, 11, true);
        Bytes m0 = inputs(ncclFloat32, n, 12, divisor == 1.0f);
        // CPU.
        Bytes mHost = m0, vHost(n * vs, 0);
        lion::interpolateAndVote(pc.type, g.data(), divisor, reinterpret_cast<float*>(mHost.data()), enc,
                                 vHost.data(), n, k);
        // GPU.
        DeviceBuffer dg(g.size()), dm(m0.size()), dv(vHost.size()), dskip(4);
        ASSERT_TRUE(dg.ok() && dm.ok() && dv.ok() && dskip.ok());
        CUDA_ASSERT(dg.upload(off, g));
        CUDA_ASSERT(dm.upload(0, m0));
        CUDA_ASSERT(cudaMemset(dv.at(0), 0, vHost.size()));
        CUDA_ASSERT(cudaMemset(dskip.at(0), 0, 4));
        CUDA_ASSERT(kernels::lionInterpolateAndVote(pc.type, dg.at(off), divisor, static_cast<float*>(dm.at(0)), enc,
                                                    dv.at(0), n, k, static_cast<const float*>(dskip.at(0)), nullptr));
        CUDA_ASSERT(cudaDeviceSynchronize());
        Bytes mDev(m0.size()), vDev(vHost.size());
        CUDA_ASSERT(dm.download(0, &mDev));
        CUDA_ASSERT(dv.download(0, &vDev));
        ASSERT_TRUE(sameElements(ncclFloat32, mDev, mHost)) << "momentum, divisor " << divisor << " encoding "
                                                            << (int)enc;
        ASSERT_TRUE(sameElements(voteType, vDev, vHost)) << "votes, divisor " << divisor << " encoding " << (int)enc;

        // Pass 2 from these votes, with and without the master copy.
        for (bool master : {false, true}) {
          SCOPED_TRACE(master ? "master" : "no master");
          Bytes p = inputs(pc.type, n, 13, true);
          Bytes mw = inputs(ncclFloat32, n, 14, true);
          Bytes pHost = p, mwHost = mw;
          lion::applyUpdate(pc.type, pHost.data(), master ? reinterpret_cast<float*>(mwHost.data()) : nullptr,
                            voteType, vHost.data(), n, 0.01f, 0.1f);
          DeviceBuffer dp(p.size()), dmw(mw.size()), dcount(8);
          ASSERT_TRUE(dp.ok() && dmw.ok() && dcount.ok());
          CUDA_ASSERT(dp.upload(off, p));
          CUDA_ASSERT(dmw.upload(0, mw));
          CUDA_ASSERT(cudaMemset(dcount.at(0), 0, 8));
          CUDA_ASSERT(kernels::lionApplyUpdate(pc.type, dp.at(off), master ? static_cast<float*>(dmw.at(0)) : nullptr,
                                               voteType, dv.at(0), n, 0.01f, 0.1f,
                                               static_cast<const float*>(dskip.at(0)),
                                               static_cast<uint64_t*>(dcount.at(0)), nullptr));
          CUDA_ASSERT(cudaDeviceSynchronize());
          Bytes pDev(p.size()), mwDev(mw.size()), counter(8);
          CUDA_ASSERT(dp.download(off, &pDev));
          CUDA_ASSERT(dmw.download(0, &mwDev));
          CUDA_ASSERT(dcount.download(0, &counter));
          ASSERT_TRUE(sameElements(pc.type, pDev, pHost)) << "parameters";
          ASSERT_TRUE(sameElements(ncclFloat32, mwDev, mwHost)) << "master copy";
          ASSERT_EQ(counter, Bytes(8, 0)) << "no skip counted";
        }
      }
    }
  }
}

// The skip flag set: neither pass writes anything; pass 2 counts the skip
// exactly once whatever the grid size.
TEST(LionDevicePasses, SkipFlagChangesNothingAndCountsOnce) {
  REQUIRE_GPU();
  const lion::Coefficients k = lion::Coefficients::of(0.9f, 0.99f);
  for (size_t n : {size_t(1), size_t(65), size_t(3000017)}) {
    Bytes g = inputs(ncclBfloat16, n, 21, false), m = inputs(ncclFloat32, n, 22, false);
    Bytes p = inputs(ncclBfloat16, n, 23, false), mw = inputs(ncclFloat32, n, 24, false);
    Bytes votes(n, 0x5a);
    DeviceBuffer dg(g.size()), dm(m.size()), dp(p.size()), dmw(mw.size()), dv(n), dflag(4), dcount(8);
    ASSERT_TRUE(dg.ok() && dm.ok() && dp.ok() && dmw.ok() && dv.ok() && dflag.ok() && dcount.ok());
    CUDA_ASSERT(dg.upload(0, g));
    CUDA_ASSERT(dm.upload(0, m));
    CUDA_ASSERT(dp.upload(0, p));
    CUDA_ASSERT(dmw.upload(0, mw));
    CUDA_ASSERT(dv.upload(0, votes));
    const float one = 1.0f;
    CUDA_ASSERT(cudaMemcpy(dflag.at(0), &one, 4, cudaMemcpyHostToDevice));
    const uint64_t seven = 7;
    CUDA_ASSERT(cudaMemcpy(dcount.at(0), &seven, 8, cudaMemcpyHostToDevice));
    const float* skip = static_cast<const float*>(dflag.at(0));
    CUDA_ASSERT(kernels::lionInterpolateAndVote(ncclBfloat16, dg.at(0), 1.0f, static_cast<float*>(dm.at(0)),
                                                lion::VoteEncoding::kSignInt8, dv.at(0), n, k, skip, nullptr));
    CUDA_ASSERT(kernels::lionApplyUpdate(ncclBfloat16, dp.at(0), static_cast<float*>(dmw.at(0)), ncclInt8, dv.at(0),
                                         n, 0.1f, 0.1f, skip, static_cast<uint64_t*>(dcount.at(0)), nullptr));
    CUDA_ASSERT(cudaDeviceSynchronize());
    Bytes m2(m.size()), p2(p.size()), mw2(mw.size()), v2(n);
    uint64_t count = 0;
    CUDA_ASSERT(dm.download(0, &m2));
    CUDA_ASSERT(dp.download(0, &p2));
    CUDA_ASSERT(dmw.download(0, &mw2));
    CUDA_ASSERT(dv.download(0, &v2));
    CUDA_ASSERT(cudaMemcpy(&count, dcount.at(0), 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(m2, m);
    EXPECT_EQ(p2, p);
    EXPECT_EQ(mw2, mw);
    EXPECT_EQ(v2, votes);
    EXPECT_EQ(count, 8u) << "n " << n;
  }
}

TEST(LionDevicePasses, NonFiniteFlagToFloatAndDivide) {
  REQUIRE_GPU();
  for (const PassCase& pc : passCases()) {
    SCOPED_TRACE(caseName(pc));
    const size_t es = bits::typeSize(pc.type), n = pc.count, off = pc.offset * es;
    for (int where : {-1, 0, 1, 2}) {  // no non-finite value; one first, in the middle, last
      Bytes x = inputs(pc.type, n, 31, false);
      if (n > 0 && where >= 0) setFloat(x, pc.type, where == 0 ? 0 : (where == 1 ? n / 2 : n - 1), NAN);
      DeviceBuffer dx(x.size()), dflag(4), dout(n * 4);
      ASSERT_TRUE(dx.ok() && dflag.ok() && dout.ok());
      CUDA_ASSERT(dx.upload(off, x));
      const float stale = 5.0f;
      CUDA_ASSERT(cudaMemcpy(dflag.at(0), &stale, 4, cudaMemcpyHostToDevice));
      CUDA_ASSERT(kernels::lionFlagNonFinite(pc.type, dx.at(off), n, static_cast<float*>(dflag.at(0)), nullptr));
      CUDA_ASSERT(kernels::lionToFloat(pc.type, dx.at(off), static_cast<float*>(dout.at(0)), n, nullptr));
      CUDA_ASSERT(cudaDeviceSynchronize());
      float flag = -1.0f;
      CUDA_ASSERT(cudaMemcpy(&flag, dflag.at(0), 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(flag, lion::allFinite(pc.type, x.data(), n) ? 0.0f : 1.0f) << "where " << where;
      std::vector<float> want(n);
      lion::toFloat(pc.type, x.data(), want.data(), n);
      Bytes got(n * 4);
      CUDA_ASSERT(dout.download(0, &got));
      ASSERT_EQ(got, floatBytes(want)) << "toFloat moves bits only";
      if (where != -1) continue;
      lion::divide(want.data(), 3.0f, n);
      CUDA_ASSERT(kernels::lionDivide(static_cast<float*>(dout.at(0)), 3.0f, n, nullptr));
      CUDA_ASSERT(cudaDeviceSynchronize());
      CUDA_ASSERT(dout.download(0, &got));
      ASSERT_EQ(got, floatBytes(want));
    }
  }
}

ncclSignLionConfig_t localConfig(bool master, bool skip) {
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.aggregation = ncclSignLionLocal;
  c.lr = 0.01f;
  c.weightDecay = 0.1f;
  c.masterWeights = master ? 1 : 0;
  c.skipNonFinite = skip ? 1 : 0;
  return c;
}

Bytes stateOf(ncclSignLion_t lion) {
  size_t bytes = 0;
  EXPECT_EQ(ncclSignLionGetStateSize(lion, &bytes), ncclSuccess);
  Bytes s(bytes);
  EXPECT_EQ(ncclSignLionSaveState(lion, s.data(), s.size()), ncclSuccess);
  return s;
}

// The optimizer on the device without a communicator ("local"), on a stream
// of its own, against the host optimizer: the same parameters after every
// step, the same skipped steps, the same saved state; a state saved on the
// host continues on the device.
TEST(LionDeviceOptimizer, LocalEqualsTheHostOptimizer) {
  REQUIRE_GPU();
  const size_t count = 4099;
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16})
    for (bool master : {false, true}) {
      if (master && dt == ncclFloat32) continue;
      SCOPED_TRACE(std::string(bits::typeName(dt)) + (master ? " master" : ""));
      const ncclSignLionConfig_t c = localConfig(master, true);
      ncclSignLion_t host = nullptr, dev = nullptr;
      ASSERT_EQ(ncclSignLionCreate(&host, count, dt, &c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclSignLionCreateNccl(&dev, count, dt, &c, nullptr), ncclSuccess);
      const size_t bytes = count * bits::typeSize(dt);
      Bytes pHost = inputs(dt, count, 41, false);
      DeviceBuffer dp(bytes), dg(bytes);
      ASSERT_TRUE(dp.ok() && dg.ok());
      CUDA_ASSERT(dp.upload(0, pHost));
      for (int s = 0; s < 6; s++) {
        Bytes g = inputs(dt, count, 50 + s, false);
        if (s == 3) setFloat(g, dt, count / 3, INFINITY);  // skipped on both
        CUDA_ASSERT(cudaMemcpyAsync(dg.at(0), g.data(), bytes, cudaMemcpyHostToDevice, stream));
        ASSERT_EQ(ncclSignLionStepAsync(dev, dp.at(0), dg.at(0), stream), ncclSuccess);
        int applied = -1;
        ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), &applied), ncclSuccess);
        EXPECT_EQ(applied, s == 3 ? 0 : 1);
        CUDA_ASSERT(cudaStreamSynchronize(stream));
        Bytes pDev(bytes);
        CUDA_ASSERT(dp.download(0, &pDev));
        ASSERT_EQ(pDev, pHost) << "step " << s;
      }
      uint64_t a = 0, k = 0;
      ASSERT_EQ(ncclSignLionGetStepCount(dev, &a, &k), ncclSuccess);
      EXPECT_EQ(a, 5u);
      EXPECT_EQ(k, 1u);
      Bytes saved = stateOf(host);
      EXPECT_EQ(stateOf(dev), saved);

      // A host state continues on a fresh device optimizer.
      ncclSignLion_t dev2 = nullptr;
      ASSERT_EQ(ncclSignLionCreateNccl(&dev2, count, dt, &c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclSignLionLoadState(dev2, saved.data(), saved.size()), ncclSuccess);
      Bytes g = inputs(dt, count, 99, false);
      CUDA_ASSERT(cudaMemcpy(dg.at(0), g.data(), bytes, cudaMemcpyHostToDevice));
      ASSERT_EQ(ncclSignLionStepAsync(dev2, dp.at(0), dg.at(0), stream), ncclSuccess);
      ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), nullptr), ncclSuccess);
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      Bytes pDev(bytes);
      CUDA_ASSERT(dp.download(0, &pDev));
      EXPECT_EQ(pDev, pHost);
      EXPECT_EQ(stateOf(dev2), stateOf(host));
      EXPECT_EQ(ncclSignLionDestroy(dev2), ncclSuccess);
      EXPECT_EQ(ncclSignLionDestroy(dev), ncclSuccess);
      EXPECT_EQ(ncclSignLionDestroy(host), ncclSuccess);
    }
  CUDA_ASSERT(cudaStreamDestroy(stream));
}

TEST(LionDeviceOptimizer, RefusesHostBuffers) {
  REQUIRE_GPU();
  const ncclSignLionConfig_t c = localConfig(false, false);
  ncclSignLion_t dev = nullptr;
  ASSERT_EQ(ncclSignLionCreateNccl(&dev, 16, ncclFloat32, &c, nullptr), ncclSuccess);
  std::vector<float> p(16, 1.0f), g(16, 1.0f);
  DeviceBuffer dp(64), dg(64);
  ASSERT_TRUE(dp.ok() && dg.ok());
  float* pinned = nullptr;
  CUDA_ASSERT(cudaMallocHost(&pinned, 64));
  EXPECT_EQ(ncclSignLionStepAsync(dev, p.data(), dg.at(0), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), g.data(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, pinned, dg.at(0), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStep(dev, dp.at(0), dg.at(0), nullptr), ncclInvalidUsage);
  CUDA_ASSERT(cudaMemset(dg.at(0), 0, 64));
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), dg.at(0), nullptr), ncclSuccess);
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaFreeHost(pinned));
  EXPECT_EQ(ncclSignLionDestroy(dev), ncclSuccess);
}

}  // namespace
}  // namespace signlion
