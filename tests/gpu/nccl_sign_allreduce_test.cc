// ncclSignAllReduce on a GPU, against the plain reference bit for bit.
//
// N = 2, 3, 4 ranks as processes sharing the one device (perf/nccl_ranks.h:
// each its own NCCL_HOSTID, NCCL's traffic over our net plugin on loopback),
// over the matrix of counts, datatypes, ops, zero and tie rules, every
// algorithm and auto, in and out of place, aligned and not; a CUDA graph of a
// warm call replayed twice; ncclSignCommRelease, then the comm used again.
// The hierarchical algorithm over NCCL: 4 (and 5) processes on the one GPU,
// each its own NCCL_HOSTID (so NCCL connects them as hosts), grouped into 2
// nodes by config.hostId: host ids all-gathered, ncclCommSplit by node, the
// same matrix forced hierarchical and auto, a captured replay, release.
// The ranks report on stderr and through their exit codes (gtest does not
// run in them). Without a device every test skips and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bits/bits.h"
#include "common/vote_inputs.h"
#include "nccl_ranks.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;

int devices(std::string* why) {
  static std::string reason;
  static const int n = perf::probeCudaDevices(&reason);
  *why = reason;
  return n;
}

#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    std::string why_;                                                           \
    if (devices(&why_) < 1) GTEST_SKIP() << "no CUDA device answers: " << why_; \
  } while (0)

// Runs body on n ranks; every rank must exit 0.
void onRanks(int n, const std::function<int(int, int, ncclComm_t)>& body) {
  std::string why;
  perf::NcclRanksOptions o;
  o.nranks = n;
  o.devices = devices(&why);
  o.netPlugin = SIGNLION_TEST_PLUGIN_PATH;
  o.hostIdPrefix = "signlion-gpu-test";
  o.timeoutSec = 800;
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  std::vector<int> codes = perf::runNcclRanks(o, body);
  ASSERT_EQ((int)codes.size(), n);
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r << " (its stderr says why)";
}

// What one rank does, failures counted and printed.
class Rank {
 public:
  Rank(int rank, int nranks, ncclComm_t comm) : rank_(rank), n_(nranks), comm_(comm) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  }
  ~Rank() {
    for (void* p : bufs_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
  }
  int failures() const { return std::min(fails_, 100); }
  int rank() const { return rank_; }
  int nranks() const { return n_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

  bool check(bool ok, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    if (ok) return true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d/%d: FAILED: %s\n", rank_, n_, msg);
    fails_++;
    return false;
  }

  char* deviceBuffer(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes) == cudaSuccess, "cudaMalloc(%zu)", bytes);
    bufs_.push_back(p);
    return static_cast<char*>(p);
  }

  // Inputs in, garbage in and results out on the rank's own stream. The
  // stream is non-blocking, so it is not ordered after the legacy default
  // stream: a plain cudaMemset there may still be writing, and a small
  // cudaMemcpy from pageable memory may return before its DMA is done, when
  // the call on the stream starts reading.
  bool upload(char* d_dst, const void* src, size_t bytes) {
    return check(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, stream_) == cudaSuccess, "H2D");
  }
  bool fill(char* d_dst, int byte, size_t bytes) {
    return check(cudaMemsetAsync(d_dst, byte, bytes, stream_) == cudaSuccess, "cudaMemsetAsync");
  }
  // Holds the stream for 10 ms (a host function on it), so that what is
  // enqueued next runs late: a call that read its input or wrote its output
  // without waiting for the stream would then fail every time, not by chance.
  bool delay() {
    auto sleep10ms = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
    return check(cudaLaunchHostFunc(stream_, sleep10ms, nullptr) == cudaSuccess, "cudaLaunchHostFunc");
  }
  bool download(void* dst, const char* d_src, size_t bytes) {
    return check(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, stream_) == cudaSuccess, "D2H") &&
           check(cudaStreamSynchronize(stream_) == cudaSuccess, "D2H: cudaStreamSynchronize");
  }

  // hostId: the node this rank acts as (NULL: as the environment says).
  bool setConfig(ncclSignAlgo_t algo, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, const char* hostId = nullptr) {
    ncclSignConfig_t cfg = NCCL_SIGN_CONFIG_INITIALIZER;
    cfg.algorithm = algo;
    cfg.zeroRule = zero;
    cfg.tieRule = tie;
    cfg.hostId = hostId;
    return check(ncclSignCommSetConfig(comm_, &cfg) == ncclSuccess, "ncclSignCommSetConfig");
  }

  // Puts input and garbage on the device (send at d_send, output at d_recv;
  // in place: both d_recv), runs the call, compares with want. The input of
  // an out-of-place call must come back untouched.
  bool call(const Bytes& input, const Bytes& want, size_t count, ncclDataType_t dt, ncclSignOp_t op, char* d_send,
            char* d_recv, bool inPlace, const std::string& what) {
    const size_t bytes = count * bits::typeSize(dt);
    char* send = inPlace ? d_recv : d_send;
    if (bytes > 0) {
      if (!upload(send, input.data(), bytes)) return false;
      if (!inPlace && !fill(d_recv, 0xEE, bytes)) return false;
    }
    ncclResult_t res = ncclSignAllReduce(send, d_recv, count, dt, op, comm_, stream_);
    if (!check(res == ncclSuccess, "%s: ncclSignAllReduce returned %s", what.c_str(), ncclGetErrorString(res)))
      return false;
    cudaError_t err = cudaStreamSynchronize(stream_);
    if (!check(err == cudaSuccess, "%s: cudaStreamSynchronize: %s", what.c_str(), cudaGetErrorString(err)))
      return false;
    return compare(d_recv, want, count, dt, what) &&
           (inPlace || compare(d_send, input, count, dt, what + " (input changed)"));
  }

  bool compare(const char* d_buf, const Bytes& want, size_t count, ncclDataType_t dt, const std::string& what) {
    Bytes got(want.size());
    if (!got.empty() && !download(got.data(), d_buf, got.size())) return false;
    size_t bad = test::firstMismatch(got, want);
    return check(bad == std::string::npos, "%s: first wrong element %zu of %zu", what.c_str(), bad / bits::typeSize(dt),
                 count);
  }

 private:
  int rank_, n_;
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> bufs_;
  int fails_ = 0;
};

const char* algoText(ncclSignAlgo_t a) {
  static const char* names[] = {"auto", "ring", "hd", "allgather", "fieldsum", "hier", "direct", "tree"};
  static_assert(sizeof(names) / sizeof(names[0]) == ncclSignNumAlgos, "a name for every algorithm");
  return names[a];
}

std::string describe(size_t count, ncclDataType_t dt, ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                     ncclSignAlgo_t algo, bool inPlace, size_t offset) {
  char buf[200];
  snprintf(buf, sizeof(buf), "count %zu %s %s zero %d tie %d %s %s%s", count, bits::typeName(dt),
           op == ncclSignAverage ? "average" : "majority", (int)zero, (int)tie, algoText(algo),
           inPlace ? "in-place" : "out-of-place", offset ? " misaligned" : "");
  return buf;
}

// The matrix over `algos`, every rank acting as node hostId(rank) (NULL: the
// environment's). Every config carries the host id, so the first call on
// the comm learns the nodes with it.
int matrixOf(int rank, int n, ncclComm_t comm, const std::vector<ncclSignAlgo_t>& algos,
             const char* (*hostId)(int rank, int n)) {
  Rank R(rank, n, comm);
  const char* host = hostId ? hostId(rank, n) : nullptr;
  const size_t kCounts[] = {0, 1, 63, 64, 65, 4097, 1000003};
  const ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  const size_t maxBytes = 1000003 * 4 + 64;
  char* d_send = R.deviceBuffer(maxBytes);
  char* d_recv = R.deviceBuffer(maxBytes);
  for (size_t count : kCounts) {
    for (ncclDataType_t dt : kTypes) {
      const size_t esize = bits::typeSize(dt);
      std::vector<Bytes> inputs = test::randomVoteInputs(n, count, dt, 1000u + (uint32_t)count * 7u + (uint32_t)dt);
      for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
        if (op == ncclSignAverage && dt == ncclInt8) continue;
        for (int z = 0; z < ncclSignNumZeroRules; z++) {
          for (int t = 0; t < (op == ncclSignAverage ? 1 : (int)ncclSignNumTieRules); t++) {
            const auto zero = (ncclSignZeroRule_t)z;
            const auto tie = (ncclSignTieRule_t)t;
            Bytes want = test::referenceOutput(inputs, count, dt, op, zero, tie);
            for (ncclSignAlgo_t algo : algos) {
              if (!R.setConfig(algo, zero, tie, host)) return R.failures();
              for (size_t offset : {size_t{0}, size_t{1}}) {
                if (offset && count != 4097) continue;  // element pointers off every vector alignment
                for (bool inPlace : {false, true}) {
                  // The first rule pair of each algorithm: its copies wait behind a held stream.
                  if (z == 0 && t == 0 && !R.delay()) return R.failures();
                  R.call(inputs[rank], want, count, dt, op, d_send + offset * esize, d_recv + offset * esize, inPlace,
                         describe(count, dt, op, zero, tie, algo, inPlace, offset));
                }
                if (R.failures() > 20) return R.failures();
              }
            }
          }
        }
      }
    }
  }
  // Zero elements: nothing is read, NULL buffers are fine.
  R.check(ncclSignAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSignMajority, comm, R.stream()) == ncclSuccess,
          "count 0 with NULL buffers");
  R.check(ncclSignCommRelease(comm) == ncclSuccess, "ncclSignCommRelease");
  return R.failures();
}

std::vector<ncclSignAlgo_t> everyAlgorithm() {
  std::vector<ncclSignAlgo_t> v;
  for (int a = 0; a < ncclSignNumAlgos; a++) v.push_back((ncclSignAlgo_t)a);
  return v;
}

int matrix(int rank, int n, ncclComm_t comm) { return matrixOf(rank, n, comm, everyAlgorithm(), nullptr); }

// Two nodes: the first half of the ranks (rounded up) and the rest.
const char* twoNodes(int rank, int n) { return rank < (n + 1) / 2 ? "signlion-gpu-node-a" : "signlion-gpu-node-b"; }

int hierMatrix(int rank, int n, ncclComm_t comm) {
  return matrixOf(rank, n, comm, {ncclSignAlgoHierarchical, ncclSignAlgoAuto}, twoNodes);
}

TEST(NcclSignAllReduceGpu, MatrixOnTwoRanks) {
  SKIP_WITHOUT_GPU();
  onRanks(2, matrix);
}

TEST(NcclSignAllReduceGpu, MatrixOnThreeRanks) {
  SKIP_WITHOUT_GPU();
  onRanks(3, matrix);
}

TEST(NcclSignAllReduceGpu, MatrixOnFourRanks) {
  SKIP_WITHOUT_GPU();
  onRanks(4, matrix);
}

// 2 nodes x 2 ranks, and unequal nodes of 3 and 2.
TEST(NcclSignAllReduceGpu, HierarchicalOnTwoNodesOfTwo) {
  SKIP_WITHOUT_GPU();
  onRanks(4, hierMatrix);
}

TEST(NcclSignAllReduceGpu, HierarchicalOnNodesOfThreeAndTwo) {
  SKIP_WITHOUT_GPU();
  onRanks(5, hierMatrix);
}

// A warm call captured into a CUDA graph and replayed twice on new inputs;
// a call that would have to grow the scratch during capture is refused.
int graphsOf(int rank, int n, ncclComm_t comm, const char* host) {
  Rank R(rank, n, comm);
  const size_t count = 65541, big = size_t{16} << 20;
  const ncclDataType_t dt = ncclBfloat16;
  const size_t bytes = big * bits::typeSize(dt);
  char* d_send = R.deviceBuffer(bytes);
  char* d_recv = R.deviceBuffer(bytes);
  for (int a = 0; a < ncclSignNumAlgos; a++) {
    const auto algo = (ncclSignAlgo_t)a;
    const std::string what = std::string("graph ") + algoText(algo);
    if (!R.setConfig(algo, ncclSignZeroAbstain, ncclSignTieZero, host)) break;
    std::vector<Bytes> warm = test::randomVoteInputs(n, count, dt, 5u + a);
    R.call(warm[rank], test::referenceOutput(warm, count, dt, ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero),
           count, dt, ncclSignMajority, d_send, d_recv, false, what + " warm-up");
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    R.check(cudaStreamBeginCapture(R.stream(), cudaStreamCaptureModeGlobal) == cudaSuccess, "BeginCapture");
    ncclResult_t res = ncclSignAllReduce(d_send, d_recv, count, dt, ncclSignMajority, comm, R.stream());
    R.check(cudaStreamEndCapture(R.stream(), &graph) == cudaSuccess, "%s: EndCapture", what.c_str());
    if (!R.check(res == ncclSuccess, "%s: captured call returned %s", what.c_str(), ncclGetErrorString(res))) break;
    if (!R.check(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "%s: instantiate", what.c_str())) break;
    for (int replay = 0; replay < 2; replay++) {
      std::vector<Bytes> in = test::randomVoteInputs(n, count, dt, 100u + 10u * a + replay);
      Bytes want = test::referenceOutput(in, count, dt, ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero);
      R.upload(d_send, in[rank].data(), in[rank].size());
      R.fill(d_recv, 0xEE, in[rank].size());
      R.check(cudaGraphLaunch(exec, R.stream()) == cudaSuccess, "%s: launch", what.c_str());
      R.check(cudaStreamSynchronize(R.stream()) == cudaSuccess, "%s: sync", what.c_str());
      R.compare(d_recv, want, count, dt, what + " replay " + std::to_string(replay));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  // Cold: a size whose scratch was never made, during capture.
  R.setConfig(ncclSignAlgoRing, ncclSignZeroPositive, ncclSignTieZero, host);
  cudaGraph_t graph = nullptr;
  R.check(cudaStreamBeginCapture(R.stream(), cudaStreamCaptureModeGlobal) == cudaSuccess, "BeginCapture");
  ncclResult_t res = ncclSignAllReduce(d_send, d_recv, big, dt, ncclSignMajority, comm, R.stream());
  R.check(cudaStreamEndCapture(R.stream(), &graph) == cudaSuccess, "EndCapture after a refused call");
  R.check(res == ncclInvalidUsage, "growing the scratch during capture returned %s", ncclGetErrorString(res));
  if (graph) cudaGraphDestroy(graph);
  // Outside capture the same call runs.
  std::vector<Bytes> in = test::randomVoteInputs(n, big, dt, 77u);
  R.call(in[rank], test::referenceOutput(in, big, dt, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero), big, dt,
         ncclSignMajority, d_send, d_recv, true, "big after capture");
  R.check(ncclSignCommRelease(comm) == ncclSuccess, "ncclSignCommRelease");
  return R.failures();
}

int graphs(int rank, int n, ncclComm_t comm) { return graphsOf(rank, n, comm, nullptr); }

TEST(NcclSignAllReduceGpu, CapturedWarmCallReplaysTwice) {
  SKIP_WITHOUT_GPU();
  onRanks(2, graphs);
}

// The same on 2 nodes x 2: the node exchange and ncclCommSplit happen at the
// first (warm-up) call, so the captured hierarchical call enqueues only
// kernels and NCCL operations.
TEST(NcclSignAllReduceGpu, CapturedHierarchicalCallReplaysTwice) {
  SKIP_WITHOUT_GPU();
  onRanks(4, [](int rank, int n, ncclComm_t comm) { return graphsOf(rank, n, comm, twoNodes(rank, n)); });
}

// Release frees what signlion cached (the config too); the comm works again
// afterwards, the cache made anew. Host buffers are refused on the way.
int releaseAndReuse(int rank, int n, ncclComm_t comm) {
  Rank R(rank, n, comm);
  const size_t count = 100000;
  const ncclDataType_t dt = ncclFloat32;
  char* d_send = R.deviceBuffer(count * 4);
  char* d_recv = R.deviceBuffer(count * 4);
  std::vector<Bytes> in = test::randomVoteInputs(n, count, dt, 9u);
  Bytes want = test::referenceOutput(in, count, dt, ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero);
  for (int round = 0; round < 3; round++) {
    R.call(in[rank], want, count, dt, ncclSignAverage, d_send, d_recv, round == 1, "round " + std::to_string(round));
    R.check(ncclSignCommRelease(comm) == ncclSuccess, "release %d", round);
    R.check(ncclSignCommRelease(comm) == ncclSuccess, "second release %d", round);
  }
  // Host memory is refused without harm to the comm.
  std::vector<float> host(count);
  R.check(ncclSignAllReduce(host.data(), d_recv, count, dt, ncclSignMajority, comm, R.stream()) == ncclInvalidArgument,
          "host sendbuff accepted");
  R.check(ncclSignAllReduce(d_send, host.data(), count, dt, ncclSignMajority, comm, R.stream()) == ncclInvalidArgument,
          "host recvbuff accepted");
  R.call(in[rank], want, count, dt, ncclSignAverage, d_send, d_recv, false, "after refusals");
  R.check(ncclSignCommRelease(comm) == ncclSuccess, "final release");
  return R.failures();
}

TEST(NcclSignAllReduceGpu, ReleaseThenReuse) {
  SKIP_WITHOUT_GPU();
  onRanks(3, releaseAndReuse);
}

}  // namespace
}  // namespace signlion
