// ncclSignAllReduce on a GPU, against the plain reference bit for bit.
//
// N = 2, 3, 4 ranks as processes sharing the one device (perf/nccl_ranks.h:
// each its own NCCL_HOSTID, NCCL's traffic over our net plugin on loopback),
// over the matrix of counts, datatypes, ops, zero and tie rules, every
// algorithm and auto, in and out of place, aligned and not; each call's
// inputs differ from the previous call's (so scratch left by that call holds
// other values than this one's) and bytes around the output must stay as they
// were. At N = 3 the matrix again with small chunks and segments, so that
// every step moves several chunks and a call runs as several segments. A CUDA
// graph of a warm call replayed twice; a replay and an eager call on another
// stream, and two graphs replayed on two streams, each ordered after the
// other; ncclSignCommRelease, then the comm used again.
// The hierarchical algorithm over NCCL: 4 (and 5) processes on the one GPU,
// each its own NCCL_HOSTID (so NCCL connects them as hosts), grouped into 2
// nodes by config.hostId: host ids all-gathered, ncclCommSplit by node, the
// same matrix forced hierarchical and auto, a captured replay, release.
// The ranks report on stderr and through their exit codes (gtest does not
// run in them); a rank past kFailuresShown failures makes the rest of its
// calls unchecked, so that its peers, blocked in NCCL otherwise, finish and
// report too. Without a device every test skips and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bits/bits.h"
#include "common/nccl_small_pieces.h"
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

// Failures a rank prints and checks up to; past them it still makes every
// call, unchecked, so that its peers are not left waiting in NCCL.
constexpr int kFailuresShown = 20;
// Bytes after every output (and the element before a misaligned one) that a
// call must leave as they were, set to kCanary before each call.
constexpr size_t kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xC3;

// What one rank does, failures counted and printed.
class Rank {
 public:
  Rank(int rank, int nranks, ncclComm_t comm) : rank_(rank), n_(nranks), comm_(comm) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  }
  ~Rank() {
    for (void* p : bufs_) cudaFree(p);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
    if (stream_) cudaStreamDestroy(stream_);
  }
  int failures() const { return std::min(fails_, 100); }
  // Whether results are still compared (see kFailuresShown).
  bool checking() const { return fails_ <= kFailuresShown; }
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
    fails_++;
    if (fails_ <= kFailuresShown) fprintf(stderr, "rank %d/%d: FAILED: %s\n", rank_, n_, msg);
    if (fails_ == kFailuresShown + 1)
      fprintf(stderr, "rank %d/%d: more than %d failures: the remaining calls run unchecked, so the peers finish\n",
              rank_, n_, kFailuresShown);
    return false;
  }

  // A device buffer of `bytes`, and kCanaryBytes more for the canary past
  // the largest output it will hold.
  char* deviceBuffer(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes + kCanaryBytes) == cudaSuccess, "cudaMalloc(%zu)", bytes + kCanaryBytes);
    bufs_.push_back(p);
    return static_cast<char*>(p);
  }
  // Another non-blocking stream of this rank's, destroyed with it.
  cudaStream_t newStream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
    streams_.push_back(s);
    return s;
  }

  // Inputs in, garbage in and results out on a stream of the rank's (s, or
  // its own stream when s is null). The streams are non-blocking, so they are
  // not ordered after the legacy default stream: a plain cudaMemset there may
  // still be writing, and a small cudaMemcpy from pageable memory may return
  // before its DMA is done, when the call on the stream starts reading.
  bool upload(char* d_dst, const void* src, size_t bytes, cudaStream_t s = nullptr) {
    return check(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, on(s)) == cudaSuccess, "H2D");
  }
  bool fill(char* d_dst, int byte, size_t bytes, cudaStream_t s = nullptr) {
    return check(cudaMemsetAsync(d_dst, byte, bytes, on(s)) == cudaSuccess, "cudaMemsetAsync");
  }
  // Holds the stream for 10 ms (a host function on it), so that what is
  // enqueued next runs late: a call that read its input or wrote its output
  // without waiting for the stream, or one on another stream that did not
  // wait for it, would then fail every time, not by chance.
  bool delay(cudaStream_t s = nullptr) {
    auto sleep10ms = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
    return check(cudaLaunchHostFunc(on(s), sleep10ms, nullptr) == cudaSuccess, "cudaLaunchHostFunc");
  }
  bool download(void* dst, const char* d_src, size_t bytes) {
    return check(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, stream_) == cudaSuccess, "D2H") &&
           check(cudaStreamSynchronize(stream_) == cudaSuccess, "D2H: cudaStreamSynchronize");
  }
  bool sync(cudaStream_t s, const std::string& what) {
    cudaError_t err = cudaStreamSynchronize(on(s));
    return check(err == cudaSuccess, "%s: cudaStreamSynchronize: %s", what.c_str(), cudaGetErrorString(err));
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

  // One call's buffers: its input at send (in place: at recv), its output at
  // recv, `head` bytes before recv that belong to no call (a misaligned
  // output's element before it).
  struct Io {
    char* send;
    char* recv;
    bool inPlace;
    size_t head;
  };
  // Puts input, garbage in the output and the canaries on the device, on
  // stream s.
  bool stage(const Io& io, const Bytes& input, cudaStream_t s = nullptr) {
    const size_t bytes = input.size();
    char* send = io.inPlace ? io.recv : io.send;
    if (bytes > 0 && !upload(send, input.data(), bytes, s)) return false;
    if (!io.inPlace && bytes > 0 && !fill(io.recv, 0xEE, bytes, s)) return false;
    if (io.head > 0 && !fill(io.recv - io.head, kCanary, io.head, s)) return false;
    return fill(io.recv + bytes, kCanary, kCanaryBytes, s);
  }
  // The output against want, the input of an out-of-place call untouched,
  // the canaries unchanged; the stream that ran the call already synchronized.
  bool verify(const Io& io, const Bytes& input, const Bytes& want, size_t count, ncclDataType_t dt,
              const std::string& what) {
    if (!checking()) return false;
    const Bytes canary(kCanaryBytes, kCanary);
    const Bytes head(io.head, kCanary);
    return compare(io.recv, want, count, dt, what) &&
           (io.inPlace || compare(io.send, input, count, dt, what + " (input changed)")) &&
           compareBytes(io.recv + want.size(), canary, what + ": the bytes after the output changed") &&
           (io.head == 0 || compareBytes(io.recv - io.head, head, what + ": the bytes before the output changed"));
  }

  // Stages, runs the call on the rank's stream, waits, verifies.
  bool call(const Bytes& input, const Bytes& want, size_t count, ncclDataType_t dt, ncclSignOp_t op, const Io& io,
            const std::string& what) {
    if (!stage(io, input)) return false;
    ncclResult_t res = ncclSignAllReduce(io.inPlace ? io.recv : io.send, io.recv, count, dt, op, comm_, stream_);
    if (!check(res == ncclSuccess, "%s: ncclSignAllReduce returned %s", what.c_str(), ncclGetErrorString(res)))
      return false;
    return sync(stream_, what) && verify(io, input, want, count, dt, what);
  }
  bool call(const Bytes& input, const Bytes& want, size_t count, ncclDataType_t dt, ncclSignOp_t op, char* d_send,
            char* d_recv, bool inPlace, const std::string& what) {
    return call(input, want, count, dt, op, Io{d_send, d_recv, inPlace, 0}, what);
  }

  bool compare(const char* d_buf, const Bytes& want, size_t count, ncclDataType_t dt, const std::string& what) {
    Bytes got(want.size());
    if (!got.empty() && !download(got.data(), d_buf, got.size())) return false;
    size_t bad = test::firstMismatch(got, want);
    return check(bad == std::string::npos, "%s: first wrong element %zu of %zu", what.c_str(), bad / bits::typeSize(dt),
                 count);
  }
  bool compareBytes(const char* d_buf, const Bytes& want, const std::string& what) {
    Bytes got(want.size());
    if (!got.empty() && !download(got.data(), d_buf, got.size())) return false;
    size_t bad = test::firstMismatch(got, want);
    return check(bad == std::string::npos, "%s (byte %zu of %zu)", what.c_str(), bad, want.size());
  }

 private:
  cudaStream_t on(cudaStream_t s) const { return s != nullptr ? s : stream_; }

  int rank_, n_;
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaStream_t> streams_;
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

// What a matrix runs over besides the algorithms and rules.
struct MatrixShape {
  std::vector<size_t> counts;
  std::vector<ncclDataType_t> types;
  size_t misaligned;  // the count run misaligned too (0: none)
};

const MatrixShape kFullMatrix{{0, 1, 63, 64, 65, 4097, 1000003},
                              {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8},
                              4097};

// Input sets per count and datatype. A call takes one that neither the
// previous call nor the previous call of its algorithm (which laid out the
// scratch as it does) took: the scratch then holds other counters and
// results than this call's, and a read that overtook its write finds them.
constexpr int kInputSets = 3;

// The matrix over `algos`, every rank acting as node hostId(rank) (NULL: the
// environment's). Every config carries the host id, so the first call on
// the comm learns the nodes with it.
int matrixOf(int rank, int n, ncclComm_t comm, const std::vector<ncclSignAlgo_t>& algos,
             const char* (*hostId)(int rank, int n), const MatrixShape& shape = kFullMatrix) {
  Rank R(rank, n, comm);
  const char* host = hostId ? hostId(rank, n) : nullptr;
  const size_t maxCount = *std::max_element(shape.counts.begin(), shape.counts.end());
  const size_t maxBytes = maxCount * 4 + 64;  // room for a misaligned output's offset
  char* d_send = R.deviceBuffer(maxBytes);
  char* d_recv = R.deviceBuffer(maxBytes);
  int lastSet = -1;
  std::vector<int> lastSetOf(ncclSignNumAlgos, -1);
  for (size_t count : shape.counts) {
    for (ncclDataType_t dt : shape.types) {
      const size_t esize = bits::typeSize(dt);
      std::vector<std::vector<Bytes>> inputs;
      for (int k = 0; k < kInputSets; k++)
        inputs.push_back(
            test::randomVoteInputs(n, count, dt, 1000u + (uint32_t)count * 7u + (uint32_t)dt + 100003u * (uint32_t)k));
      for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
        if (op == ncclSignAverage && dt == ncclInt8) continue;
        for (int z = 0; z < ncclSignNumZeroRules; z++) {
          for (int t = 0; t < (op == ncclSignAverage ? 1 : (int)ncclSignNumTieRules); t++) {
            const auto zero = (ncclSignZeroRule_t)z;
            const auto tie = (ncclSignTieRule_t)t;
            std::vector<Bytes> want(kInputSets);  // made when first needed
            for (ncclSignAlgo_t algo : algos) {
              R.setConfig(algo, zero, tie, host);
              for (size_t offset : {size_t{0}, size_t{1}}) {
                if (offset && count != shape.misaligned) continue;  // element pointers off every vector alignment
                for (bool inPlace : {false, true}) {
                  int set = 0;
                  while (set == lastSet || set == lastSetOf[algo]) set++;
                  lastSet = lastSetOf[algo] = set;
                  if (want[set].empty() && count > 0)
                    want[set] = test::referenceOutput(inputs[set], count, dt, op, zero, tie);
                  // The first rule pair of each algorithm: its copies wait behind a held stream.
                  if (z == 0 && t == 0) R.delay();
                  const Rank::Io io{d_send + offset * esize, d_recv + offset * esize, inPlace, offset * esize};
                  R.call(inputs[set][rank], want[set], count, dt, op, io,
                         describe(count, dt, op, zero, tie, algo, inPlace, offset) + " inputs " + std::to_string(set));
                }
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

// Sets an environment variable for the scope (ranks forked in it inherit
// it), restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* had = getenv(name);
    if (had != nullptr) had_ = std::make_unique<std::string>(had);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, had_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::unique_ptr<std::string> had_;
};

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

// With the default chunk (4 MiB) and segment (64M elements) every transfer
// of the matrix above is one chunk and every call one segment. Here
// (common/nccl_small_pieces.h, whose sizes tests/unit/nccl_plan_test.cc
// checks) a step's transfers are cut into several chunks, each one's adds
// running on the side stream while the next one moves, and calls of several
// segments reuse the scratch one segment after the other.
TEST(NcclSignAllReduceGpu, MatrixOnThreeRanksInSmallChunksAndSegments) {
  SKIP_WITHOUT_GPU();
  ScopedEnv chunk("SIGNLION_NCCL_CHUNK_BYTES", std::to_string(test::kSmallChunkBytes));
  ScopedEnv segment("SIGNLION_NCCL_SEGMENT", std::to_string(test::kSmallSegment));
  const MatrixShape shape{std::vector<size_t>(std::begin(test::kSmallPiecesCounts), std::end(test::kSmallPiecesCounts)),
                          {ncclFloat32, ncclBfloat16, ncclInt8},
                          test::kSmallPiecesCounts[0]};
  onRanks(3, [&shape](int rank, int n, ncclComm_t comm) {
    return matrixOf(rank, n, comm, everyAlgorithm(), nullptr, shape);
  });
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

// Calls on one comm share its scratch whatever stream they are made on
// (docs/NCCL.md, "Streams and ordering"), replays of captured calls too. Per
// algorithm, after a warm-up, a call is captured on stream 1 (graph 1) and
// another on stream 2 (graph 2), each with its own buffers; then
//  - graph 1 replayed on stream 1, and at once an eager call on stream 2;
//  - an eager call on stream 2, and at once graph 1 replayed on stream 1;
//  - graph 1 replayed on stream 1, and at once graph 2 on stream 2.
// The first of each pair is held back 10 ms on its stream, so that the
// second, unless it waits for the first, runs before or alongside it on the
// same scratch. Every call has its own inputs; both results must be the
// reference and the bytes around the outputs unchanged. Last, a graph of two
// calls captured on one stream, as a training step holds several: each
// waits for and marks the comm's last use inside the one graph. A rank whose
// capture failed makes eager calls in place of its replays, so that its peers
// finish.
int replaysOrdered(int rank, int n, ncclComm_t comm) {
  Rank R(rank, n, comm);
  const size_t count = 65541;
  const ncclDataType_t dt = ncclBfloat16;
  const ncclSignOp_t op = ncclSignMajority;
  const ncclSignZeroRule_t zero = ncclSignZeroAbstain;
  const ncclSignTieRule_t tie = ncclSignTieZero;
  const size_t bytes = count * bits::typeSize(dt);
  cudaStream_t s1 = R.stream(), s2 = R.newStream();
  const Rank::Io a{R.deviceBuffer(bytes), R.deviceBuffer(bytes), false, 0};
  const Rank::Io b{R.deviceBuffer(bytes), R.deviceBuffer(bytes), false, 0};
  uint32_t seed = 500;
  auto inputs = [&] { return test::randomVoteInputs(n, count, dt, seed++); };
  auto reference = [&](const std::vector<Bytes>& in) { return test::referenceOutput(in, count, dt, op, zero, tie); };
  auto eager = [&](const Rank::Io& io, cudaStream_t s, const std::string& what) {
    ncclResult_t res = ncclSignAllReduce(io.send, io.recv, count, dt, op, comm, s);
    R.check(res == ncclSuccess, "%s: ncclSignAllReduce returned %s", what.c_str(), ncclGetErrorString(res));
  };
  // A graph of calls on s, one per buffer set of ios.
  auto captureAll = [&](const std::vector<Rank::Io>& ios, cudaStream_t s, const std::string& what) -> cudaGraphExec_t {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    R.check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "%s: BeginCapture", what.c_str());
    ncclResult_t res = ncclSuccess;
    for (const Rank::Io& io : ios)
      if (res == ncclSuccess) res = ncclSignAllReduce(io.send, io.recv, count, dt, op, comm, s);
    R.check(cudaStreamEndCapture(s, &graph) == cudaSuccess, "%s: EndCapture", what.c_str());
    if (R.check(res == ncclSuccess, "%s: captured call returned %s", what.c_str(), ncclGetErrorString(res)) &&
        graph != nullptr)
      R.check(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "%s: instantiate", what.c_str());
    if (graph != nullptr) cudaGraphDestroy(graph);
    return exec;
  };
  auto capture = [&](const Rank::Io& io, cudaStream_t s, const std::string& what) {
    return captureAll({io}, s, what);
  };
  auto replay = [&](cudaGraphExec_t exec, const Rank::Io& io, cudaStream_t s, const std::string& what) {
    if (exec == nullptr) return eager(io, s, what + " (in place of a replay)");
    R.check(cudaGraphLaunch(exec, s) == cudaSuccess, "%s: cudaGraphLaunch", what.c_str());
  };
  // Runs first(io1 on s1) held back, then second(io2 on s2) at once; checks both.
  using Run = std::function<void(const Rank::Io&, cudaStream_t, const std::string&)>;
  auto pair = [&](const Run& first, const Rank::Io& io1, cudaStream_t t1, const std::string& what1, const Run& second,
                  const Rank::Io& io2, cudaStream_t t2, const std::string& what2) {
    std::vector<Bytes> in1 = inputs(), in2 = inputs();
    R.stage(io1, in1[rank], t1);
    R.delay(t1);
    first(io1, t1, what1);
    R.stage(io2, in2[rank], t2);
    second(io2, t2, what2);
    R.sync(t1, what1);
    R.sync(t2, what2);
    R.verify(io1, in1[rank], reference(in1), count, dt, what1);
    R.verify(io2, in2[rank], reference(in2), count, dt, what2);
  };
  for (int alg = 0; alg < ncclSignNumAlgos; alg++) {
    const std::string name = algoText((ncclSignAlgo_t)alg);
    R.setConfig((ncclSignAlgo_t)alg, zero, tie);
    std::vector<Bytes> warm = inputs();
    R.call(warm[rank], reference(warm), count, dt, op, a, name + " warm-up");
    cudaGraphExec_t g1 = capture(a, s1, name + " graph 1"), g2 = capture(b, s2, name + " graph 2");
    const Run replay1 = [&](const Rank::Io& io, cudaStream_t s, const std::string& w) { replay(g1, io, s, w); };
    const Run replay2 = [&](const Rank::Io& io, cudaStream_t s, const std::string& w) { replay(g2, io, s, w); };
    pair(replay1, a, s1, name + ": graph 1 replayed on stream 1 (held)", eager, b, s2,
         name + ": then an eager call on stream 2");
    pair(eager, b, s2, name + ": an eager call on stream 2 (held)", replay1, a, s1,
         name + ": then graph 1 replayed on stream 1");
    pair(replay1, a, s1, name + ": graph 1 replayed on stream 1 (held)", replay2, b, s2,
         name + ": then graph 2 replayed on stream 2");
    if (g1 != nullptr) cudaGraphExecDestroy(g1);
    if (g2 != nullptr) cudaGraphExecDestroy(g2);
    // Two calls in one graph (a failed capture: both eager).
    const std::string what = name + ": graph of two calls on stream 1";
    cudaGraphExec_t both = captureAll({a, b}, s1, what);
    std::vector<Bytes> inA = inputs(), inB = inputs();
    R.stage(a, inA[rank], s1);
    R.stage(b, inB[rank], s1);
    R.delay(s1);
    if (both != nullptr) {
      R.check(cudaGraphLaunch(both, s1) == cudaSuccess, "%s: cudaGraphLaunch", what.c_str());
    } else {
      eager(a, s1, what + " (in place of a replay)");
      eager(b, s1, what + " (in place of a replay)");
    }
    R.sync(s1, what);
    if (both != nullptr) cudaGraphExecDestroy(both);
    R.verify(a, inA[rank], reference(inA), count, dt, what + ", the first");
    R.verify(b, inB[rank], reference(inB), count, dt, what + ", the second");
  }
  R.check(ncclSignCommRelease(comm) == ncclSuccess, "ncclSignCommRelease");
  return R.failures();
}

TEST(NcclSignAllReduceGpu, ReplayAndEagerCallsOnTwoStreamsWaitForEachOther) {
  SKIP_WITHOUT_GPU();
  onRanks(3, replaysOrdered);
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
