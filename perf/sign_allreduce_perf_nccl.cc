#include "sign_allreduce_perf_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "bits/bits.h"
#include "nccl_ranks.h"
#include "nccl_sign.h"
#include "perf_inputs.h"
#include "perf_report.h"

namespace signlion {
namespace perf {
namespace {

struct SignOp {
  const char* name;
  ncclSignOp_t op;
  Reduction red;
};
const SignOp kSignOps[] = {{"mavo", ncclSignMajority, Reduction::kMajority},
                           {"avg", ncclSignAverage, Reduction::kAverage}};

struct Type {
  const char* name;
  ncclDataType_t dt;
};
const Type kTypes[] = {{"float", ncclFloat32}, {"half", ncclFloat16}, {"bfloat16", ncclBfloat16}, {"int8", ncclInt8}};

// A failed CUDA or NCCL call: the rank prints it and exits 1.
struct Failure {
  std::string what;
};

void cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Failure{std::string(what) + ": " + cudaGetErrorString(err)};
}
void nccl(ncclResult_t res, const char* what) {
  if (res != ncclSuccess) throw Failure{std::string(what) + ": " + ncclGetErrorString(res)};
}

struct DeviceBuffer {
  void* p = nullptr;
  size_t size = 0;
  explicit DeviceBuffer(size_t bytes) : size(std::max<size_t>(bytes, 64)) { cuda(cudaMalloc(&p, size), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  char* get() const { return static_cast<char*>(p); }
};

// -R: the buffers registered with the communicator (ncclCommRegister) for the
// run, deregistered before they are freed.
class Registrations {
 public:
  explicit Registrations(ncclComm_t comm) : comm_(comm) {}
  ~Registrations() {
    for (void* h : handles_) ncclCommDeregister(comm_, h);
  }
  void add(const DeviceBuffer& b) {
    void* h = nullptr;
    nccl(ncclCommRegister(comm_, b.p, b.size, &h), "ncclCommRegister");
    handles_.push_back(h);
  }

 private:
  ncclComm_t comm_;
  std::vector<void*> handles_;
};

// A captured graph and its executable, destroyed with the scope.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// -I: one pair of events around each timed iteration.
struct IterEvents {
  std::vector<cudaEvent_t> start, end;
  explicit IterEvents(int n) : start(n, nullptr), end(n, nullptr) {
    for (int i = 0; i < n; i++) {
      cuda(cudaEventCreate(&start[i]), "cudaEventCreate");
      cuda(cudaEventCreate(&end[i]), "cudaEventCreate");
    }
  }
  ~IterEvents() {
    for (size_t i = 0; i < start.size(); i++) {
      if (start[i]) cudaEventDestroy(start[i]);
      if (end[i]) cudaEventDestroy(end[i]);
    }
  }
  std::vector<double> seconds(int perIteration) const {  // per call
    std::vector<double> out(start.size());
    for (size_t i = 0; i < start.size(); i++) {
      float ms = 0;
      cuda(cudaEventElapsedTime(&ms, start[i], end[i]), "cudaEventElapsedTime");
      out[i] = ms / 1e3 / perIteration;
    }
    return out;
  }
};

// Seconds per call of one row, and its per-iteration statistics (-I).
struct Timing {
  double sec = 0;
  RowResult perIter;  // -I: its per-iteration fields only
};

// One rank's run: every row of the table, printed by rank 0.
class Bench {
 public:
  Bench(const Options& o, int algo, int rank, int nranks, ncclComm_t comm)
      : o_(o), algo_(algo), rank_(rank), n_(nranks), comm_(comm) {}

  int run() {
    if (!o_.streamNull) cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    // else -y 1: stream_ stays 0, the legacy default stream.
    size_t maxCount = 0;  // elements of the largest count any table row uses
    for (const Type& t : kTypes)
      if (o_.type == "all" || o_.type == t.name) maxCount = std::max(maxCount, o_.maxBytes / bits::typeSize(t.dt));
    const size_t slack = (size_t)o_.unalign * 8;  // -u elements of at most 8 bytes
    DeviceBuffer send(o_.maxBytes + slack), recv(o_.maxBytes + slack), base(maxCount * 4), baseOut(maxCount * 4),
        scalar(8);
    Registrations registered(comm_);
    if (o_.localRegister)
      for (const DeviceBuffer* b : {&send, &recv, &base, &baseOut}) registered.add(*b);
    send_ = send.get();
    recv_ = recv.get();
    base_ = base.get();
    baseOut_ = baseOut.get();
    scalar_ = scalar.get();
    host_.resize(std::max<size_t>(o_.maxBytes, 64));
    zero(send_, send.size);
    zero(recv_, recv.size);
    zero(base_, maxCount * 4);
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.algorithm = algo_;
    nccl(ncclSignCommSetConfig(comm_, &config), "ncclSignCommSetConfig");
    header();
    if (rank_ == 0) {
      int ncclVersion = 0;
      ncclGetVersion(&ncclVersion);
      if (!json_.open(o_.outputFile, o_, "nccl", ncclVersion)) return 2;
      json_.config(o_, 1, 1, o_.graphLaunches, n_, devices_);  // the header's nThread, nGpus and graph
    }
    if (o_.check) {
      const double bad = baselineWrong(maxCount);
      if (bad > 0) errors_ = 1;
      if (rank_ == 0)
        printf("# ncclAllReduce fp32 sum check (%zu elements): %g wrong %s\n", maxCount, bad, bad ? "FAILED" : "OK");
    }
    for (const Type& t : kTypes) {
      if (o_.type != "all" && o_.type != t.name) continue;
      for (const SignOp& op : kSignOps) {
        if (o_.op != "all" && o_.op != op.name) continue;
        if (op.op == ncclSignAverage && t.dt == ncclInt8) continue;
        table(op, t);
      }
    }
    double wrongRows = reduce(errors_, ncclMax);
    bool bwFailed = false;
    if (o_.memoryReport) memoryReport();
    if (rank_ == 0) {
      const double bw = busBwCount_ ? busBwSum_ / busBwCount_ : 0.0, minBw = minBusBwFromEnv();
      bwFailed = printFooter((int)wrongRows, bw, minBw);
      json_.finish((int)wrongRows, bw, minBw);
    }
    nccl(ncclSignCommRelease(comm_), "ncclSignCommRelease");
    if (stream_) cudaStreamDestroy(stream_);
    return wrongRows || bwFailed ? 1 : 0;
  }

 private:
  // v over every rank (a double, through the communicator itself).
  double reduce(double v, ncclRedOp_t op) {
    upload(scalar_, &v, 8);
    nccl(ncclAllReduce(scalar_, scalar_, 1, ncclFloat64, op, comm_, stream_), "ncclAllReduce (statistics)");
    download(&v, scalar_, 8);
    return v;
  }

  // Every rank's `mine` (same length on every rank), rank-major, through the
  // communicator itself. Only for -I statistics, after the timing.
  std::vector<double> allGather(const std::vector<double>& mine) {
    DeviceBuffer own(mine.size() * 8), all(mine.size() * 8 * n_);
    upload(own.get(), mine.data(), mine.size() * 8);
    nccl(ncclAllGather(own.get(), all.get(), mine.size(), ncclFloat64, comm_, stream_), "ncclAllGather (statistics)");
    std::vector<double> out(mine.size() * n_);
    download(out.data(), all.get(), out.size() * 8);
    return out;
  }

  // NCCL's own fp32 sum on the same communicator (over whatever network NCCL
  // chose: the signlion plugin when NCCL_NET_PLUGIN names it), checked once:
  // every rank contributes rank + 1, so every element must be exactly
  // N(N+1)/2 (small integers: any summation order is exact). Wrong elements
  // summed over the ranks.
  double baselineWrong(size_t count) {
    std::vector<float> v(count, (float)(rank_ + 1));
    upload(base_, v.data(), count * 4);
    nccl(ncclAllReduce(base_, baseOut_, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce fp32");
    download(v.data(), baseOut_, count * 4);
    const float expect = (float)n_ * (float)(n_ + 1) / 2.0f;
    const size_t bad = (size_t)std::count_if(v.begin(), v.end(), [&](float x) { return x != expect; });
    zero(base_, count * 4);
    return reduce((double)bad, ncclSum);
  }

  // Every copy and fill goes on stream_, which is non-blocking (not ordered
  // after the legacy default stream): a plain cudaMemset may still be
  // writing, and a small cudaMemcpy from pageable memory may return before
  // its DMA is done, when the collective on stream_ starts reading.
  // src is pageable (host_, locals): the copy has taken its bytes when it
  // returns, so the caller may refill src at once (pinned memory would not allow it).
  void upload(void* d_dst, const void* src, size_t bytes) {
    cuda(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync H2D");
  }
  void download(void* dst, const void* d_src, size_t bytes) {
    cuda(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void zero(void* d_dst, size_t bytes) { cuda(cudaMemsetAsync(d_dst, 0, bytes, stream_), "cudaMemsetAsync"); }

  // every rank here before any goes on
  void barrier() { reduce(0, ncclSum); }

  // Seconds per call of launch(), as -a aggregates them over the ranks, with
  // nccl-tests' -z, -G, -C and -I meanings.
  template <class Launch>
  Timing timed(Launch launch) {
    using Clock = std::chrono::steady_clock;
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    launch();  // one call first, as nccl-tests does: the graph then captures warm calls only
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    barrier();  // every rank starts together

    std::unique_ptr<IterEvents> events;
    if (o_.perIterTiming) events.reset(new IterEvents(o_.iters));
    Graph graph;
    if (o_.graphLaunches > 0)  // the same capture as tests/gpu's CapturedWarmCallReplaysTwice
      cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    double collOnly = 0;
    auto t0 = Clock::now();
    try {
      for (int it = 0; it < o_.iters; it++) {
        auto i0 = Clock::now();
        if (events) cuda(cudaEventRecord(events->start[it], stream_), "cudaEventRecord");
        for (int a = 0; a < o_.aggIters; a++) {
          launch();
          if (o_.blocking == 1 || o_.blocking == 2) cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
          if (o_.blocking == 1) barrier();
        }
        if (events) cuda(cudaEventRecord(events->end[it], stream_), "cudaEventRecord");
        if (o_.blocking == 3) {
          cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
          collOnly += since(i0);
          barrier();
        }
      }
    } catch (const Failure&) {
      if (o_.graphLaunches > 0) {  // leave the stream out of capture before reporting
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(stream_, &partial);
        if (partial) cudaGraphDestroy(partial);
      }
      throw;
    }
    int calls = o_.iters * o_.aggIters;
    if (o_.graphLaunches > 0) {
      cuda(cudaStreamEndCapture(stream_, &graph.graph), "cudaStreamEndCapture");
      cuda(cudaGraphInstantiate(&graph.exec, graph.graph, 0), "cudaGraphInstantiate");
      barrier();
      t0 = Clock::now();
      for (int l = 0; l < o_.graphLaunches; l++) cuda(cudaGraphLaunch(graph.exec, stream_), "cudaGraphLaunch");
      calls *= o_.graphLaunches;
    }
    const double issued = o_.blocking == 3 ? collOnly : since(t0);  // -C: before waiting for the device
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const double completed = o_.blocking == 3 ? collOnly : since(t0);
    const double sec = (o_.reportCputime ? issued : completed) / calls;

    Timing t;
    switch (o_.average) {
      case 0:
        t.sec = reduce(rank_ == 0 ? sec : 0.0, ncclSum);
        break;
      case 2:
        t.sec = reduce(sec, ncclMin);
        break;
      case 3:
        t.sec = reduce(sec, ncclMax);
        break;
      default:
        t.sec = reduce(sec, ncclSum) / n_;
    }
    if (events)  // iteration i: the slowest rank's, as nccl-tests; each rank is a process
      setPerIteration(&t.perIter, allGather(events->seconds(o_.aggIters)), n_, 1, o_.perIterSkip);
    return t;
  }

  // -M: device memory in use at the end of the run (cudaMemGetInfo), the largest over the ranks.
  void memoryReport() {
    size_t freeBytes = 0, totalBytes = 0;
    cuda(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo");
    const double used = reduce((double)(totalBytes - freeBytes), ncclMax);
    if (rank_ == 0)
      printf("# %-20s : %.1f MB in use of %.1f MB (the device's, at the end; largest over the ranks)\n",
             "GPU memory usage", used / (1 << 20), (double)totalBytes / (1 << 20));
  }

  // -u: where the buffers start for dt
  size_t offset(ncclDataType_t dt) const { return (size_t)o_.unalign * bits::typeSize(dt); }

  void sign(const SignOp& op, ncclDataType_t dt, size_t count, bool inPlace) {
    char* recv = recv_ + offset(dt);
    nccl(ncclSignAllReduce(inPlace ? recv : send_ + offset(dt), recv, count, dt, op.op, comm_, stream_),
         "ncclSignAllReduce");
  }

  // Wrong elements over all ranks for -c fresh inputs (-1: not checked).
  double wrong(const SignOp& op, ncclDataType_t dt, size_t count, bool inPlace) {
    if (!o_.check) return -1;
    const size_t bytes = count * bits::typeSize(dt);
    double bad = 0;
    for (int c = 0; c < o_.check && bad == 0; c++) {
      uint64_t seed = 1000 + (uint64_t)++rep_;
      fillInput(host_.data(), count, dt, rank_, seed);
      upload((inPlace ? recv_ : send_) + offset(dt), host_.data(), bytes);
      sign(op, dt, count, inPlace);
      download(host_.data(), recv_ + offset(dt), bytes);
      bad += reduce((double)countWrong(host_.data(), count, dt, op.red, n_, seed), ncclSum);
    }
    return bad;
  }

  void table(const SignOp& op, const Type& t) {
    const size_t esize = bits::typeSize(t.dt);
    // Warm-up at the largest size first: the scratch grows once.
    for (size_t bytes : {o_.maxBytes, o_.minBytes}) {
      const size_t count = bytes / esize;
      for (int it = 0; it < o_.warmupIters; it++) {
        sign(op, t.dt, count, false);
        nccl(ncclAllReduce(base_, baseOut_, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
        nccl(ncclAllReduce(base_, baseOut_, count, ncclBfloat16, ncclSum, comm_, stream_), "ncclAllReduce");
      }
    }
    int cycles = o_.runCycles;
    do {
      for (size_t size = o_.minBytes; size <= o_.maxBytes;
           size = o_.stepFactor > 1 ? size * o_.stepFactor : size + o_.stepBytes) {
        row(op, t, size / esize);
        if (size == 0 && o_.stepFactor > 1) break;  // 0 * factor never grows
      }
    } while (--cycles != 0);
  }

  void row(const SignOp& op, const Type& t, size_t count) {
    const size_t esize = bits::typeSize(t.dt);
    char* send = send_ + offset(t.dt);
    char* recv = recv_ + offset(t.dt);
    if (o_.check) {  // inputs whose expected result is known, also for the timed calls
      fillInput(host_.data(), count, t.dt, rank_, 99);
      upload(send, host_.data(), count * esize);
    }
    RowResult res[2];
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      if (inPlace) cuda(cudaMemcpyAsync(recv, send, count * esize, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
      Timing tm = timed([&] { sign(op, t.dt, count, inPlace); });
      RowResult& r = res[inPlace];
      r = tm.perIter;
      r.usec = tm.sec * 1e6;
      r.algBw = tm.sec > 0 ? (double)(count * esize) / 1e9 / tm.sec : 0;
      r.busBw = r.algBw * (2.0 * (n_ - 1)) / n_;
      r.wrong = wrong(op, t.dt, count, inPlace);
      if (r.wrong > 0) errors_ = 1;
    }
    const double f32 =
        timed([&] {
          nccl(ncclAllReduce(base_, baseOut_, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce fp32");
        }).sec;
    const double bf16 =
        timed([&] {
          nccl(ncclAllReduce(base_, baseOut_, count, ncclBfloat16, ncclSum, comm_, stream_), "ncclAllReduce bf16");
        }).sec;
    if (rank_ != 0) return;
    printf("%12zu  %12zu  %8s  %6s  %6i", count * esize, count, t.name, op.name, -1);
    for (const RowResult& r : res) {
      busBwSum_ += r.busBw;
      busBwCount_++;
      printf("%s", formatResult(r).c_str());
    }
    const double sec0 = res[0].usec / 1e6;
    printf("  %7s  %7s  %6.2f  %6.2f", formatFixedWidth(f32 * 1e6, 7).c_str(), formatFixedWidth(bf16 * 1e6, 7).c_str(),
           sec0 > 0 ? f32 / sec0 : 0.0, sec0 > 0 ? bf16 / sec0 : 0.0);
    if (o_.reportTimestamps) printf("  %19s", timestampNow().c_str());
    printf("\n");
    json_.row(count * esize, count, t.name, op.name, res[0], res[1],
              {{"nccl_allreduce_fp32_us", f32 * 1e6}, {"nccl_allreduce_bf16_us", bf16 * 1e6}});
  }

  void header() {
    // Every rank's pid, device and its name, gathered to rank 0.
    struct Info {
      int pid, device, busId;
      char host[32];
      char name[64];
    };
    Info mine{};
    mine.pid = getpid();
    cuda(cudaGetDevice(&mine.device), "cudaGetDevice");
    cudaDeviceProp prop;
    cuda(cudaGetDeviceProperties(&prop, mine.device), "cudaGetDeviceProperties");
    mine.busId = prop.pciBusID;
    gethostname(mine.host, sizeof(mine.host) - 1);
    snprintf(mine.name, sizeof(mine.name), "%.63s", prop.name);
    DeviceBuffer gathered(sizeof(Info) * n_), own(sizeof(Info));
    upload(own.get(), &mine, sizeof(Info));
    nccl(ncclAllGather(own.get(), gathered.get(), sizeof(Info), ncclChar, comm_, stream_), "ncclAllGather");
    std::vector<Info> all(n_);
    download(all.data(), gathered.get(), sizeof(Info) * n_);
    if (rank_ != 0) return;
    int version = 0, ncclVersion = 0;
    ncclSignGetVersion(&version);
    ncclGetVersion(&ncclVersion);
    printf("%s", runHeader(o_, 1, 1, o_.graphLaunches, "CUDA event timing").c_str());
    if (o_.streamNull) printf("# Using the legacy default CUDA stream (-y 1)\n");
    if (o_.localRegister == 2)
      printf("# note: -R 2 (symmetric registration) needs ncclMemAlloc buffers; local registration (-R 1) used\n");
    else if (o_.localRegister == 1)
      printf("# Buffers registered with ncclCommRegister (-R 1)\n");
    for (const std::string& note : notApplicableNotes(o_, false)) printf("# note: %s\n", note.c_str());
    printf("# signlion %d.%d.%d ncclSignAllReduce on NCCL %d.%d.%d: %d ranks (processes), algorithm %s%s\n",
           version / 10000, version / 100 % 100, version % 100, ncclVersion / 10000, ncclVersion / 100 % 100,
           ncclVersion % 100, n_, o_.algo.c_str(), o_.algoNote.c_str());
    printf(
        "# NCCL's ncclAllReduce (sum) of the same element count in fp32 and bf16 on the same communicators;\n"
        "# x fp32, x bf16: its time over ncclSignAllReduce's out-of-place time (> 1: the sign all-reduce is "
        "faster)\n");
    printf("#\n# Using devices\n");
    devices_.resize(n_);
    for (int r = 0; r < n_; r++) {
      DeviceInfo& d = devices_[r];
      d.rank = r;
      d.pid = all[r].pid;
      d.device = all[r].device;
      d.hostname = all[r].host;
      d.deviceInfo = all[r].name;
      char hex[16];
      snprintf(hex, sizeof(hex), "0x%02x", all[r].busId);
      d.deviceHex = hex;
      printf("%s", deviceLine(d).c_str());
    }
    printf("#\n");
    const ResultColumns cols = resultColumns(o_);
    printf("# %10s  %12s  %8s  %6s  %6s%s  %s\n", "", "", "", "", "", cols.top.c_str(),
           "     ncclAllReduce         ratio");
    printf("# %10s  %12s  %8s  %6s  %6s%s  %7s  %7s  %6s  %6s%s\n", "size", "count", "type", "redop", "root",
           cols.names.c_str(), "fp32", "bf16", "x fp32", "x bf16", o_.reportTimestamps ? "  timestamp" : "");
    printf("# %10s  %12s  %8s  %6s  %6s%s  %7s  %7s  %6s  %6s%s%s\n", "(B)", "(elements)", "", "", "",
           cols.units.c_str(), "(us)", "(us)", "", "", o_.reportTimestamps ? "  " : "",
           o_.reportTimestamps ? kTimestampFormat : "");
  }

  const Options& o_;
  int algo_;
  int rank_, n_;
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
  char *send_ = nullptr, *recv_ = nullptr, *base_ = nullptr, *baseOut_ = nullptr, *scalar_ = nullptr;
  std::vector<char> host_;
  double busBwSum_ = 0;
  int busBwCount_ = 0;
  double errors_ = 0;
  int rep_ = 0;
  JsonReport json_;                  // -J, rank 0
  std::vector<DeviceInfo> devices_;  // rank 0: every rank's, from header()
};

}  // namespace

int runNcclMode(const Options& o, int algo) {
  const int nranks = o.ranksPerProcess();  // -t x -g ranks, one process each
  std::string why;
  const int devices = probeCudaDevices(&why);
  if (devices < 1) {
    fprintf(stderr,
            "sign_allreduce_perf --nccl: no CUDA device answers (%s); the GPU mode needs an NVIDIA GPU. The host "
            "mode (without --nccl) runs anywhere.\n",
            why.c_str());
    return 77;
  }
  NcclRanksOptions ro;
  ro.nranks = nranks;
  ro.devices = devices;
  ro.hostIdPrefix = "sign-allreduce-perf";
  ro.timeoutSec = 3600;
  std::vector<int> codes = runNcclRanks(ro, [&](int rank, int nranks, ncclComm_t comm) {
    try {
      return Bench(o, algo, rank, nranks, comm).run();
    } catch (const Failure& f) {
      fflush(stdout);
      fprintf(stderr, "sign_allreduce_perf --nccl: rank %d: %s\n", rank, f.what.c_str());
      return 1;
    }
  });
  int rc = 0;
  for (int r = 0; r < nranks; r++) {
    if (codes[r] == 0) continue;
    fprintf(stderr, "sign_allreduce_perf --nccl: rank %d exited with %d\n", r, codes[r]);
    rc = 1;
  }
  return rc;
}

}  // namespace perf
}  // namespace signlion
