// Distributed Lion across processes on one GPU: N = 2 and 4 ranks, each a
// forked process with its own NCCL_HOSTID (so NCCL treats them as separate
// hosts) and NCCL_NET_PLUGIN = our built libnccl-net-signlion.so (NCCL's
// traffic over our socket transport on loopback). In every rank the device
// optimizer (ncclSignLionCreateNccl on an NCCL communicator) and the host
// optimizer (ncclSignLionCreate on a host communicator) take the same steps
// from the same gradients; their parameters must be equal bit for bit after
// every step, and their saved states (momentum, master copy, counters) after
// the last, for mavo, average, global and local, fp32/fp16/bf16, master copy,
// skipped non-finite steps, and (N = 2, where an fp32 sum of two is one
// rounding in any order) Lion Cub momentum averaging.
//
// Gradients are multiples of 2^-8 in [-4, 4], so the sum of "global" is
// exact in NCCL's order and in the host ring's. The test process never
// touches CUDA itself: the ranks fork from a single-threaded parent, and a
// rank that finds no GPU exits with kNoGpu, which makes the test SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nccl_sign.h"

namespace signlion {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr int kTimeoutMs = 240000;
// Child exit codes.
enum : int { kOk = 0, kFailed = 1, kNoId = 2, kNoGpu = 77 };

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

  bool init(const ncclUniqueId& nid, const ncclSignUniqueId& sid) {
    RANK_CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    RANK_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess, "stream");
    ncclResult_t r = ncclCommInitRank(&ncomm_, nranks_, nid, rank_);
    RANK_CHECK(r == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(r));
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.timeoutMs = kTimeoutMs;
    r = ncclSignCommInitRank(&scomm_, nranks_, sid, rank_, &config);
    RANK_CHECK(r == ncclSuccess, "ncclSignCommInitRank: %d", (int)r);
    return true;
  }

  ~Rank() {
    if (scomm_ != nullptr) ncclSignCommDestroy(scomm_);
    if (ncomm_ != nullptr) {
      ncclSignCommRelease(ncomm_);
      ncclCommDestroy(ncomm_);
    }
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
    RANK_CHECK(cudaMemcpy(dp, p.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
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
      RANK_CHECK(cudaMemcpy(got.data(), dp, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
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

// Reads exactly `bytes` from fd within the timeout.
bool readAll(int fd, void* buf, size_t bytes) {
  size_t got = 0;
  for (int64_t end = nowMs() + kTimeoutMs; got < bytes && nowMs() < end;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;
    ssize_t k = read(fd, static_cast<char*>(buf) + got, bytes - got);
    if (k <= 0) return false;
    got += (size_t)k;
  }
  return got == bytes;
}

struct Ids {
  ncclUniqueId nccl;
  ncclSignUniqueId sign;
};

// One rank's life in a child process; returns its exit code.
int rankMain(int rank, int nranks, const std::vector<int>& idWrite, int idRead) {
  // Each rank a host of its own to NCCL, talking through our net plugin.
  const std::string hostId = "signlion-lion-" + std::to_string(getppid()) + "-" + std::to_string(rank);
  setenv("NCCL_HOSTID", hostId.c_str(), 1);
  setenv("NCCL_NET_PLUGIN", SIGNLION_TEST_PLUGIN_PATH, 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return kNoGpu;
  Ids ids;
  if (rank == 0) {
    if (ncclGetUniqueId(&ids.nccl) != ncclSuccess || ncclSignGetUniqueId(&ids.sign) != ncclSuccess) return kFailed;
    for (int fd : idWrite)
      if (write(fd, &ids, sizeof(ids)) != (ssize_t)sizeof(ids)) return kFailed;
  } else if (!readAll(idRead, &ids, sizeof(ids))) {
    return kNoId;
  }
  Rank r(rank, nranks);
  if (!r.init(ids.nccl, ids.sign)) return kFailed;
  const std::vector<Case> all = cases(nranks);
  for (size_t i = 0; i < all.size(); i++)
    if (!r.run(all[i], (int)i)) return kFailed;
  return kOk;
}

int reap(pid_t pid, int64_t limitMs) {
  int status = 0;
  for (int64_t end = nowMs() + limitMs; nowMs() < end;) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// Forks the ranks (rank 0 hands the ids to the others through pipes) and
// returns their exit codes.
std::vector<int> runRanks(int nranks) {
  std::vector<int> readEnd(nranks, -1), writeEnd;
  for (int r = 1; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) return std::vector<int>(nranks, -2);
    readEnd[r] = fds[0];
    writeEnd.push_back(fds[1]);
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) _exit(rankMain(r, nranks, r == 0 ? writeEnd : std::vector<int>(), readEnd[r]));
    pids.push_back(pid);
  }
  for (int fd : readEnd)
    if (fd >= 0) close(fd);
  for (int fd : writeEnd) close(fd);
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(reap(pid, kTimeoutMs + 60000));
  return codes;
}

void checkRanks(int nranks) {
  std::vector<int> codes = runRanks(nranks);
  int noGpu = 0;
  for (int c : codes) noGpu += c == kNoGpu;
  if (noGpu == nranks) GTEST_SKIP() << "no GPU: cudaGetDeviceCount found none in the rank processes";
  for (int r = 0; r < nranks; r++) EXPECT_EQ(codes[r], kOk) << "rank " << r << " (see its lines above)";
}

TEST(LionNcclMultiProcess, DeviceEqualsHostOptimizerTwoRanks) { checkRanks(2); }

TEST(LionNcclMultiProcess, DeviceEqualsHostOptimizerFourRanks) { checkRanks(4); }

}  // namespace
}  // namespace signlion
