// The Lion passes (kernels/lion_kernels.h) against the CPU passes
// (src/lion/lion_passes.h), bit for bit (a NaN equals any NaN: GPU
// arithmetic returns the canonical NaN where x86 keeps an operand's payload),
// over fp32/fp16/bf16, both vote encodings, with and without the master copy,
// for counts 0, 1, 63, 64, 65 and a large one, at aligned and unaligned
// addresses, and gated by the skip flag.
//
// Built twice: against the CUDA runtime (signlion_gpu_lion_tests, label gpu;
// every test skips when no device answers) and against the SIMT emulator
// (signlion_simt_kernel_tests, label unit: the kernels' source run on the
// CPU, with a smaller large count).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/lion_gpu_inputs.h"
#include "kernels/lion_kernels.h"
#include "lion/lion_passes.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;
using test::DeviceBuffer;
using test::floatBytes;
using test::inputs;
using test::sameElements;
using test::setFloat;

#if defined(SIGNLION_TEST_ON_SIMT_EMULATOR)
constexpr size_t kLargeCount = 20011;
#else
constexpr size_t kLargeCount = 1000003;
#endif

struct PassCase {
  ncclDataType_t type;
  size_t count;
  size_t offset;  // in elements, applied to the caller's buffers (params, grads)
};

std::vector<PassCase> passCases() {
  std::vector<PassCase> cases;
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16})
    for (size_t count : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), kLargeCount})
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
        CUDA_ASSERT(dg.upload(off, g, nullptr));
        CUDA_ASSERT(dm.upload(0, m0, nullptr));
        CUDA_ASSERT(cudaMemset(dskip.at(0), 0, 4));
        CUDA_ASSERT(kernels::lionInterpolateAndVote(pc.type, dg.at(off), divisor, static_cast<float*>(dm.at(0)), enc,
                                                    dv.at(0), n, k, static_cast<const float*>(dskip.at(0)), nullptr));
        CUDA_ASSERT(cudaStreamSynchronize(nullptr));
        Bytes mDev(m0.size()), vDev(vHost.size());
        CUDA_ASSERT(dm.download(0, &mDev, nullptr));
        CUDA_ASSERT(dv.download(0, &vDev, nullptr));
        ASSERT_TRUE(dm.guardIntact(0, mDev.size(), nullptr));
        ASSERT_TRUE(dv.guardIntact(0, vDev.size(), nullptr));
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
          CUDA_ASSERT(dp.upload(off, p, nullptr));
          CUDA_ASSERT(dmw.upload(0, mw, nullptr));
          CUDA_ASSERT(cudaMemset(dcount.at(0), 0, 8));
          CUDA_ASSERT(kernels::lionApplyUpdate(pc.type, dp.at(off), master ? static_cast<float*>(dmw.at(0)) : nullptr,
                                               voteType, dv.at(0), n, 0.01f, 0.1f,
                                               static_cast<const float*>(dskip.at(0)),
                                               static_cast<uint64_t*>(dcount.at(0)), nullptr));
          CUDA_ASSERT(cudaStreamSynchronize(nullptr));
          Bytes pDev(p.size()), mwDev(mw.size()), counter(8);
          CUDA_ASSERT(dp.download(off, &pDev, nullptr));
          CUDA_ASSERT(dmw.download(0, &mwDev, nullptr));
          CUDA_ASSERT(dcount.download(0, &counter, nullptr));
          ASSERT_TRUE(dp.guardIntact(off, pDev.size(), nullptr));
          ASSERT_TRUE(dmw.guardIntact(0, mwDev.size(), nullptr));
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
  for (size_t n : {size_t(1), size_t(65), kLargeCount}) {
    Bytes g = inputs(ncclBfloat16, n, 21, false), m = inputs(ncclFloat32, n, 22, false);
    Bytes p = inputs(ncclBfloat16, n, 23, false), mw = inputs(ncclFloat32, n, 24, false);
    Bytes votes(n, 0x5a);
    DeviceBuffer dg(g.size()), dm(m.size()), dp(p.size()), dmw(mw.size()), dv(n), dflag(4), dcount(8);
    ASSERT_TRUE(dg.ok() && dm.ok() && dp.ok() && dmw.ok() && dv.ok() && dflag.ok() && dcount.ok());
    CUDA_ASSERT(dg.upload(0, g, nullptr));
    CUDA_ASSERT(dm.upload(0, m, nullptr));
    CUDA_ASSERT(dp.upload(0, p, nullptr));
    CUDA_ASSERT(dmw.upload(0, mw, nullptr));
    CUDA_ASSERT(dv.upload(0, votes, nullptr));
    const float one = 1.0f;
    CUDA_ASSERT(cudaMemcpy(dflag.at(0), &one, 4, cudaMemcpyHostToDevice));
    const uint64_t seven = 7;
    CUDA_ASSERT(cudaMemcpy(dcount.at(0), &seven, 8, cudaMemcpyHostToDevice));
    const float* skip = static_cast<const float*>(dflag.at(0));
    CUDA_ASSERT(kernels::lionInterpolateAndVote(ncclBfloat16, dg.at(0), 1.0f, static_cast<float*>(dm.at(0)),
                                                lion::VoteEncoding::kSignInt8, dv.at(0), n, k, skip, nullptr));
    CUDA_ASSERT(kernels::lionApplyUpdate(ncclBfloat16, dp.at(0), static_cast<float*>(dmw.at(0)), ncclInt8, dv.at(0),
                                         n, 0.1f, 0.1f, skip, static_cast<uint64_t*>(dcount.at(0)), nullptr));
    CUDA_ASSERT(cudaStreamSynchronize(nullptr));
    Bytes m2(m.size()), p2(p.size()), mw2(mw.size()), v2(n);
    uint64_t count = 0;
    CUDA_ASSERT(dm.download(0, &m2, nullptr));
    CUDA_ASSERT(dp.download(0, &p2, nullptr));
    CUDA_ASSERT(dmw.download(0, &mw2, nullptr));
    CUDA_ASSERT(dv.download(0, &v2, nullptr));
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
      CUDA_ASSERT(dx.upload(off, x, nullptr));
      const float stale = 5.0f;
      CUDA_ASSERT(cudaMemcpy(dflag.at(0), &stale, 4, cudaMemcpyHostToDevice));
      CUDA_ASSERT(kernels::lionFlagNonFinite(pc.type, dx.at(off), n, static_cast<float*>(dflag.at(0)), nullptr));
      CUDA_ASSERT(kernels::lionToFloat(pc.type, dx.at(off), static_cast<float*>(dout.at(0)), n, nullptr));
      CUDA_ASSERT(cudaStreamSynchronize(nullptr));
      float flag = -1.0f;
      CUDA_ASSERT(cudaMemcpy(&flag, dflag.at(0), 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(flag, lion::allFinite(pc.type, x.data(), n) ? 0.0f : 1.0f) << "where " << where;
      std::vector<float> want(n);
      lion::toFloat(pc.type, x.data(), want.data(), n);
      Bytes got(n * 4);
      CUDA_ASSERT(dout.download(0, &got, nullptr));
      ASSERT_TRUE(dout.guardIntact(0, got.size(), nullptr));
      ASSERT_EQ(got, floatBytes(want)) << "toFloat moves bits only";
      if (where != -1) continue;
      lion::divide(want.data(), 3.0f, n);
      CUDA_ASSERT(kernels::lionDivide(static_cast<float*>(dout.at(0)), 3.0f, n, nullptr));
      CUDA_ASSERT(cudaStreamSynchronize(nullptr));
      CUDA_ASSERT(dout.download(0, &got, nullptr));
      ASSERT_EQ(got, floatBytes(want));
    }
  }
}

}  // namespace
}  // namespace signlion
