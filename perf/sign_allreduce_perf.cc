// sign_allreduce_perf: nccl-tests' all_reduce_perf for the host sign
// all-reduce. Same flags, defaults, table and footer as all_reduce_perf, so
// scripts written for nccl-tests parse it; see docs/PERFORMANCE_ethernet.md.
//
// Ranks are threads (-t), processes started by mpirun (built with MPI), or
// processes started by hand (--rank R --nranks N --id-file F: rank 0 writes
// the unique id to F, the others wait for it). Total ranks = processes x -t.
//
// -o picks the reduction: mavo (majority vote, default), avg (average of
// votes), sum (ncclSignHostSumAllReduce, the plain ring sum on the same
// communicator: the baseline rows), mpisum (MPI_Allreduce of fp32, MPI only),
// all. -A picks the sign algorithm (auto, ring, hd, allgather, fieldsum, hier).
// algbw = count * sizeof(input datatype) / time, busbw = algbw * 2(n-1)/n:
// the figures of an all-reduce of the input datatype, whatever the wire.
// The last columns are the transport's byte counters: the most any rank sent
// per call, and the most any node sent to other nodes (its ranks' sums; host
// ids as the communicator traded them, e.g. SIGNLION_HOSTID per namespace).
//
// --nccl is the GPU mode (sign_allreduce_perf_nccl.h): ncclSignAllReduce on
// device buffers and NCCL communicators, -t ranks as processes, each row
// next to NCCL's ncclAllReduce of the same count in fp32 and bf16.
#include <getopt.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef SIGNLION_PERF_MPI
#include <mpi.h>
#endif

#include "bits/bits.h"
#include "nccl_sign.h"
#include "perf_inputs.h"
#include "sign_allreduce_perf_nccl.h"
#include "sign_allreduce_perf_options.h"

namespace {

using signlion::perf::Reduction;
#ifdef SIGNLION_PERF_MPI
constexpr bool kHaveMpi = true;
#else
constexpr bool kHaveMpi = false;
#endif

// ---- options (nccl-tests' defaults) --------------------------------------------

using signlion::perf::Options;

struct OpInfo {
  const char* name;
  Reduction red;
  bool mpi;
};
const OpInfo kOps[] = {{"mavo", Reduction::kMajority, false},
                       {"avg", Reduction::kAverage, false},
                       {"sum", Reduction::kSum, false},
                       {"mpisum", Reduction::kSum, true}};

struct TypeInfo {
  const char* name;
  ncclDataType_t dt;
};
const TypeInfo kTypes[] = {{"float", ncclFloat32}, {"half", ncclFloat16}, {"bfloat16", ncclBfloat16}, {"int8", ncclInt8}};

bool typeFits(const OpInfo& op, ncclDataType_t dt) {
  if (op.mpi) return dt == ncclFloat32;
  if (op.red == Reduction::kSum) return dt == ncclFloat32 || dt == ncclBfloat16;
  if (op.red == Reduction::kAverage) return dt != ncclInt8;
  return true;
}

double parseSize(const char* s) {  // nccl-tests' K/M/G suffixes (powers of 1024)
  double v;
  char unit = 0;
  int n = sscanf(s, "%lf %c", &v, &unit);
  if (n < 1) return -1;
  if (n == 1) return v;
  switch (unit) {
    case 'G': case 'g': return v * (1 << 30);
    case 'M': case 'm': return v * (1 << 20);
    case 'K': case 'k': return v * (1 << 10);
    default: return -1;
  }
}

void usage(const char* argv0) {
  printf(
      "USAGE: %s\n\t"
      "[-t,--nthreads <ranks as threads per process>]\n\t"
      "[-b,--minbytes <min size in bytes>]\n\t"
      "[-e,--maxbytes <max size in bytes>]\n\t"
      "[-i,--stepbytes <increment size>]\n\t"
      "[-f,--stepfactor <increment factor>]\n\t"
      "[-n,--iters <iteration count>]\n\t"
      "[-m,--agg_iters <aggregated iteration count>]\n\t"
      "[-w,--warmup_iters <warmup iteration count>]\n\t"
      "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)]\n\t"
      "[-c,--check <check iteration count>]\n\t"
      "[-o,--op <mavo/avg/sum/mpisum/all>]\n\t"
      "[-d,--datatype <float/half/bfloat16/int8/all>]\n\t"
      "[-r,--root <root>] (ignored: all-reduce)\n\t"
      "[-z,--blocking <0/1>]\n\t"
      "[-T,--timeout <time in seconds>]\n\t"
      "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n\t"
      "[-A,--algo <auto/ring/hd/allgather/fieldsum/hier>]\n\t"
      "[--rank <r> --nranks <n> --id-file <path>] (one rank per process, started by hand)\n\t"
      "[--nccl] GPU mode: ncclSignAllReduce on device buffers and NCCL communicators, -t ranks as\n\t"
      "         processes (rank r on GPU r %% devices), each row next to NCCL's ncclAllReduce of the\n\t"
      "         same count in fp32 and bf16; -o mavo/avg/all. Exits 77 when no GPU answers.\n\t"
      "[-h,--help]\n",
      basename(const_cast<char*>(argv0)));
}

// Returns 0 to go on, else the exit code.
int parseOptions(int argc, char** argv, Options* o) {
  static const option longopts[] = {
      {"nthreads", required_argument, 0, 't'},   {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},   {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},  {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"check", required_argument, 0, 'c'},      {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},   {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},   {"timeout", required_argument, 0, 'T'},
      {"average", required_argument, 0, 'a'},    {"algo", required_argument, 0, 'A'},
      {"rank", required_argument, 0, 1000},      {"nranks", required_argument, 0, 1001},
      {"id-file", required_argument, 0, 1002},   {"nccl", no_argument, 0, 1003},
      {"help", no_argument, 0, 'h'},
      {}};
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:c:o:d:r:z:T:a:A:h", longopts, nullptr)) != -1) {
    double parsed;
    switch (c) {
      case 't': o->nThreads = (int)strtol(optarg, nullptr, 0); break;
      case 'g':
        if (strtol(optarg, nullptr, 0) != 1) {
          fprintf(stderr, "-g: the host communicator has no GPUs; only -g 1 is accepted\n");
          return 2;
        }
        break;
      case 'b':
      case 'e':
        parsed = parseSize(optarg);
        if (parsed < 0) {
          fprintf(stderr, "invalid size specified for '%s'\n", c == 'b' ? "minbytes" : "maxbytes");
          return 2;
        }
        (c == 'b' ? o->minBytes : o->maxBytes) = (size_t)parsed;
        break;
      case 'i': o->stepBytes = (size_t)parseSize(optarg); break;
      case 'f': o->stepFactor = strtoul(optarg, nullptr, 0); break;
      case 'n': o->iters = (int)strtol(optarg, nullptr, 0); break;
      case 'm': o->aggIters = (int)strtol(optarg, nullptr, 0); break;
      case 'w': o->warmupIters = (int)strtol(optarg, nullptr, 0); break;
      case 'N': o->runCycles = (int)strtol(optarg, nullptr, 0); break;
      case 'c': o->check = (int)strtol(optarg, nullptr, 0); break;
      case 'o': o->op = optarg; break;
      case 'd': o->type = optarg; break;
      case 'r': break;
      case 'z': o->blocking = (int)strtol(optarg, nullptr, 0); break;
      case 'T': o->timeoutSec = (int)strtol(optarg, nullptr, 0); break;
      case 'a': o->average = (int)strtol(optarg, nullptr, 0); break;
      case 'A': o->algo = optarg; break;
      case 1000: o->rank = (int)strtol(optarg, nullptr, 0); break;
      case 1001: o->nranks = (int)strtol(optarg, nullptr, 0); break;
      case 1002: o->idFile = optarg; break;
      case 1003: o->nccl = true; break;
      case 'h': usage(argv[0]); return -1;
      default: usage(argv[0]); return 2;
    }
  }
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", o->minBytes, o->maxBytes);
    return 2;
  }
  if (o->nThreads < 1 || o->iters < 1 || o->aggIters < 1 || o->warmupIters < 0 || o->check < 0 ||
      o->average < 0 || o->average > 3 || o->runCycles < 0 || (o->stepFactor <= 1 && o->stepBytes == 0)) {
    fprintf(stderr, "invalid -t/-n/-m/-w/-c/-a/-N/-f/-i value\n");
    return 2;
  }
  bool byHand = o->rank >= 0 || o->nranks > 0 || !o->idFile.empty();
  if (byHand && (o->rank < 0 || o->nranks < 1 || o->rank >= o->nranks || o->idFile.empty() || o->nThreads != 1)) {
    fprintf(stderr, "--rank, --nranks and --id-file go together (0 <= rank < nranks, -t 1)\n");
    return 2;
  }
  return 0;
}

ncclSignAlgo_t algoFromName(const std::string& s, bool* ok) {
  *ok = true;
  if (s == "auto") return ncclSignAlgoAuto;
  if (s == "ring") return ncclSignAlgoRing;
  if (s == "hd" || s == "halving_doubling") return ncclSignAlgoHalvingDoubling;
  if (s == "allgather") return ncclSignAlgoAllGather;
  if (s == "fieldsum") return ncclSignAlgoFieldSum;
  if (s == "hier" || s == "hierarchical") return ncclSignAlgoHierarchical;
  *ok = false;
  return ncclSignAlgoAuto;
}

// ---- the world: processes x threads ----------------------------------------------

struct World {
  Options opt;
  int nProcs = 1, proc = 0;
  bool mpi = false;
  int nranks() const { return nProcs * opt.nThreads; }
  ncclSignUniqueId id;
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  std::vector<const OpInfo*> ops;
  std::vector<const TypeInfo*> types;
  std::atomic<int> failures{0};  // collectives that returned an error, in this process
};

bool isMainRank(const World& w, int thread) { return w.proc == 0 && thread == 0; }

#define PRINT(...)                         \
  do {                                     \
    if (isMainRank(*ctx.world, ctx.thread)) { \
      printf(__VA_ARGS__);                 \
    }                                      \
  } while (0)

// Rank 0 (of processes started by hand) publishes the id; the others wait.
bool shareIdThroughFile(World* w) {
  const std::string& path = w->opt.idFile;
  if (w->proc == 0) {
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE* f = fopen(tmp.c_str(), "wb");
    if (f == nullptr || fwrite(&w->id, sizeof(w->id), 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp.c_str(), path.c_str()) != 0) {
      fprintf(stderr, "sign_allreduce_perf: cannot write the unique id to %s\n", path.c_str());
      return false;
    }
    return true;
  }
  int waitMs = w->opt.timeoutSec > 0 ? w->opt.timeoutSec * 1000 : 60000;
  for (int ms = 0; ms < waitMs; ms += 10) {
    FILE* f = fopen(path.c_str(), "rb");
    if (f != nullptr) {
      bool ok = fread(&w->id, sizeof(w->id), 1, f) == 1;
      fclose(f);
      if (ok) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  fprintf(stderr, "sign_allreduce_perf: rank %d: no unique id in %s after %d ms\n", w->proc, path.c_str(), waitMs);
  return false;
}

// ---- one rank --------------------------------------------------------------------

struct RankCtx {
  World* world;
  int thread = 0;
  int rank = 0;
  ncclSignComm_t comm = nullptr;
  char* send = nullptr;  // maxBytes each, 64-byte aligned
  char* recv = nullptr;
  double busBwSum = 0;
  int busBwCount = 0;
  int errors = 0;  // rows with a wrong result (main rank's view: every rank counted)
  int rep = 0;
};

struct CollError {
  const char* what;
  ncclResult_t res;
};

void checkNccl(ncclResult_t res, const char* what) {
  if (res != ncclSuccess) throw CollError{what, res};
}

// Every rank's `values` (same length on every rank), in rank order, through a
// sum all-reduce of one-hot fp32 vectors on the communicator itself (exact:
// each element is one rank's float plus zeros). A double travels as two floats.
std::vector<double> allGather(RankCtx& ctx, const std::vector<double>& values) {
  const int n = ctx.world->nranks();
  const size_t len = values.size() * 2;
  std::vector<float> buf(len * n, 0.0f), out(len * n);
  for (size_t i = 0; i < values.size(); i++) {
    float hi = (float)values[i];
    buf[ctx.rank * len + 2 * i] = hi;
    buf[ctx.rank * len + 2 * i + 1] = (float)(values[i] - (double)hi);
  }
  checkNccl(ncclSignHostSumAllReduce(buf.data(), out.data(), buf.size(), ncclFloat32, ctx.comm),
            "ncclSignHostSumAllReduce (statistics)");
  std::vector<double> all(values.size() * n);
  for (size_t i = 0; i < all.size(); i++) all[i] = (double)out[2 * i] + (double)out[2 * i + 1];
  return all;
}

void barrier(RankCtx& ctx, bool mpiOp) {
#ifdef SIGNLION_PERF_MPI
  if (mpiOp) {
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
#endif
  (void)mpiOp;
  checkNccl(ncclSignBarrier(ctx.comm), "ncclSignBarrier");
}

void runColl(RankCtx& ctx, const OpInfo& op, ncclDataType_t dt, size_t count, bool inPlace) {
  const void* sendbuf = inPlace ? ctx.recv : ctx.send;
  if (op.mpi) {
#ifdef SIGNLION_PERF_MPI
    int rc = MPI_Allreduce(inPlace ? MPI_IN_PLACE : sendbuf, ctx.recv, (int)count, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) throw CollError{"MPI_Allreduce", ncclSystemError};
#endif
    return;
  }
  if (op.red == Reduction::kSum) {
    checkNccl(ncclSignHostSumAllReduce(sendbuf, ctx.recv, count, dt, ctx.comm), "ncclSignHostSumAllReduce");
  } else {
    ncclSignOp_t sop = op.red == Reduction::kAverage ? ncclSignAverage : ncclSignMajority;
    checkNccl(ncclSignHostAllReduce(sendbuf, ctx.recv, count, dt, sop, ctx.comm), "ncclSignHostAllReduce");
  }
}

struct SentBytes {
  uint64_t all = 0, interNode = 0;
  int node = 0;
};

SentBytes sentBytes(RankCtx& ctx) {
  SentBytes b;
  uint64_t r = 0;
  checkNccl(ncclSignCommGetWireBytes(ctx.comm, &b.all, &r), "ncclSignCommGetWireBytes");
  checkNccl(ncclSignCommGetInterNodeWireBytes(ctx.comm, &b.node, &b.interNode, &r),
            "ncclSignCommGetInterNodeWireBytes");
  return b;
}

struct BenchResult {
  double usec, algBw, busBw;
  double wrong;       // -1: not checked
  double wirePerCall; // max over ranks of bytes this rank sent per call; -1: not ours to count
  double interNodePerCall;  // max over nodes of bytes the node's ranks sent to other nodes per call
};

BenchResult benchTime(RankCtx& ctx, const OpInfo& op, ncclDataType_t dt, size_t count, bool inPlace) {
  const Options& o = ctx.world->opt;
  const int n = ctx.world->nranks();
  const size_t esize = signlion::bits::typeSize(dt);
  char* input = inPlace ? ctx.recv : ctx.send;
  if (o.check) signlion::perf::fillInput(input, count, dt, ctx.rank, 99);

  runColl(ctx, op, dt, count, inPlace);  // sync
  barrier(ctx, op.mpi);

  SentBytes wire0 = sentBytes(ctx);
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < o.iters; it++) {
    for (int a = 0; a < o.aggIters; a++) runColl(ctx, op, dt, count, inPlace);
    if (o.blocking) barrier(ctx, op.mpi);
  }
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (o.iters * o.aggIters);
  SentBytes wire1 = sentBytes(ctx);
  const double calls = o.iters * o.aggIters;
  double wire = (double)(wire1.all - wire0.all) / calls;
  double interNode = (double)(wire1.interNode - wire0.interNode) / calls;

  std::vector<double> all = allGather(ctx, {sec, wire, interNode, (double)wire1.node});
  double agg = all[0], maxWire = 0;
  std::vector<double> nodeSent(n, 0.0);  // nodes are numbered below n
  for (int r = 0; r < n; r++) {
    double t = all[4 * r];
    if (o.average == 1) agg = r == 0 ? t : agg + t;
    if (o.average == 2) agg = std::min(agg, t);
    if (o.average == 3) agg = std::max(agg, t);
    maxWire = std::max(maxWire, all[4 * r + 1]);
    nodeSent[(int)all[4 * r + 3]] += all[4 * r + 2];
  }
  if (o.average == 1) agg /= n;

  BenchResult res;
  res.usec = agg * 1e6;
  res.algBw = (double)(count * esize) / 1e9 / agg;
  res.busBw = res.algBw * (2.0 * (n - 1)) / n;
  res.wirePerCall = op.mpi ? -1 : maxWire;
  res.interNodePerCall = op.mpi ? -1 : *std::max_element(nodeSent.begin(), nodeSent.end());
  res.wrong = -1;
  if (o.check) {
    double wrong = 0;
    for (int c = 0; c < o.check; c++) {
      uint64_t seed = 1000 + (uint64_t)++ctx.rep;
      signlion::perf::fillInput(input, count, dt, ctx.rank, seed);
      runColl(ctx, op, dt, count, inPlace);
      double mine = (double)signlion::perf::countWrong(ctx.recv, count, dt, op.red, n, seed);
      for (double v : allGather(ctx, {mine})) wrong += v;
      if (wrong) break;
    }
    res.wrong = wrong;
    if (wrong) ctx.errors++;
  }
  return res;
}

std::string formatTime(double usec) {
  char buf[32];
  snprintf(buf, sizeof(buf), usec >= 10000.0 ? "%7.0f" : usec >= 100.0 ? "%7.1f" : "%7.2f", usec);
  return buf;
}

void timeTest(RankCtx& ctx, const OpInfo& op, const TypeInfo& type) {
  const Options& o = ctx.world->opt;
  const size_t esize = signlion::bits::typeSize(type.dt);
  barrier(ctx, false);
  for (size_t bytes : {o.maxBytes, o.minBytes})
    for (int it = 0; it < o.warmupIters; it++) runColl(ctx, op, type.dt, bytes / esize, false);
  int cycles = o.runCycles;
  do {
    for (size_t size = o.minBytes; size <= o.maxBytes;
         size = o.stepFactor > 1 ? size * o.stepFactor : size + o.stepBytes) {
      size_t count = size / esize;
      PRINT("%12zu  %12zu  %8s  %6s  %6i", count * esize, count, type.name, op.name, -1);
      BenchResult out = benchTime(ctx, op, type.dt, count, false);
      BenchResult in = benchTime(ctx, op, type.dt, count, true);
      for (const BenchResult* r : {&out, &in}) {
        if (r->wrong >= 0)
          PRINT("  %7s  %6.2f  %6.2f  %5g", formatTime(r->usec).c_str(), r->algBw, r->busBw, r->wrong);
        else
          PRINT("  %7s  %6.2f  %6.2f  %5s", formatTime(r->usec).c_str(), r->algBw, r->busBw, "N/A");
        ctx.busBwSum += r->busBw;
        ctx.busBwCount++;
      }
      for (double w : {out.wirePerCall, out.interNodePerCall})
        if (w >= 0)
          PRINT("  %12.0f  %7.3f", w, count ? w * 8.0 / (double)count : 0.0);
        else
          PRINT("  %12s  %7s", "N/A", "N/A");
      PRINT("\n");
      if (size == 0 && o.stepFactor > 1) break;  // 0 * factor never grows
    }
  } while (--cycles != 0);
}

void printHeader(RankCtx& ctx) {
  World& w = *ctx.world;
  const Options& o = w.opt;
  PRINT("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: %d\n",
        o.nThreads, 0, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
        o.stepFactor > 1 ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, 0);
  if (o.blocking) PRINT("# Blocking Enabled: wait for completion and barrier after each collective \n");
  int version = 0;
  ncclSignGetVersion(&version);
  const char* env = getenv("SIGNLION_ALGO");
  const char* bits = getenv("SIGNLION_FIELD_BITS");
  PRINT("# signlion %d.%d.%d host communicator: %d ranks (%d %s x %d threads), algorithm %s%s%s%s%s\n", version / 10000,
        version / 100 % 100, version % 100,
        w.nranks(), w.nProcs, w.mpi ? "MPI processes" : "processes", o.nThreads, o.algo.c_str(),
        env ? " (SIGNLION_ALGO=" : "", env ? env : "", env ? ")" : "",
        bits ? (std::string(", SIGNLION_FIELD_BITS=") + bits).c_str() : "");
  PRINT("#\n# Using devices\n");
  // One line per rank, gathered: pid and host name (32 characters).
  char host[33] = {0};
  gethostname(host, 32);
  std::vector<double> mine{(double)getpid()};
  for (int i = 0; i < 32; i++) mine.push_back((double)(unsigned char)host[i]);
  std::vector<double> all = allGather(ctx, mine);
  for (int r = 0; r < w.nranks(); r++) {
    std::string name;
    for (int i = 0; i < 32 && all[r * 33 + 1 + i] != 0; i++) name += (char)all[r * 33 + 1 + i];
    PRINT("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n", r, 0, (int)all[r * 33], name.c_str(), -1,
          0, "host CPU");
  }
  PRINT("#\n");
  PRINT("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          %s%s\n", "", "", "",
        "", "", "  wire sent per rank", "   inter-node per node");
  PRINT("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %12s  %7s  %12s  %7s\n", "size", "count",
        "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "wire", "wire",
        "wire", "wire");
  PRINT("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %12s  %7s  %12s  %7s\n", "(B)",
        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(B)", "(b/elt)",
        "(B)", "(b/elt)");
}

// Returns 0, or 1 after a failed collective (the comm is then aborted).
int rankMain(World* w, int thread, RankCtx* out) {
  RankCtx& ctx = *out;
  ctx.world = w;
  ctx.thread = thread;
  ctx.rank = w->proc * w->opt.nThreads + thread;
  ncclResult_t res = ncclSignCommInitRank(&ctx.comm, w->nranks(), w->id, ctx.rank, &w->config);
  if (res != ncclSuccess) {
    fprintf(stderr, "sign_allreduce_perf: rank %d: ncclSignCommInitRank: %s\n", ctx.rank,
            ncclSignGetErrorString(res));
    w->failures++;
    return 1;
  }
  size_t bytes = std::max<size_t>(64, (w->opt.maxBytes + 63) / 64 * 64);
  std::unique_ptr<char, decltype(&free)> send((char*)aligned_alloc(64, bytes), free);
  std::unique_ptr<char, decltype(&free)> recv((char*)aligned_alloc(64, bytes), free);
  ctx.send = send.get();
  ctx.recv = recv.get();
  memset(ctx.send, 0, bytes);
  memset(ctx.recv, 0, bytes);
  try {
    printHeader(ctx);
    for (const TypeInfo* t : w->types)
      for (const OpInfo* op : w->ops)
        if (typeFits(*op, t->dt)) timeTest(ctx, *op, *t);
    // Every rank learns how many rows went wrong anywhere (the main rank counted them all).
    std::vector<double> errs = allGather(ctx, {(double)ctx.errors});
    ctx.errors = 0;
    for (double e : errs) ctx.errors = std::max(ctx.errors, (int)e);
  } catch (const CollError& e) {
    fflush(stdout);
    fprintf(stderr, "\nsign_allreduce_perf: rank %d: %s failed: %s\n", ctx.rank, e.what, ncclSignGetErrorString(e.res));
    w->failures++;
    ncclSignCommAbort(ctx.comm);
    return 1;
  }
  ncclSignCommDestroy(ctx.comm);
  return 0;
}

// --nccl: the GPU mode, before anything here touches CUDA (its ranks are
// forked processes).
int ncclMain(const Options& o, int algo) {
  if (o.rank >= 0 || o.nranks > 0 || !o.idFile.empty() || o.blocking) {
    fprintf(stderr, "--nccl: ranks are the processes it forks (-t); --rank/--nranks/--id-file and -z do not apply\n");
    return 2;
  }
  if (o.op != "mavo" && o.op != "avg" && o.op != "all") {
    fprintf(stderr, "--nccl: -o %s: the GPU mode times mavo and avg (NCCL's sum is in every row)\n", o.op.c_str());
    return 2;
  }
  if (o.type != "all" && std::none_of(std::begin(kTypes), std::end(kTypes),
                                      [&](const TypeInfo& t) { return o.type == t.name; })) {
    fprintf(stderr, "-d %s: unknown (see -h)\n", o.type.c_str());
    return 2;
  }
#ifdef SIGNLION_PERF_NCCL
  return signlion::perf::runNcclMode(o, algo);
#else
  (void)algo;
  fprintf(stderr,
          "sign_allreduce_perf --nccl: this binary was built without the GPU mode (it needs CUDA, NCCL and the "
          "CUDA kernels)\n");
  return 77;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  setlinebuf(stdout);
  World w;
  int rc = parseOptions(argc, argv, &w.opt);
  if (rc != 0) return rc < 0 ? 0 : rc;
  Options& o = w.opt;

  bool ok;
  w.config.algorithm = algoFromName(o.algo, &ok);
  if (!ok) {
    fprintf(stderr, "-A %s: not one of auto, ring, hd, allgather, fieldsum, hier\n", o.algo.c_str());
    return 2;
  }
  if (o.nccl) return ncclMain(o, w.config.algorithm);
  if (o.timeoutSec > 0) w.config.timeoutMs = o.timeoutSec * 1000;
#ifdef SIGNLION_PERF_MPI
  // MPI only when started by mpirun, so that the same binary also runs alone,
  // with threads or with processes started by hand.
  if (getenv("OMPI_COMM_WORLD_SIZE") != nullptr || getenv("PMI_RANK") != nullptr || getenv("PMIX_RANK") != nullptr) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &w.nProcs);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.proc);
    w.mpi = true;
  }
#endif
  for (const OpInfo& op : kOps)
    if (o.op == "all" ? (!op.mpi || (w.mpi && o.nThreads == 1)) : o.op == op.name) w.ops.push_back(&op);
  for (const TypeInfo& t : kTypes)
    if (o.type == "all" || o.type == t.name) w.types.push_back(&t);
  if (w.ops.empty() || w.types.empty()) {
    fprintf(stderr, "-o %s / -d %s: unknown (see -h)\n", o.op.c_str(), o.type.c_str());
    return 2;
  }
  bool mpiOps = std::any_of(w.ops.begin(), w.ops.end(), [](const OpInfo* op) { return op->mpi; });
  if (mpiOps && (!w.mpi || o.nThreads != 1)) {
    fprintf(stderr, "-o mpisum needs ranks as MPI processes (mpirun, -t 1)%s\n",
                    kHaveMpi ? "" : "; this binary was built without MPI");
    return 2;
  }
  if (!o.idFile.empty()) {
    if (w.mpi) {
      fprintf(stderr, "--rank/--nranks/--id-file: not under mpirun\n");
      return 2;
    }
    w.nProcs = o.nranks;
    w.proc = o.rank;
  }

  // The unique id: made by process 0, shared by MPI, by a file, or in memory.
  if (w.proc == 0 && ncclSignGetUniqueId(&w.id) != ncclSuccess) {
    fprintf(stderr, "sign_allreduce_perf: ncclSignGetUniqueId failed\n");
    return 1;
  }
#ifdef SIGNLION_PERF_MPI
  if (w.mpi) MPI_Bcast(&w.id, sizeof(w.id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
  if (!o.idFile.empty() && !shareIdThroughFile(&w)) return 1;

  std::vector<RankCtx> ranks(o.nThreads);
  std::vector<std::thread> threads;
  std::vector<int> rcs(o.nThreads, 0);
  for (int t = 1; t < o.nThreads; t++) threads.emplace_back([&, t] { rcs[t] = rankMain(&w, t, &ranks[t]); });
  rcs[0] = rankMain(&w, 0, &ranks[0]);
  for (auto& t : threads) t.join();

  int failed = w.failures.load();
  int errors = ranks[0].errors;
  double bw = ranks[0].busBwCount ? ranks[0].busBwSum / ranks[0].busBwCount : 0;
#ifdef SIGNLION_PERF_MPI
  if (w.mpi) {
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
#endif
  if (w.proc == 0 && failed == 0) {
    const char* minEnv = getenv("NCCL_TESTS_MIN_BW");
    double minBw = minEnv ? atof(minEnv) : -1;
    printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g %s\n", bw, minBw < 0 ? "" : (bw < minBw * 0.9 ? "FAILED" : "OK"));
    printf("#\n");
    if (minBw >= 0 && bw < minBw * 0.9) errors++;
  }
#ifdef SIGNLION_PERF_MPI
  if (w.mpi) MPI_Finalize();
#endif
  return failed || errors ? 1 : 0;
}
