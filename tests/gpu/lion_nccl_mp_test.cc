// Distributed Lion across processes on one GPU: N = 2 and 4 ranks, each a
// forked process with its own NCCL_HOSTID (so NCCL treats them as separate
// hosts) and NCCL_NET_PLUGIN = our built libnccl-net-signlion.so (NCCL's
// traffic over our socket transport on loopback), started by
// perf/nccl_ranks.h. In every rank the device optimizer
// (ncclSignLionCreateNccl on the NCCL communicator) and the host optimizer
// (ncclSignLionCreate on a host communicator) take the same steps from the
// same gradients; their parameters must be equal bit for bit after every
// step, and their saved states (momentum, master copy, counters) after the
// last, for mavo, average, global and local, fp32/fp16/bf16, master copy,
// skipped non-finite steps, and (N = 2, where an fp32 sum of two is one
// rounding in any order) Lion Cub momentum averaging.
//
// Gradients are multiples of 2^-8 in [-4, 4], so the sum of "global" is
// exact in NCCL's order and in the host ring's. Without a GPU every test
// reports SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nccl_ranks.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr int kTimeoutMs = 300000;

#define RANK_CHECK(cond, ...)                                                \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "rank %d: %s:%d: ", rank_, __FILE__, __LINE__);       \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      return false;                                                          \
    }                                                                        \
  } while (0)

size_t typeSize(ncclDataType_t dt) { return dt == ncclFloat32 ? 4 : 2; }

// v as element i of a buffer of dt (v is exact in fp16 and bf16 here, or
// inf/NaN).
void setElem(Bytes& b, ncclDataType_t dt, size_t i, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  if (dt == ncclFloat32) {
    memcpy(b.data() + 4 * i, &v, 4);
  } else if (dt == ncclBfloat16) {
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(b.data() + 2 * i, &h, 2);
  } else {  // fp16 of a multiple of 2^-8 in [-4, 4], inf or NaN
    uint16_t h;
    if (std::isnan(v)) {
      h = 0x7e00;
    } else if (std::isinf(v)) {
      h = v > 0 ? 0x7c00 : 0xfc00;
    } else {
      const uint16_t sign = v < 0 ? 0x8000 : 0;
      float a = std::fabs(v);
      if (a == 0.0f) {
        h = sign;
      } else {
        int e = 0;
        float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
        h = sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2.0f - 1.0f) * 1024.0f);
      }
    }
    memcpy(b.data() + 2 * i, &h, 2);
  }
}

// Rank r's gradient at a step: multiples of 2^-8 in [-4, 4] (some zero).
Bytes grads(ncclDataType_t dt, size_t count, int rank, int step, bool nonFinite) {
  std::mt19937 rng(1000u * rank + step);
  std::uniform_int_distribution<int> q(-1024, 1024);
  Bytes g(count * typeSize(dt));
  for (size_t i = 0; i < count; i++) setElem(g, dt, i, i % 13 == 5 ? 0.0f : q(rng) / 256.0f);
  if (nonFinite) setElem(g, dt, count / 2, NAN);
  return g;
}

Bytes startParams(ncclDataType_t dt, size_t count) {
  Bytes p(count * typeSize(dt));
  for (size_t i = 0; i < count; i++) setElem(p, dt, i, (float)((int)(i % 97) - 48) / 64.0f);
  return p;
}

struct Case {
  int aggregation;
  ncclDataType_t type;
  bool master;
  bool skipNonFinite;
  int momentumAverageEvery;
};

std::vector<Case> cases(int nranks) {
  std::vector<Case> out;
  for (int agg : {ncclSignLionMajority, ncclSignLionAverage, ncclSignLionGlobal, ncclSignLionLocal}) {
    out.push_back({agg, ncclFloat32, false, false, 0});
    out.push_back({agg, ncclBfloat16, true, false, 0});
    out.push_back({agg, ncclFloat16, false, true, 0});
  }
  out.push_back({ncclSignLionMajority, ncclBfloat16, true, true, 0});
  if (nranks == 2) {
    out.push_back({ncclSignLionMajority, ncclFloat32, false, false, 2});
    out.push_back({ncclSignLionAverage, ncclBfloat16, true, true, 3});
  }
  return out;
}

class Rank {
 public:
  Rank(int rank, int nranks) : rank_(rank), nranks_(nranks) {}

  // The host communicator over the same ranks; its id travels from rank 0
  // by ncclBroadcast on the NCCL communicator.
  bool init(ncclComm_t ncomm) {
    ncomm_ = ncomm;
    RANK_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess, "stream");
    ncclSignUniqueId sid{};
    if (rank_ == 0) RANK_CHECK(ncclSignGetUniqueId(&sid) == ncclSuccess, "ncclSignGetUniqueId");
    void* d = nullptr;
    RANK_CHECK(cudaMalloc(&d, sizeof(sid)) == cudaSuccess, "cudaMalloc");
    // Every copy on stream_ (non-blocking: not ordered after the legacy default stream).
    bool ok = cudaMemcpyAsync(d, &sid, sizeof(sid), cudaMemcpyHostToDevice, stream_) == cudaSuccess &&
              ncclBroadcast(d, d, sizeof(sid), ncclChar, 0, ncomm, stream_) == ncclSuccess &&
              cudaMemcpyAsync(&sid, d, sizeof(sid), cudaMemcpyDeviceToHost, stream_) == cudaSuccess &&
              cudaStreamSynchronize(stream_) == cudaSuccess;
    cudaFree(d);
    RANK_CHECK(ok, "broadcasting the host communicator's id");
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.timeoutMs = kTimeoutMs;
    ncclResult_t r = ncclSignCommInitRank(&scomm_, nranks_, sid, rank_, &config);
    RANK_CHECK(r == ncclSuccess, "ncclSignCommInitRank: %d", (int)r);
    return true;
  }

  ~Rank() {
    if (scomm_ != nullptr) ncclSignCommDestroy(scomm_);
    if (ncomm_ != nullptr) ncclSignCommRelease(ncomm_);  // runNcclRanks destroys the comm
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  bool run(const Case& c, int caseIndex) {
    const size_t count = 1000 + 37 * caseIndex;
    const int steps = 5;
    ncclSignLionConfig_t config = NCCL_SIGN_LION_CONFIG_INITIALIZER;
    config.aggregation = c.aggregation;
    config.lr = 0.01f;
    config.weightDecay = 0.1f;
    config.masterWeights = c.master ? 1 : 0;
    config.skipNonFinite = c.skipNonFinite ? 1 : 0;
    config.momentumAverageEvery = c.momentumAverageEvery;
    const bool local = c.aggregation == ncclSignLionLocal;
    ncclSignLion_t host = nullptr, dev = nullptr;
    ncclResult_t r = ncclSignLionCreate(&host, count, c.type, &config, local ? nullptr : scomm_);
    RANK_CHECK(r == ncclSuccess, "case %d: ncclSignLionCreate: %d", caseIndex, (int)r);
    r = ncclSignLionCreateNccl(&dev, count, c.type, &config, local ? nullptr : ncomm_);
    RANK_CHECK(r == ncclSuccess, "case %d: ncclSignLionCreateNccl: %d", caseIndex, (int)r);
    const bool ok = compare(c, caseIndex, count, steps, host, dev);
    ncclSignLionDestroy(dev);
    ncclSignLionDestroy(host);
    return ok;
  }

 private:
  bool compare(const Case& c, int caseIndex, size_t count, int steps, ncclSignLion_t host, ncclSignLion_t dev) {
    const size_t bytes = count * typeSize(c.type);
    Bytes p = startParams(c.type, count);
    void *dp = nullptr, *dg = nullptr;
    RANK_CHECK(cudaMalloc(&dp, bytes) == cudaSuccess && cudaMalloc(&dg, bytes) == cudaSuccess, "cudaMalloc");
    bool ok = true;
    RANK_CHECK(cudaMemcpyAsync(dp, p.data(), bytes, cudaMemcpyHostToDevice, stream_) == cudaSuccess, "upload");
    int skipped = 0;
    for (int s = 0; s < steps && ok; s++) {
      // Step 2 of a skipping case: one rank's gradient holds a NaN.
      const bool bad = c.skipNonFinite && s == 2 && rank_ == nranks_ - 1;
      Bytes g = grads(c.type, count, rank_, s, bad);
      skipped += c.skipNonFinite && s == 2 && (c.aggregation != ncclSignLionLocal || bad);
      RANK_CHECK(cudaMemcpyAsync(dg, g.data(), bytes, cudaMemcpyHostToDevice, stream_) == cudaSuccess, "grads");
      ncclResult_t r = ncclSignLionStepAsync(dev, dp, dg, stream_);
      RANK_CHECK(r == ncclSuccess, "case %d step %d: ncclSignLionStepAsync: %d", caseIndex, s, (int)r);
      r = ncclSignLionStep(host, p.data(), g.data(), nullptr);
      RANK_CHECK(r == ncclSuccess, "case %d step %d: ncclSignLionStep: %d", caseIndex, s, (int)r);
      RANK_CHECK(cudaStreamSynchronize(stream_) == cudaSuccess, "sync");
      Bytes got(bytes);
      RANK_CHECK(cudaMemcpyAsync(got.data(), dp, bytes, cudaMemcpyDeviceToHost, stream_) == cudaSuccess &&
                     cudaStreamSynchronize(stream_) == cudaSuccess,
                 "download");
      if (got != p) {
        size_t i = 0;
        while (i < bytes && got[i] == p[i]) i++;
        fprintf(stderr, "rank %d: case %d (aggregation %d, dt %d) step %d: device parameters differ at byte %zu\n",
                rank_, caseIndex, c.aggregation, (int)c.type, s, i);
        ok = false;
      }
    }
    cudaFree(dp);
    cudaFree(dg);
    if (!ok) return false;
    uint64_t a = 0, k = 0;
    RANK_CHECK(ncclSignLionGetStepCount(dev, &a, &k) == ncclSuccess, "counts");
    RANK_CHECK(a == (uint64_t)(steps - skipped) && k == (uint64_t)skipped, "case %d: device counts %llu applied, %llu skipped",
               caseIndex, (unsigned long long)a, (unsigned long long)k);
    size_t sh = 0, sd = 0;
    RANK_CHECK(ncclSignLionGetStateSize(host, &sh) == ncclSuccess && ncclSignLionGetStateSize(dev, &sd) == ncclSuccess &&
                   sh == sd,
               "state sizes");
    Bytes stateHost(sh), stateDev(sd);
    RANK_CHECK(ncclSignLionSaveState(host, stateHost.data(), sh) == ncclSuccess, "save host");
    RANK_CHECK(ncclSignLionSaveState(dev, stateDev.data(), sd) == ncclSuccess, "save device");
    RANK_CHECK(stateHost == stateDev, "case %d: saved states differ", caseIndex);
    return true;
  }

  int rank_, nranks_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t ncomm_ = nullptr;
  ncclSignComm_t scomm_ = nullptr;
};

int rankBody(int rank, int nranks, ncclComm_t comm) {
  Rank r(rank, nranks);
  if (!r.init(comm)) return 1;
  const std::vector<Case> all = cases(nranks);
  for (size_t i = 0; i < all.size(); i++)
    if (!r.run(all[i], (int)i)) return 1;
  return 0;
}

void checkRanks(int nranks) {
  std::string why;
  const int devices = perf::probeCudaDevices(&why);
  if (devices < 1) GTEST_SKIP() << "no GPU: " << why;
  perf::NcclRanksOptions o;
  o.nranks = nranks;
  o.devices = devices;
  o.netPlugin = SIGNLION_TEST_PLUGIN_PATH;
  o.hostIdPrefix = "signlion-lion-test-" + std::to_string(getpid());
  o.timeoutSec = kTimeoutMs / 1000 + 60;
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  std::vector<int> codes = perf::runNcclRanks(o, rankBody);
  for (int r = 0; r < nranks; r++) EXPECT_EQ(codes[r], 0) << "rank " << r << " (see its lines above)";
}

TEST(LionNcclMultiProcess, DeviceEqualsHostOptimizerTwoRanks) { checkRanks(2); }

TEST(LionNcclMultiProcess, DeviceEqualsHostOptimizerFourRanks) { checkRanks(4); }

}  // namespace
}  // namespace signlion
