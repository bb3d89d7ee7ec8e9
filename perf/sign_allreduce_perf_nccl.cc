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
  explicit DeviceBuffer(size_t bytes) { cuda(cudaMalloc(&p, std::max<size_t>(bytes, 64)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  char* get() const { return static_cast<char*>(p); }
};

// One rank's run: every row of the table, printed by rank 0.
class Bench {
 public:
  Bench(const Options& o, int algo, int rank, int nranks, ncclComm_t comm)
      : o_(o), algo_(algo), rank_(rank), n_(nranks), comm_(comm) {}

  int run() {
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    size_t maxCount = 0;  // elements of the largest count any table row uses
    for (const Type& t : kTypes)
      if (o_.type == "all" || o_.type == t.name) maxCount = std::max(maxCount, o_.maxBytes / bits::typeSize(t.dt));
    DeviceBuffer send(o_.maxBytes), recv(o_.maxBytes), base(maxCount * 4), baseOut(maxCount * 4), scalar(8);
    send_ = send.get();
    recv_ = recv.get();
    base_ = base.get();
    baseOut_ = baseOut.get();
    scalar_ = scalar.get();
    host_.resize(std::max<size_t>(o_.maxBytes, 64));
    cuda(cudaMemset(send_, 0, o_.maxBytes), "cudaMemset");
    cuda(cudaMemset(recv_, 0, o_.maxBytes), "cudaMemset");
    cuda(cudaMemset(base_, 0, maxCount * 4), "cudaMemset");
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.algorithm = algo_;
    nccl(ncclSignCommSetConfig(comm_, &config), "ncclSignCommSetConfig");
    header();
    if (o_.check) {
      const double bad = baselineWrong(maxCount);
      if (bad > 0) errors_ = 1;
      if (rank_ == 0) printf("# ncclAllReduce fp32 sum check (%zu elements): %g wrong %s\n", maxCount, bad,
                             bad ? "FAILED" : "OK");
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
    if (rank_ == 0) {
      printf("# Out of bounds values : %g %s\n", wrongRows, wrongRows ? "FAILED" : "OK");
      printf("# Avg bus bandwidth    : %g \n", busBwCount_ ? busBwSum_ / busBwCount_ : 0.0);
      printf("#\n");
    }
    nccl(ncclSignCommRelease(comm_), "ncclSignCommRelease");
    cudaStreamDestroy(stream_);
    return wrongRows ? 1 : 0;
  }

 private:
  // v over every rank (a double, through the communicator itself).
  double reduce(double v, ncclRedOp_t op) {
    cuda(cudaMemcpy(scalar_, &v, 8, cudaMemcpyHostToDevice), "cudaMemcpy");
    nccl(ncclAllReduce(scalar_, scalar_, 1, ncclFloat64, op, comm_, stream_), "ncclAllReduce (statistics)");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    cuda(cudaMemcpy(&v, scalar_, 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return v;
  }

  // NCCL's own fp32 sum on the same communicator (over whatever network NCCL
  // chose: the signlion plugin when NCCL_NET_PLUGIN names it), checked once:
  // every rank contributes rank + 1, so every element must be exactly
  // N(N+1)/2 (small integers: any summation order is exact). Wrong elements
  // summed over the ranks.
  double baselineWrong(size_t count) {
    std::vector<float> v(count, (float)(rank_ + 1));
    cuda(cudaMemcpy(base_, v.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    nccl(ncclAllReduce(base_, baseOut_, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce fp32");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    cuda(cudaMemcpy(v.data(), baseOut_, count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const float expect = (float)n_ * (float)(n_ + 1) / 2.0f;
    const size_t bad = (size_t)std::count_if(v.begin(), v.end(), [&](float x) { return x != expect; });
    cuda(cudaMemset(base_, 0, count * 4), "cudaMemset");
    return reduce((double)bad, ncclSum);
  }

  // Seconds per call of launch(), as -a aggregates them over the ranks.
  template <class Launch>
  double timed(Launch launch) {
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    reduce(0, ncclSum);  // every rank starts together
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o_.iters; it++)
      for (int a = 0; a < o_.aggIters; a++) launch();
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (o_.iters * o_.aggIters);
    switch (o_.average) {
      case 0:
        return reduce(rank_ == 0 ? sec : 0.0, ncclSum);
      case 2:
        return reduce(sec, ncclMin);
      case 3:
        return reduce(sec, ncclMax);
      default:
        return reduce(sec, ncclSum) / n_;
    }
  }

  void sign(const SignOp& op, ncclDataType_t dt, size_t count, bool inPlace) {
    nccl(ncclSignAllReduce(inPlace ? recv_ : send_, recv_, count, dt, op.op, comm_, stream_), "ncclSignAllReduce");
  }

  // Wrong elements over all ranks for -c fresh inputs (-1: not checked).
  double wrong(const SignOp& op, ncclDataType_t dt, size_t count, bool inPlace) {
    if (!o_.check) return -1;
    const size_t bytes = count * bits::typeSize(dt);
    double bad = 0;
    for (int c = 0; c < o_.check && bad == 0; c++) {
      uint64_t seed = 1000 + (uint64_t)++rep_;
      fillInput(host_.data(), count, dt, rank_, seed);
      cuda(cudaMemcpy(inPlace ? recv_ : send_, host_.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      sign(op, dt, count, inPlace);
      cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      cuda(cudaMemcpy(host_.data(), recv_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
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
    if (o_.check) {  // inputs whose expected result is known, also for the timed calls
      fillInput(host_.data(), count, t.dt, rank_, 99);
      cuda(cudaMemcpy(send_, host_.data(), count * esize, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    double sec[2], bad[2];
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      if (inPlace) cuda(cudaMemcpy(recv_, send_, count * esize, cudaMemcpyDeviceToDevice), "cudaMemcpy");
      sec[inPlace] = timed([&] { sign(op, t.dt, count, inPlace); });
      bad[inPlace] = wrong(op, t.dt, count, inPlace);
      if (bad[inPlace] > 0) errors_ = 1;
    }
    const double f32 = timed([&] {
      nccl(ncclAllReduce(base_, baseOut_, count, ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce fp32");
    });
    const double bf16 = timed([&] {
      nccl(ncclAllReduce(base_, baseOut_, count, ncclBfloat16, ncclSum, comm_, stream_), "ncclAllReduce bf16");
    });
    if (rank_ != 0) return;
    printf("%12zu  %12zu  %8s  %6s  %6i", count * esize, count, t.name, op.name, -1);
    for (int i = 0; i < 2; i++) {
      double algBw = sec[i] > 0 ? (double)(count * esize) / 1e9 / sec[i] : 0;
      double busBw = algBw * (2.0 * (n_ - 1)) / n_;
      busBwSum_ += busBw;
      busBwCount_++;
      char wrongText[16];
      if (bad[i] >= 0)
        snprintf(wrongText, sizeof(wrongText), "%5g", bad[i]);
      else
        snprintf(wrongText, sizeof(wrongText), "%5s", "N/A");
      printf("  %7s  %6.2f  %6.2f  %5s", usec(sec[i]).c_str(), algBw, busBw, wrongText);
    }
    printf("  %7s  %7s  %6.2f  %6.2f\n", usec(f32).c_str(), usec(bf16).c_str(), sec[0] > 0 ? f32 / sec[0] : 0.0,
           sec[0] > 0 ? bf16 / sec[0] : 0.0);
  }

  static std::string usec(double sec) {
    double us = sec * 1e6;
    char buf[32];
    snprintf(buf, sizeof(buf), us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
    return buf;
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
    cuda(cudaMemcpy(own.get(), &mine, sizeof(Info), cudaMemcpyHostToDevice), "cudaMemcpy");
    nccl(ncclAllGather(own.get(), gathered.get(), sizeof(Info), ncclChar, comm_, stream_), "ncclAllGather");
    cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::vector<Info> all(n_);
    cuda(cudaMemcpy(all.data(), gathered.get(), sizeof(Info) * n_, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (rank_ != 0) return;
    int version = 0, ncclVersion = 0;
    ncclSignGetVersion(&version);
    ncclGetVersion(&ncclVersion);
    const char* env = getenv("SIGNLION_ALGO");
    printf(
        "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: %d\n",
        1, 1, o_.minBytes, o_.maxBytes, o_.stepFactor > 1 ? o_.stepFactor : o_.stepBytes,
        o_.stepFactor > 1 ? "factor" : "bytes", o_.warmupIters, o_.iters, o_.aggIters, o_.check, 0);
    printf("# signlion %d.%d.%d ncclSignAllReduce on NCCL %d.%d.%d: %d ranks (processes), algorithm %s%s%s%s\n",
           version / 10000, version / 100 % 100, version % 100, ncclVersion / 10000, ncclVersion / 100 % 100,
           ncclVersion % 100, n_, o_.algo.c_str(), env ? " (SIGNLION_ALGO=" : "", env ? env : "", env ? ")" : "");
    printf(
        "# NCCL's ncclAllReduce (sum) of the same element count in fp32 and bf16 on the same communicators;\n"
        "# x fp32, x bf16: its time over ncclSignAllReduce's out-of-place time (> 1: the sign all-reduce is "
        "faster)\n");
    printf("#\n# Using devices\n");
    for (int r = 0; r < n_; r++)
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n", r, 0, all[r].pid, all[r].host,
             all[r].device, all[r].busId, all[r].name);
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          %s\n", "", "",
           "", "", "", "     ncclAllReduce         ratio");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %7s  %7s  %6s  %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "fp32",
           "bf16", "x fp32", "x bf16");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %7s  %7s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "",
           "");
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
};

}  // namespace

int runNcclMode(const Options& o, int algo) {
  if (o.nThreads < 1) {
    fprintf(stderr, "--nccl: -t must be at least 1 (ranks, one process each)\n");
    return 2;
  }
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
  ro.nranks = o.nThreads;
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
  for (int r = 0; r < o.nThreads; r++) {
    if (codes[r] == 0) continue;
    fprintf(stderr, "sign_allreduce_perf --nccl: rank %d exited with %d\n", r, codes[r]);
    rc = 1;
  }
  return rc;
}

}  // namespace perf
}  // namespace signlion
