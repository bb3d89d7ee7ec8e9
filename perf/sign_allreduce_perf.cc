// sign_allreduce_perf: nccl-tests' all_reduce_perf for the host sign
// all-reduce. Same flags, defaults, table and footer as all_reduce_perf, so
// scripts written for nccl-tests parse it; see docs/PERFORMANCE.md ("Method").
//
// Ranks are threads (-t), processes started by mpirun (built with MPI), or
// processes started by hand (--rank R --nranks N --id-file F: rank 0 writes
// the unique id to F, the others wait for it). Total ranks = processes x -t.
//
// -o picks the reduction: mavo (majority vote, default), avg (average of
// votes), sum (ncclSignHostSumAllReduce, the plain ring sum on the same
// communicator: the baseline rows), onebit (DeepSpeed's 1-bit compressed
// all-reduce of fp32 over the same transport, onebit_baseline.h: the 1-bit
// baseline rows, at most 16 ranks), mpisum (MPI_Allreduce of fp32, MPI
// only), all. -A picks the sign algorithm (auto, ring, hd, allgather,
// fieldsum, hier, direct, tree).
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
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <set>
#include <vector>

#ifdef SIGNLION_PERF_MPI
#include <mpi.h>
#endif

#include "bits/bits.h"
#include "common/call_signature.h"
#include "common/config.h"
#include "nccl_sign.h"
#include "host/link_rate.h"
#include "onebit_baseline.h"
#include "onebit_reference.h"
#include "perf_inputs.h"
#include "perf_report.h"
#include "sign_allreduce_perf_nccl.h"
#include "sign_allreduce_perf_options.h"

namespace {

using signlion::perf::Reduction;
using signlion::perf::RowResult;
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
  bool onebit = false;  // the 1-bit compressed all-reduce baseline (red unused)
};
const OpInfo kOps[] = {{"mavo", Reduction::kMajority, false},
                       {"avg", Reduction::kAverage, false},
                       {"sum", Reduction::kSum, false},
                       {"onebit", Reduction::kSum, false, true},
                       {"mpisum", Reduction::kSum, true}};

struct TypeInfo {
  const char* name;
  ncclDataType_t dt;
};
const TypeInfo kTypes[] = {
    {"float", ncclFloat32}, {"half", ncclFloat16}, {"bfloat16", ncclBfloat16}, {"int8", ncclInt8}};

bool typeFits(const OpInfo& op, ncclDataType_t dt) {
  if (op.mpi || op.onebit) return dt == ncclFloat32;
  if (op.red == Reduction::kSum) return dt == ncclFloat32 || dt == ncclBfloat16;
  if (op.red == Reduction::kAverage) return dt != ncclInt8;
  return true;
}

// The datatypes -o `op` runs, for its error and notes: "float, bfloat16".
std::string typesOf(const OpInfo& op) {
  std::string out;
  for (const TypeInfo& t : kTypes)
    if (typeFits(op, t.dt)) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

double parseSize(const char* s) {  // nccl-tests' K/M/G suffixes (powers of 1024)
  double v;
  char unit = 0;
  int n = sscanf(s, "%lf %c", &v, &unit);
  if (n < 1) return -1;
  if (n == 1) return v;
  switch (unit) {
    case 'G':
    case 'g':
      return v * (1 << 30);
    case 'M':
    case 'm':
      return v * (1 << 20);
    case 'K':
    case 'k':
      return v * (1 << 10);
    default:
      return -1;
  }
}

// -t x -g: the most ranks one process starts. In the host mode every rank is
// a thread with its own communicator over loopback sockets; measured here
// (2 cores, 1 process): -t 64 ran in 4 s with 1856 threads and 5567 file
// descriptors, -t 128 in 193 s (the machine heavily loaded) with 4224 threads
// and 12669 descriptors (this machine's limit: 20000); -t 100000 hung until
// a timeout killed it (as reported in review). More ranks: more processes
// (mpirun, or --rank/--nranks/--id-file), each with at most this many.
constexpr int kMaxRanksPerProcess = 128;

void usage(const char* argv0) {
  printf(
      "USAGE: %s\n\t"
      "[-t,--nthreads <num threads>] host mode: ranks as threads per process; --nccl: processes\n\t"
      "[-g,--ngpus <gpus per thread>] ranks per thread (host) or per process (--nccl): ranks = t x g\n\t"
      "         (t x g at most %d: more ranks as more processes, mpirun or --rank)\n\t"
      "[-b,--minbytes <min size in bytes>]\n\t"
      "[-e,--maxbytes <max size in bytes>]\n\t"
      "[-i,--stepbytes <increment size>]\n\t"
      "[-f,--stepfactor <increment factor>]\n\t"
      "[-n,--iters <iteration count>]\n\t"
      "[-m,--agg_iters <aggregated iteration count>]\n\t"
      "[-w,--warmup_iters <warmup iteration count>]\n\t"
      "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)]\n\t"
      "[-p,--parallel_init <0/1>] (ranks always initialize in parallel)\n\t"
      "[-c,--check <check iteration count>]\n\t"
      "[-o,--op <mavo/avg/sum/onebit/mpisum/all>] onebit: DeepSpeed's 1-bit compressed all-reduce (1-bit\n\t"
      "         Adam/LAMB) of fp32 over the same transport, a baseline: an all-to-all of packed signs with one\n\t"
      "         fp32 scale per chunk, each chunk's owner's sign and scale all-gathered, with error feedback;\n\t"
      "         at most 16 ranks (-o all leaves it out beyond)\n\t"
      "[-d,--datatype <float/half/bfloat16/int8/all>]\n\t"
      "[-r,--root <root>] (ignored: all-reduce)\n\t"
      "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after "
      "each outer iter (-n)]\n\t"
      "[-y,--stream_null <0/1>] (--nccl: the legacy default stream)\n\t"
      "[-T,--timeout <time in seconds>]\n\t"
      "[-G,--cudagraph <num graph launches>] (--nccl: capture the timed calls once, launch the graph G times)\n\t"
      "[-C,--report_cputime <0/1>]\n\t"
      "[-S,--report_timestamps <0/1> report timestamps (default 0)]\n\t"
      "[-J,--output_file <file> write output to filepath; JSON (a path ending in .json)]\n\t"
      "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n\t"
      "[-R,--local_register <0/1/2>] (--nccl: ncclCommRegister of the buffers; 2 falls back to 1)\n\t"
      "[-x,--cta_policy <0/1/2>] (accepted, not applied)\n\t"
      "[-D,--device_implementation <n>] [-V,--device_cta_count <n>] (nccl-tests' own kernels: ignored)\n\t"
      "[-M,--memory <0/1>] (--nccl: GPU memory usage)\n\t"
      "[-u,--unalign <index of first element> misalign source and destination buffers (default: 0)]\n\t"
      "[-I,--per_iter_timing <0/1> per-iteration timing: i_min, i_max, i_p99, i_cv%% columns (default: 0)]\n\t"
      "[-K,--per_iter_skip <count> leading iterations left out of the -I statistics (default: 0)]\n\t"
      "[-A,--algo <auto/ring/hd/allgather/fieldsum/hier/direct/tree>]\n\t"
      "[--rank <r> --nranks <n> --id-file <path>] (one rank per process, started by hand: rank 0 writes the\n\t"
      "   unique id to <path> and removes it once every rank has joined; the others wait for it. A file left\n\t"
      "   by a run that was killed points at that run: delete it before starting the ranks)\n\t"
      "[--net-plugin <name or path>] host mode: the ncclNet carrying the traffic (config.netPlugin), e.g.\n\t"
      "         signlion-ucx for libnccl-net-signlion-ucx.so (default, or signlion: the built-in socket transport)\n\t"
      "[--tie-rule <zero/positive/negative>] host mode: what a tied majority gives (config.tieRule; default\n\t"
      "         zero, exact ties); positive or negative makes every decided element one bit\n\t"
      "[--nccl] GPU mode: ncclSignAllReduce on device buffers and NCCL communicators, -t x -g ranks as\n\t"
      "         processes (rank r on GPU r %% devices), each row next to NCCL's ncclAllReduce of the\n\t"
      "         same count in fp32 and bf16; -o mavo/avg/all. Exits 77 when no GPU answers.\n\t"
      "[-h,--help]\n",
      basename(const_cast<char*>(argv0)), kMaxRanksPerProcess);
}

// The flag as the user wrote it, for messages ("-n", "--rank").
std::string flagName(int c, const option* longopts) {
  if (c > 0 && c < 128) return std::string("-") + (char)c;
  for (const option* l = longopts; l->name != nullptr; l++)
    if (l->val == c) return std::string("--") + l->name;
  return "?";
}

// Returns 0 to go on, else the exit code.
int parseOptions(int argc, char** argv, Options* o) {
  static const option longopts[] = {{"nthreads", required_argument, 0, 't'},
                                    {"ngpus", required_argument, 0, 'g'},
                                    {"minbytes", required_argument, 0, 'b'},
                                    {"maxbytes", required_argument, 0, 'e'},
                                    {"stepbytes", required_argument, 0, 'i'},
                                    {"stepfactor", required_argument, 0, 'f'},
                                    {"iters", required_argument, 0, 'n'},
                                    {"agg_iters", required_argument, 0, 'm'},
                                    {"warmup_iters", required_argument, 0, 'w'},
                                    {"run_cycles", required_argument, 0, 'N'},
                                    {"parallel_init", required_argument, 0, 'p'},
                                    {"check", required_argument, 0, 'c'},
                                    {"op", required_argument, 0, 'o'},
                                    {"datatype", required_argument, 0, 'd'},
                                    {"root", required_argument, 0, 'r'},
                                    {"blocking", required_argument, 0, 'z'},
                                    {"stream_null", required_argument, 0, 'y'},
                                    {"timeout", required_argument, 0, 'T'},
                                    {"cudagraph", required_argument, 0, 'G'},
                                    {"report_cputime", required_argument, 0, 'C'},
                                    {"report_timestamps", required_argument, 0, 'S'},
                                    {"output_file", required_argument, 0, 'J'},
                                    {"average", required_argument, 0, 'a'},
                                    {"local_register", required_argument, 0, 'R'},
                                    {"cta_policy", required_argument, 0, 'x'},
                                    {"device_implementation", required_argument, 0, 'D'},
                                    {"device_cta_count", required_argument, 0, 'V'},
                                    {"memory", required_argument, 0, 'M'},
                                    {"unalign", required_argument, 0, 'u'},
                                    {"per_iter_timing", required_argument, 0, 'I'},
                                    {"per_iter_skip", required_argument, 0, 'K'},
                                    {"algo", required_argument, 0, 'A'},
                                    {"rank", required_argument, 0, 1000},
                                    {"nranks", required_argument, 0, 1001},
                                    {"id-file", required_argument, 0, 1002},
                                    {"nccl", no_argument, 0, 1003},
                                    {"net-plugin", required_argument, 0, 1004},
                                    {"tie-rule", required_argument, 0, 1005},
                                    {"help", no_argument, 0, 'h'},
                                    {}};
  o->args.assign(argv, argv + argc);
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:A:", longopts,
                          nullptr)) != -1) {
    double parsed;
    if (c > 0 && c < 128) o->given[c] = true;
    // A whole int or nothing: strtol alone reads "2x" as 2, "abc" as 0 and
    // wraps 99999999999 into a huge count.
    bool badInteger = false;
    auto integer = [&] {
      char* end = nullptr;
      errno = 0;
      long v = strtol(optarg, &end, 0);
      if (end == optarg || *end != '\0' || errno == ERANGE || v < INT_MIN || v > INT_MAX) badInteger = true;
      return (int)v;
    };
    switch (c) {
      case 't':
        o->nThreads = integer();
        break;
      case 'g':
        o->nGpus = integer();
        break;
      case 'b':
      case 'e':
      case 'i':
        parsed = parseSize(optarg);
        if (parsed < 0) {
          fprintf(stderr, "invalid size specified for '%s'\n",
                  c == 'b'   ? "minbytes"
                  : c == 'e' ? "maxbytes"
                             : "stepBytes");
          return 2;
        }
        (c == 'b' ? o->minBytes : c == 'e' ? o->maxBytes : o->stepBytes) = (size_t)parsed;
        break;
      case 'f': {
        int factor = integer();
        if (factor < 0) {
          fprintf(stderr, "-f %s: a factor >= 0\n", optarg);
          return 2;
        }
        o->stepFactor = (size_t)factor;
        break;
      }
      case 'n':
        o->iters = integer();
        break;
      case 'm':
        o->aggIters = integer();
        break;
      case 'w':
        o->warmupIters = integer();
        break;
      case 'N':
        o->runCycles = integer();
        break;
      case 'p':
        o->parallelInit = integer();
        break;
      case 'c':
        o->check = integer();
        break;
      case 'o':
        o->op = optarg;
        break;
      case 'd':
        o->type = optarg;
        break;
      case 'r':
        break;
      case 'z':
        o->blocking = integer();
        break;
      case 'y':
        o->streamNull = integer();
        break;
      case 'T':
        o->timeoutSec = integer();
        break;
      case 'G':
        o->graphLaunches = integer();
        break;
      case 'C':
        o->reportCputime = integer();
        break;
      case 'S':
        o->reportTimestamps = integer();
        break;
      case 'J':
        o->outputFile = optarg;
        break;
      case 'a':
        o->average = integer();
        break;
      case 'R':
        o->localRegister = integer();
        break;
      case 'x':
        o->ctaPolicy = integer();
        break;
      case 'D':
        o->deviceImpl = integer();
        break;
      case 'V':
        o->deviceCtaCount = integer();
        break;
      case 'M':
        o->memoryReport = integer();
        break;
      case 'u':
        o->unalign = integer();
        break;
      case 'I':
        o->perIterTiming = integer();
        break;
      case 'K':
        o->perIterSkip = integer();
        break;
      case 'A':
        o->algo = optarg;
        break;
      case 1000:
        o->rank = integer();
        break;
      case 1001:
        o->nranks = integer();
        break;
      case 1002:
        o->idFile = optarg;
        break;
      case 1003:
        o->nccl = true;
        break;
      case 1004:
        o->netPlugin = optarg;
        break;
      case 1005: {  // the names the call check prints (tieRuleName)
        o->tieRule = -1;
        for (int t = 0; t < ncclSignNumTieRules; t++)
          if (strcmp(optarg, signlion::tieRuleName(t)) == 0) o->tieRule = t;
        if (o->tieRule < 0) {
          fprintf(stderr, "--tie-rule %s: not one of zero, positive, negative\n", optarg);
          return 2;
        }
        break;
      }
      case 'h':
        usage(argv[0]);
        return -1;
      default:
        usage(argv[0]);
        return 2;
    }
    if (badInteger) {
      fprintf(stderr, "%s %s: not an integer within the range of int (see -h)\n", flagName(c, longopts).c_str(),
              optarg);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "unexpected argument '%s' (see -h)\n", argv[optind]);
    return 2;
  }
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", o->minBytes, o->maxBytes);
    return 2;
  }
  // Checked before anything uses -t x -g: int overflow there wrapped to 0 ranks.
  if (o->nThreads >= 1 && o->nGpus >= 1 && (long long)o->nThreads * o->nGpus > kMaxRanksPerProcess) {
    fprintf(stderr,
            "-t %d x -g %d = %lld ranks: at most %d ranks per process (host mode: each rank is a thread with its "
            "own communicator; --nccl: each rank is a forked process)\n",
            o->nThreads, o->nGpus, (long long)o->nThreads * o->nGpus, kMaxRanksPerProcess);
    return 2;
  }
  if (o->nThreads < 1 || o->nGpus < 1 || o->iters < 1 || o->aggIters < 1 || o->warmupIters < 0 || o->check < 0 ||
      o->average < 0 || o->average > 3 || o->runCycles < 0 || (o->stepFactor <= 1 && o->stepBytes == 0)) {
    fprintf(stderr, "invalid -t/-g/-n/-m/-w/-c/-a/-N/-f/-i value\n");
    return 2;
  }
  if (o->blocking < 0 || o->blocking > 3 || o->graphLaunches < 0 || o->unalign < 0 || o->unalign > 4096 ||
      o->perIterSkip < 0 || o->localRegister < 0 || o->localRegister > 2) {
    fprintf(stderr, "invalid -z (0..3), -G (>= 0), -u (0..4096), -K (>= 0) or -R (0..2) value\n");
    return 2;
  }
  for (auto [flag, value] : {std::pair<char, int>{'C', o->reportCputime},
                             {'S', o->reportTimestamps},
                             {'I', o->perIterTiming},
                             {'p', o->parallelInit},
                             {'y', o->streamNull},
                             {'M', o->memoryReport}}) {
    if (value != 0 && value != 1) {
      fprintf(stderr, "-%c %d: 0 or 1\n", flag, value);
      return 2;
    }
  }
  if (o->timeoutSec < 0 || o->deviceImpl < 0 || o->deviceCtaCount < 0) {
    fprintf(stderr, "invalid -T, -D or -V value (>= 0)\n");
    return 2;
  }
  if (!o->outputFile.empty() && !signlion::perf::outputFileUsable(o->outputFile)) return 2;
  if (o->perIterTiming && o->perIterSkip >= o->iters) {
    fprintf(stderr, "-K %d: skips every one of the -n %d iterations\n", o->perIterSkip, o->iters);
    return 2;
  }
  bool byHand = o->rank >= 0 || o->nranks > 0 || !o->idFile.empty();
  if (byHand &&
      (o->rank < 0 || o->nranks < 1 || o->rank >= o->nranks || o->idFile.empty() || o->ranksPerProcess() != 1)) {
    fprintf(stderr, "--rank, --nranks and --id-file go together (0 <= rank < nranks, -t 1 -g 1)\n");
    return 2;
  }
  return 0;
}

// -A as the library reads algorithm names (any case). SIGNLION_ALGO, set to
// an algorithm other than auto, forces it over -A (resolveConfig, as
// NCCL_ALGO does): o->algo becomes the name of what runs, and o->algoNote
// says where it came from, for the header and the JSON. A SIGNLION_ALGO that
// names no algorithm is WARNed by the library and read as auto (-A stands).
bool resolveAlgo(Options* o, ncclSignAlgo_t* requested) {
  if (!signlion::parseAlgoName(o->algo.c_str(), requested)) return false;
  const std::string asked = signlion::algoName(*requested);
  const char* env = getenv("SIGNLION_ALGO");
  ncclSignAlgo_t forced;
  o->algo = asked;
  o->algoNote.clear();
  if (env == nullptr || *env == '\0') return true;  // empty is unset, as the library reads it
  o->algoNote = std::string(" (SIGNLION_ALGO=") + env;
  if (strcasecmp(env, "auto") != 0 && signlion::parseAlgoName(env, &forced)) {
    o->algo = signlion::algoName(forced);
    if (forced != *requested) o->algoNote += ", over -A " + asked;
  }
  o->algoNote += ")";
  return true;
}

// ---- the world: processes x threads ----------------------------------------------

struct World {
  Options opt;
  int nProcs = 1, proc = 0;
  bool mpi = false;
  int nranks() const { return nProcs * opt.ranksPerProcess(); }
  signlion::perf::JsonReport json;  // -J, written by the main rank
  std::vector<std::string> leftOut;  // -o all / -d all: the combinations that cannot run, noted in the header
  ncclSignUniqueId id;
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  std::vector<const OpInfo*> ops;
  std::vector<const TypeInfo*> types;
  std::atomic<int> failures{0};  // collectives that returned an error, in this process
};

bool isMainRank(const World& w, int thread) { return w.proc == 0 && thread == 0; }

#define PRINT(...)                            \
  do {                                        \
    if (isMainRank(*ctx.world, ctx.thread)) { \
      printf(__VA_ARGS__);                    \
    }                                         \
  } while (0)

// Removes the id file if it still holds `id`: one written by a later run at
// the same path (a launcher that did not wait for this one) is left alone.
void removeIdFileIfOurs(const std::string& path, const ncclSignUniqueId& id) {
  ncclSignUniqueId there;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return;
  bool ours = fread(&there, sizeof(there), 1, f) == 1 && memcmp(&there, &id, sizeof(id)) == 0;
  fclose(f);
  if (ours) unlink(path.c_str());
}

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
  char* send = nullptr;  // maxBytes each, 64-byte aligned, then -u elements more
  char* recv = nullptr;
  size_t offset(ncclDataType_t dt) const {  // -u: where the buffers start for dt
    return (size_t)world->opt.unalign * signlion::bits::typeSize(dt);
  }
  double busBwSum = 0;
  int busBwCount = 0;
  int errors = 0;  // rows with a wrong result (main rank's view: every rank counted)
  int rep = 0;
  // -o onebit: the baseline's own links, and every rank's node (its
  // inter-node bytes are counted per peer).
  std::unique_ptr<signlion::perf::OnebitBaseline> onebit;
  std::vector<int> nodeOf;
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
  char* recvbuf = ctx.recv + ctx.offset(dt);
  const void* sendbuf = inPlace ? recvbuf : ctx.send + ctx.offset(dt);
  if (op.mpi) {
#ifdef SIGNLION_PERF_MPI
    int rc = MPI_Allreduce(inPlace ? MPI_IN_PLACE : sendbuf, recvbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) throw CollError{"MPI_Allreduce", ncclSystemError};
#endif
    return;
  }
  if (op.onebit) {
    checkNccl(ctx.onebit->allReduce(static_cast<const float*>(sendbuf), reinterpret_cast<float*>(recvbuf), count),
              "the 1-bit compressed all-reduce (onebit)");
  } else if (op.red == Reduction::kSum) {
    checkNccl(ncclSignHostSumAllReduce(sendbuf, recvbuf, count, dt, ctx.comm), "ncclSignHostSumAllReduce");
  } else {
    ncclSignOp_t sop = op.red == Reduction::kAverage ? ncclSignAverage : ncclSignMajority;
    checkNccl(ncclSignHostAllReduce(sendbuf, recvbuf, count, dt, sop, ctx.comm), "ncclSignHostAllReduce");
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
  if (ctx.onebit) {  // the baseline's links: the same counters, on comms of its own
    b.all += ctx.onebit->wireBytesSent();
    for (int p = 0; p < (int)ctx.nodeOf.size(); p++)
      if (ctx.nodeOf[p] != b.node) b.interNode += ctx.onebit->wireBytesSent(p);
  }
  return b;
}

struct BenchResult {
  RowResult row;
  double wirePerCall;       // max over ranks of bytes this rank sent per call; -1: not ours to count
  double interNodePerCall;  // max over nodes of bytes the node's ranks sent to other nodes per call; -1: likewise
};

// Seconds per call aggregated over the ranks as -a asks.
double aggregate(RankCtx& ctx, double sec) {
  const Options& o = ctx.world->opt;
  const int n = ctx.world->nranks();
  std::vector<double> all = allGather(ctx, {sec});
  double agg = all[0];
  for (int r = 1; r < n; r++) {
    if (o.average == 1) agg += all[r];
    if (o.average == 2) agg = std::min(agg, all[r]);
    if (o.average == 3) agg = std::max(agg, all[r]);
  }
  return o.average == 1 ? agg / n : agg;
}

// Elements of `out` that differ, bit for bit, from the plain reference of
// the onebit pattern (its first call, zero errors) over every rank's
// fillInput(seed), each regenerated here.
size_t onebitWrong(const float* out, size_t count, int nranks, uint64_t seed) {
  signlion::perf::OnebitReference ref(nranks, count, false);
  std::vector<float> expected(count);
  ref.step([&](int r, float* buf) { signlion::perf::fillInput(buf, count, ncclFloat32, r, seed); }, expected.data());
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += memcmp(&out[i], &expected[i], sizeof(float)) != 0;
  return wrong;
}

BenchResult benchTime(RankCtx& ctx, const OpInfo& op, ncclDataType_t dt, size_t count, bool inPlace) {
  using Clock = std::chrono::steady_clock;
  const Options& o = ctx.world->opt;
  const int n = ctx.world->nranks();
  const size_t esize = signlion::bits::typeSize(dt);
  char* input = (inPlace ? ctx.recv : ctx.send) + ctx.offset(dt);
  char* output = ctx.recv + ctx.offset(dt);
  if (o.check) signlion::perf::fillInput(input, count, dt, ctx.rank, 99);

  runColl(ctx, op, dt, count, inPlace);  // sync
  barrier(ctx, op.mpi);

  // -z: host calls return with their result in place, so "wait" is a no-op;
  // 1 and 3 add a barrier (3: left out of the time, as nccl-tests does).
  std::vector<double> iterSec;
  iterSec.reserve(o.iters);
  double collOnly = 0;
  SentBytes wire0 = sentBytes(ctx);
  auto t0 = Clock::now();
  for (int it = 0; it < o.iters; it++) {
    auto i0 = Clock::now();
    for (int a = 0; a < o.aggIters; a++) {
      runColl(ctx, op, dt, count, inPlace);
      if (o.blocking == 1) barrier(ctx, op.mpi);
    }
    double sec = std::chrono::duration<double>(Clock::now() - i0).count();
    collOnly += sec;
    if (o.perIterTiming) iterSec.push_back(sec / o.aggIters);
    if (o.blocking == 3) barrier(ctx, op.mpi);
  }
  double total = o.blocking == 3 ? collOnly : std::chrono::duration<double>(Clock::now() - t0).count();
  double sec = total / (o.iters * o.aggIters);
  SentBytes wire1 = sentBytes(ctx);
  const double calls = (double)o.iters * o.aggIters;
  double wire = (double)(wire1.all - wire0.all) / calls;
  double interNode = (double)(wire1.interNode - wire0.interNode) / calls;

  BenchResult res;
  double agg = aggregate(ctx, sec);
  res.row.usec = agg * 1e6;
  res.row.algBw = agg > 0 ? (double)(count * esize) / 1e9 / agg : 0;
  res.row.busBw = res.row.algBw * (2.0 * (n - 1)) / n;
  if (o.perIterTiming)  // iteration i: the slowest rank's, as nccl-tests
    signlion::perf::setPerIteration(&res.row, allGather(ctx, iterSec), n, o.ranksPerProcess(), o.perIterSkip);
  double maxWire = 0;
  std::vector<double> nodeSent(n, 0.0);  // nodes are numbered below n
  std::vector<double> wires = allGather(ctx, {wire, interNode, (double)wire1.node});
  for (int r = 0; r < n; r++) {
    maxWire = std::max(maxWire, wires[3 * r]);
    nodeSent[(int)wires[3 * r + 2]] += wires[3 * r + 1];
  }
  res.wirePerCall = op.mpi ? -1 : maxWire;
  res.interNodePerCall = op.mpi ? -1 : *std::max_element(nodeSent.begin(), nodeSent.end());
  if (o.check) {
    double wrong = 0;
    for (int c = 0; c < o.check; c++) {
      uint64_t seed = 1000 + (uint64_t)++ctx.rep;
      signlion::perf::fillInput(input, count, dt, ctx.rank, seed);
      if (op.onebit) ctx.onebit->resetErrors();  // the reference's call starts from zero errors
      runColl(ctx, op, dt, count, inPlace);
      double mine = op.onebit ? (double)onebitWrong(reinterpret_cast<const float*>(output), count, n, seed)
                              : (double)signlion::perf::countWrong(output, count, dt, op.red, n, seed,
                                                                   (ncclSignTieRule_t)o.tieRule);
      for (double v : allGather(ctx, {mine})) wrong += v;
      if (wrong) break;
    }
    res.row.wrong = wrong;
    if (wrong) ctx.errors++;
  }
  return res;
}

void timeTest(RankCtx& ctx, const OpInfo& op, const TypeInfo& type) {
  const Options& o = ctx.world->opt;
  const size_t esize = signlion::bits::typeSize(type.dt);
  const bool mainRank = isMainRank(*ctx.world, ctx.thread);
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
        PRINT("%s", signlion::perf::formatResult(r->row).c_str());
        ctx.busBwSum += r->row.busBw;
        ctx.busBwCount++;
      }
      for (double w : {out.wirePerCall, out.interNodePerCall})
        if (w >= 0)
          PRINT("  %12.0f  %7.3f", w, count ? w * 8.0 / (double)count : 0.0);
        else
          PRINT("  %12s  %7s", "N/A", "N/A");
      if (o.reportTimestamps) PRINT("  %19s", signlion::perf::timestampNow().c_str());
      PRINT("\n");
      if (mainRank) {
        const double nan = std::numeric_limits<double>::quiet_NaN();  // null: MPI's bytes are not counted
        const bool wire = out.wirePerCall >= 0;
        ctx.world->json.row(
            count * esize, count, type.name, op.name, out.row, in.row,
            {{"wire_bytes_per_rank", wire ? out.wirePerCall : nan},
             {"wire_bits_per_element", wire ? (count ? out.wirePerCall * 8.0 / (double)count : 0.0) : nan},
             {"inter_node_bytes_per_node", wire ? out.interNodePerCall : nan},
             {"inter_node_bits_per_element", wire ? (count ? out.interNodePerCall * 8.0 / (double)count : 0.0) : nan}});
      }
      if (size == 0 && o.stepFactor > 1) break;  // 0 * factor never grows
    }
  } while (--cycles != 0);
}

void printHeader(RankCtx& ctx) {
  World& w = *ctx.world;
  const Options& o = w.opt;
  // graph: 0, as in nccl-tests without -G: the host mode makes no CUDA graph (a note says so).
  PRINT("%s", signlion::perf::runHeader(o, o.nThreads, o.nGpus, 0, "host clock timing").c_str());
  for (const std::string& note : signlion::perf::notApplicableNotes(o, true)) PRINT("# note: %s\n", note.c_str());
  for (const std::string& l : w.leftOut) PRINT("# note: left out: %s\n", l.c_str());
  int version = 0;
  ncclSignGetVersion(&version);
  const char* bits = getenv("SIGNLION_FIELD_BITS");
  PRINT("# signlion %d.%d.%d host communicator: %d ranks (%d %s x %d threads), algorithm %s%s%s, tie rule %s\n",
        version / 10000, version / 100 % 100, version % 100, w.nranks(), w.nProcs,
        w.mpi ? "MPI processes" : "processes", o.ranksPerProcess(), o.algo.c_str(), o.algoNote.c_str(),
        bits ? (std::string(", SIGNLION_FIELD_BITS=") + bits).c_str() : "", signlion::tieRuleName(o.tieRule));
  PRINT("#\n# Using devices\n");
  // One line per rank, gathered: pid and host name (32 characters).
  char host[33] = {0};
  gethostname(host, 32);
  std::vector<double> mine{(double)getpid()};
  for (int i = 0; i < 32; i++) mine.push_back((double)(unsigned char)host[i]);
  std::vector<double> all = allGather(ctx, mine);
  std::vector<signlion::perf::DeviceInfo> devices(w.nranks());
  for (int r = 0; r < w.nranks(); r++) {
    signlion::perf::DeviceInfo& d = devices[r];
    d.rank = r;
    d.pid = (int)all[r * 33];
    for (int i = 0; i < 32 && all[r * 33 + 1 + i] != 0; i++) d.hostname += (char)all[r * 33 + 1 + i];
    d.deviceHex = "0x00";
    d.deviceInfo = "host CPU";
    PRINT("%s", signlion::perf::deviceLine(d).c_str());
  }
  PRINT("#\n");
  // graph 0 as in the header line
  if (isMainRank(w, ctx.thread)) w.json.config(o, o.nThreads, o.nGpus, 0, w.nranks(), devices);
  const signlion::perf::ResultColumns cols = signlion::perf::resultColumns(o);
  // The last two pairs: the transport's byte counters per call, the most any
  // rank sent, and the most any node's ranks sent to other nodes (host ids as
  // the communicator traded them, e.g. SIGNLION_HOSTID per namespace).
  PRINT("# %10s  %12s  %8s  %6s  %6s%s  %s%s\n", "", "", "", "", "", cols.top.c_str(), "  wire sent per rank",
        "   inter-node per node");
  PRINT("# %10s  %12s  %8s  %6s  %6s%s  %12s  %7s  %12s  %7s%s\n", "size", "count", "type", "redop", "root",
        cols.names.c_str(), "wire", "wire", "inter", "inter", o.reportTimestamps ? "  timestamp" : "");
  PRINT("# %10s  %12s  %8s  %6s  %6s%s  %12s  %7s  %12s  %7s%s%s\n", "(B)", "(elements)", "", "", "",
        cols.units.c_str(), "(B)", "(b/elt)", "(B)", "(b/elt)", o.reportTimestamps ? "  " : "",
        o.reportTimestamps ? signlion::perf::kTimestampFormat : "");
}

// Bytes of each of a rank's two buffers: -e rounded up to 64, then -u elements.
size_t bufferBytes(const Options& o) {
  return std::max<size_t>(64, (o.maxBytes + 63) / 64 * 64) + (size_t)o.unalign * 8;
}

// -o onebit: the baseline's links to every rank, over the communicator's
// transport (config.netPlugin), their handles traded on the communicator.
void connectOnebit(RankCtx& ctx) {
  World& w = *ctx.world;
  auto exchange = [&](const void* mine, size_t bytes, void* all) {
    try {
      const unsigned char* m = static_cast<const unsigned char*>(mine);
      std::vector<double> got = allGather(ctx, std::vector<double>(m, m + bytes));
      for (size_t i = 0; i < got.size(); i++) static_cast<unsigned char*>(all)[i] = (unsigned char)got[i];
      return true;
    } catch (const CollError&) {
      return false;
    }
  };
  const int timeoutMs = w.opt.timeoutSec > 0 ? w.opt.timeoutSec * 1000 : 300000;
  // As the communicator reads it: the config's, else SIGNLION_NET_PLUGIN, else the built-in sockets.
  const char* plugin = w.config.netPlugin != nullptr ? w.config.netPlugin : getenv("SIGNLION_NET_PLUGIN");
  checkNccl(signlion::perf::OnebitBaseline::create(w.nranks(), ctx.rank, plugin, timeoutMs, exchange, &ctx.onebit),
            "the onebit baseline's links");
  std::vector<double> nodes = allGather(ctx, {(double)sentBytes(ctx).node});
  ctx.nodeOf.assign(nodes.begin(), nodes.end());
  // Paced where the communicator paces its own links (host/send_pacing.h): a
  // line rate (a standard one, or SIGNLION_COST_BETA_MBPS) and a rank per node.
  int64_t mbits = 0;
  checkNccl(ncclSignCommGetLinkRate(ctx.comm, &mbits), "ncclSignCommGetLinkRate");
  const bool lineRate = signlion::host::isLineRate(mbits);
  const bool onePerNode = std::set<int>(ctx.nodeOf.begin(), ctx.nodeOf.end()).size() == ctx.nodeOf.size();
  ctx.onebit->paceLinks(lineRate && onePerNode ? mbits : 0);
}

// Returns 0, or 1 after a failed collective (the comm is then aborted).
int rankMain(World* w, int thread, RankCtx* out) {
  RankCtx& ctx = *out;
  ctx.world = w;
  ctx.thread = thread;
  ctx.rank = w->proc * w->opt.ranksPerProcess() + thread;
  ncclResult_t res = ncclSignCommInitRank(&ctx.comm, w->nranks(), w->id, ctx.rank, &w->config);
  if (res != ncclSuccess) {
    fprintf(stderr, "sign_allreduce_perf: rank %d: ncclSignCommInitRank: %s\n", ctx.rank, ncclSignGetErrorString(res));
    if (!w->opt.idFile.empty() && w->proc != 0 && (res == ncclRemoteError || res == ncclSystemError))
      fprintf(stderr,
              "sign_allreduce_perf: rank %d: (if %s was left from an earlier run, this rank read that run's id before "
              "rank 0 wrote this one's: delete the file and start the ranks again)\n",
              ctx.rank, w->opt.idFile.c_str());
    w->failures++;
    return 1;
  }
  // Every rank has joined (the init returns once all have checked in with
  // the root): the id file has served, and a later run must not find it.
  if (!w->opt.idFile.empty() && w->proc == 0 && thread == 0) removeIdFileIfOurs(w->opt.idFile, w->id);
  size_t bytes = bufferBytes(w->opt);
  std::unique_ptr<char, decltype(&free)> send((char*)aligned_alloc(64, bytes), free);
  std::unique_ptr<char, decltype(&free)> recv((char*)aligned_alloc(64, bytes), free);
  if (send == nullptr || recv == nullptr) {  // main() checked the total against the machine's memory
    fprintf(stderr, "sign_allreduce_perf: rank %d: cannot allocate 2 x %zu bytes\n", ctx.rank, bytes);
    w->failures++;
    ncclSignCommAbort(ctx.comm);
    return 1;
  }
  ctx.send = send.get();
  ctx.recv = recv.get();
  memset(ctx.send, 0, bytes);
  memset(ctx.recv, 0, bytes);
  try {
    if (std::any_of(w->ops.begin(), w->ops.end(), [](const OpInfo* op) { return op->onebit; }))
      connectOnebit(ctx);
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
    if (ctx.onebit) ctx.onebit->abort();  // its peers' pending transfers fail rather than wait
    ctx.onebit.reset();
    ncclSignCommAbort(ctx.comm);
    return 1;
  }
  ctx.onebit.reset();
  ncclSignCommDestroy(ctx.comm);
  return 0;
}

// --nccl: the GPU mode, before anything here touches CUDA (its ranks are
// forked processes).
int ncclMain(const Options& o, int algo) {
  if (o.rank >= 0 || o.nranks > 0 || !o.idFile.empty()) {
    fprintf(stderr, "--nccl: ranks are the processes it forks (-t x -g); --rank/--nranks/--id-file do not apply\n");
    return 2;
  }
  if (o.graphLaunches > 0 && o.streamNull) {
    fprintf(stderr, "--nccl -G: the legacy default stream (-y 1) cannot be captured into a CUDA graph\n");
    return 2;
  }
  if (o.graphLaunches > 0 && (o.blocking != 0 || o.perIterTiming)) {
    fprintf(stderr,
            "--nccl -G: a CUDA graph cannot wait inside (-z %d) or time single iterations (-I); use -z 0, "
            "no -I\n",
            o.blocking);
    return 2;
  }
  if (o.op != "mavo" && o.op != "avg" && o.op != "all") {
    fprintf(stderr, "--nccl: -o %s: the GPU mode times mavo and avg (NCCL's sum is in every row)\n", o.op.c_str());
    return 2;
  }
  if (o.type != "all" &&
      std::none_of(std::begin(kTypes), std::end(kTypes), [&](const TypeInfo& t) { return o.type == t.name; })) {
    fprintf(stderr, "-d %s: unknown (see -h)\n", o.type.c_str());
    return 2;
  }
  // As in host mode (typeFits): never an empty table that exits 0.
  for (const OpInfo& op : kOps)
    for (const TypeInfo& t : kTypes)
      if (o.op == op.name && o.type == t.name && !typeFits(op, t.dt)) {
        fprintf(stderr, "--nccl: -o %s -d %s: not supported; -o %s runs %s\n", op.name, t.name, op.name,
                typesOf(op).c_str());
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

  ncclSignAlgo_t requested;
  if (!resolveAlgo(&o, &requested)) {
    fprintf(stderr, "-A %s: not one of auto, ring, hd, allgather, fieldsum, hier, direct, tree\n", o.algo.c_str());
    return 2;
  }
  w.config.algorithm = requested;
  if (o.nccl && !o.netPlugin.empty()) {
    fprintf(stderr, "--net-plugin: host mode only (with --nccl, NCCL_NET_PLUGIN picks NCCL's network)\n");
    return 2;
  }
  if (o.nccl && o.tieRule != ncclSignTieZero) {
    fprintf(stderr, "--tie-rule: host mode only (with --nccl the communicator's rules are the defaults)\n");
    return 2;
  }
  if (o.nccl) return ncclMain(o, w.config.algorithm);
  w.config.tieRule = o.tieRule;
  if (o.timeoutSec > 0) w.config.timeoutMs = o.timeoutSec * 1000;
  if (!o.netPlugin.empty()) w.config.netPlugin = o.netPlugin.c_str();  // o outlives every communicator
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
    if (o.op == "all" ? (!op.mpi || (w.mpi && o.ranksPerProcess() == 1)) : o.op == op.name) w.ops.push_back(&op);
  for (const TypeInfo& t : kTypes)
    if (o.type == "all" || o.type == t.name) w.types.push_back(&t);
  if (w.ops.empty() || w.types.empty()) {
    fprintf(stderr, "-o %s / -d %s: unknown (see -h)\n", o.op.c_str(), o.type.c_str());
    return 2;
  }
  bool mpiOps = std::any_of(w.ops.begin(), w.ops.end(), [](const OpInfo* op) { return op->mpi; });
  if (mpiOps && (!w.mpi || o.ranksPerProcess() != 1)) {
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
  // The onebit baseline links every rank to every other: as the direct
  // algorithm, it runs on at most kOnebitMaxRanks ranks (-o all leaves it out beyond).
  if (w.nranks() > signlion::perf::kOnebitMaxRanks) {
    if (o.op == "onebit") {
      fprintf(stderr, "-o onebit: %d ranks; the 1-bit baseline runs on at most %d\n", w.nranks(),
              signlion::perf::kOnebitMaxRanks);
      return 2;
    }
    w.ops.erase(std::remove_if(w.ops.begin(), w.ops.end(), [](const OpInfo* op) { return op->onebit; }),
                w.ops.end());
  }

  // A combination that cannot run is an error when asked for by name (exit 2,
  // as an unknown -o or -d), and left out with a note under -o all / -d all,
  // so that a run never reports success for rows it did not time.
  std::vector<std::string>& leftOut = w.leftOut;
  size_t runnable = 0;
  for (const TypeInfo* t : w.types)
    for (const OpInfo* op : w.ops)
      if (typeFits(*op, t->dt))
        runnable++;
      else
        leftOut.push_back(std::string("-o ") + op->name + " -d " + t->name + ": not supported; -o " + op->name +
                          " runs " + typesOf(*op));
  if (runnable == 0) {
    for (const std::string& l : leftOut) fprintf(stderr, "sign_allreduce_perf: %s\n", l.c_str());
    return 2;
  }

  // Every rank of this process holds two buffers of -e bytes; more than the
  // machine's memory is an error here rather than a failed allocation later.
  const double needed = 2.0 * (double)bufferBytes(o) * o.ranksPerProcess();
  const double physical = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  if (physical > 0 && needed > physical) {
    fprintf(stderr, "-e %zu: %d ranks x 2 buffers need %.3g bytes, more than this machine's %.3g bytes of memory\n",
            o.maxBytes, o.ranksPerProcess(), needed, physical);
    return 2;
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
  // Rank 0 also removes the id file when its init failed (e.g. a rank never
  // came): the next run starts clean.
  struct IdFileRemover {
    const std::string* path;
    const ncclSignUniqueId* id;
    ~IdFileRemover() {
      if (path != nullptr) removeIdFileIfOurs(*path, *id);
    }
  } removeIdFile{!o.idFile.empty() && w.proc == 0 ? &o.idFile : nullptr, &w.id};

  if (w.proc == 0 && !w.json.open(o.outputFile, o, "host", -1)) return 2;
  std::vector<RankCtx> ranks(o.ranksPerProcess());
  std::vector<std::thread> threads;
  std::vector<int> rcs(o.ranksPerProcess(), 0);
  for (int t = 1; t < o.ranksPerProcess(); t++) threads.emplace_back([&, t] { rcs[t] = rankMain(&w, t, &ranks[t]); });
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
    const double minBw = signlion::perf::minBusBwFromEnv();
    if (signlion::perf::printFooter(errors, bw, minBw)) errors++;
    w.json.finish(errors, bw, minBw);
  }
#ifdef SIGNLION_PERF_MPI
  if (w.mpi) MPI_Finalize();
#endif
  return failed || errors ? 1 : 0;
}
