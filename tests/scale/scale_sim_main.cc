// signlion_scale_sim: the sign all-reduce schedules at 64 to 4096 ranks (and
// hierarchical layouts up to 512 nodes x 8) in one process
// (scale/schedule_sim.h: real schedules, real bit kernels, in-memory links).
//
// 1. Bit for bit: every algorithm at every N of the range, on random inputs
//    (zeros, NaN, infinities, denormals mixed in), majority and average,
//    binary and ternary, fp32 and bf16; every rank's output must equal the
//    plain reference (src/bits/vote_reference.h) byte for byte.
// 2. Wire cost: bits sent per element per rank for each algorithm and N,
//    from the schedules at a message size where the shards are balanced,
//    against the formulas of docs/ALGORITHMS.md; where a formula is exact
//    the two must be equal. Also the most distinct peers one rank talks to.
//
// Options: --max-n N (default 4096), --max-nodes M (default 512),
// --quick (fewer rank counts and a quarter of the memory: the CTest subset),
// --algo A (part 1 for one algorithm only), --no-check (skip part 1),
// --no-table (skip part 2). Exit status 1 on any mismatch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "algo/schedule.h"
#include "bits/bits.h"
#include "common/config.h"
#include "common/vote_inputs.h"
#include "scale/schedule_sim.h"

namespace signlion {
namespace test {
namespace {

constexpr ncclSignAlgo_t kFlat[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                    ncclSignAlgoFieldSum};
constexpr int kRankCounts[] = {64, 96, 100, 128, 256, 384, 512, 1000, 1024, 2048, 3000, 4096};
// --quick (CTest): fewer rank counts, a quarter of the memory.
constexpr int kQuickRankCounts[] = {64, 100, 256, 1000, 1024};
bool quick = false;
bool inRange(int n, int maxN) {
  if (n > maxN) return false;
  return !quick || std::find(std::begin(kQuickRankCounts), std::end(kQuickRankCounts), n) != std::end(kQuickRankCounts);
}

// Bounds on one case's memory: all ranks' scratch, and all ranks' inputs
// plus outputs. The count is cut to fit (fewer blocks than ranks is a case
// the schedules handle: some shards are empty).
constexpr double kScratchBudget = 384.0 * (1 << 20);
constexpr double kBufferBudget = 256.0 * (1 << 20);

int failures = 0;

algo::Topology nodesOf(const std::vector<int>& sizes) {
  algo::Topology t;
  for (size_t n = 0; n < sizes.size(); n++) t.node.insert(t.node.end(), (size_t)sizes[n], (int)n);
  return t;
}

// Scratch words per block of one rank (rank 0's schedule; the others' are
// the same or close).
double scratchWordsPerBlock(const SimCase& c) {
  algo::Schedule s;
  const int64_t probe = 64;
  if (algo::buildSchedule(c.algo, c.nranks, 0, probe, c.spec, &s, c.topo.known() ? &c.topo : nullptr) != ncclSuccess)
    return 1;
  int64_t words = s.counterBytes() + s.resultBytes() + s.votesBytes() + s.fieldsBytes();
  return (double)words / 8 / probe + 2;  // + the field-sum planes and slack
}

// Runs one case on random inputs and compares every rank's output with the
// reference; prints one line.
void checkCase(SimCase c, uint32_t seed, const char* label) {
  const size_t esize = bits::typeSize(c.dt);
  const double wpb = scratchWordsPerBlock(c);
  int64_t nblocks = 2 * (int64_t)c.nranks + 3;
  const double share = quick ? 0.25 : 1.0;
  nblocks = std::min<int64_t>(nblocks, (int64_t)(share * kScratchBudget / (8 * wpb * c.nranks)));
  nblocks = std::min<int64_t>(nblocks, (int64_t)(share * kBufferBudget / (2.0 * 64 * esize * c.nranks)));
  nblocks = std::max<int64_t>(1, nblocks);
  c.count = (size_t)nblocks * 64 - (seed % 37);  // a partial last block
  std::vector<Bytes> in = randomVoteInputs(c.nranks, c.count, c.dt, seed);
  Bytes want = referenceOutput(in, c.count, c.dt, c.spec.op, c.spec.zeroRule, c.spec.tieRule);
  std::vector<Bytes> got((size_t)c.nranks, Bytes(c.count * esize, 0xA5));
  std::vector<const void*> ip;
  std::vector<void*> op;
  for (int r = 0; r < c.nranks; r++) {
    ip.push_back(in[(size_t)r].data());
    op.push_back(got[(size_t)r].data());
  }
  SimOutcome o = simulateSchedules(c, ip, op);
  in.clear();
  int wrong = 0, firstRank = -1;
  size_t firstByte = 0;
  if (o.ok) {
    for (int r = 0; r < c.nranks; r++) {
      size_t m = firstMismatch(got[(size_t)r], want);
      if (m != std::string::npos && wrong++ == 0) {
        firstRank = r;
        firstByte = m;
      }
    }
  }
  const bool ok = o.ok && wrong == 0;
  if (!ok) failures++;
  printf("%-5s %-9s N=%-5d %-12s %-8s %-4s count=%-7zu steps=%-5d msgs=%-9lld scratch=%6.1f MiB %6.2f s  %s\n",
         ok ? "ok" : "FAIL", algoName(c.algo), c.nranks, label, c.spec.op == ncclSignAverage ? "average" : "majority",
         c.spec.zeroRule == ncclSignZeroAbstain ? "tern" : "bin", c.count, o.steps, (long long)o.messages,
         o.scratchBytes / 1048576.0, o.seconds,
         !o.ok   ? o.error.c_str()
         : wrong ? ("ranks wrong: " + std::to_string(wrong) + ", first rank " + std::to_string(firstRank) +
                    " at byte " + std::to_string(firstByte))
                       .c_str()
                 : "");
  fflush(stdout);
}

// The two op settings each (algorithm, N) runs, alternating dtypes.
void checkFlat(ncclSignAlgo_t a, int n) {
  algo::OpSpec maj{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero};
  algo::OpSpec other = n % 2 ? algo::OpSpec{ncclSignAverage, ncclSignZeroAbstain, ncclSignTieZero}
                             : algo::OpSpec{ncclSignMajority, ncclSignZeroAbstain, ncclSignTiePositive};
  SimCase c;
  c.algo = a;
  c.nranks = n;
  c.spec = maj;
  c.dt = ncclFloat32;
  checkCase(c, 1000u * (uint32_t)n + (uint32_t)a, "flat");
  c.spec = other;
  c.dt = ncclBfloat16;
  checkCase(c, 2000u * (uint32_t)n + (uint32_t)a, "flat");
}

// ---- wire cost ----

int w(int64_t m) { return algo::counterWidth(m); }

// docs/ALGORITHMS.md's formulas, majority with exact ties, binary; NAN where
// the page gives none (halving-doubling off powers of two, hierarchical). A
// result that can be 0 (N even) travels coded, 1.6 bits per element, over
// ranges of whole 5-block groups (balancedBlocks).
double formulaBits(ncclSignAlgo_t a, int n) {
  const double rp = n % 2 == 0 ? 1.6 : 1;
  switch (a) {
    case ncclSignAlgoRing: {
      double s = 0;
      for (int k = 1; k <= n - 1; k++) s += w(k);
      return s / n + (double)(n - 1) / n * rp;
    }
    case ncclSignAlgoHalvingDoubling: {
      if (n & (n - 1)) return NAN;
      double s = 0;
      for (int j = 1; (1 << j) <= n; j++) s += (double)w(int64_t{1} << (j - 1)) / (double)(int64_t{1} << j);
      return s + (double)(n - 1) / n * rp;
    }
    case ncclSignAlgoAllGather:
      return n - 1;
    case ncclSignAlgoFieldSum:
      return 2.0 * (n - 1) / n * 64.0 / (64 / w(n));
    default:
      return NAN;
  }
}

// Blocks at which every shard of the algorithm is the same size, so the
// formulas are exact: a multiple of N (ring, halving-doubling) with shards of
// whole 5-block groups (a coded result's partial group travels as planes), of
// N field words (field-sum: N * fieldsPerWord blocks hold 64 N words).
int64_t balancedBlocks(ncclSignAlgo_t a, int n) {
  return a == ncclSignAlgoFieldSum ? (int64_t)n * (64 / w(n)) : 20 * (int64_t)n;
}

struct Wire {
  double meanBits = 0, maxBits = 0, maxNodeInterBits = 0;
  size_t maxPeers = 0;
};

bool wireCost(const SimCase& c, int64_t nblocks, Wire* out) {
  const algo::Topology* topo = c.topo.known() ? &c.topo : nullptr;
  const double elems = (double)nblocks * 64;
  std::vector<double> nodeInter(c.topo.known() ? c.topo.members(c.nranks).size() : 0, 0.0);
  double sum = 0;
  for (int r = 0; r < c.nranks; r++) {
    algo::Schedule s;
    if (algo::buildSchedule(c.algo, c.nranks, r, nblocks, c.spec, &s, topo) != ncclSuccess) return false;
    std::set<int> peers;
    addSchedulePeers(s, &peers);
    double inter = 0;
    for (const algo::Step& st : s.steps)
      for (const algo::Send& x : st.sends)
        if (topo && !topo->sameNode(r, x.peer)) inter += (double)x.bytes();
    const double bits = 8.0 * (double)s.bytesSent() / elems;
    sum += bits;
    out->maxBits = std::max(out->maxBits, bits);
    out->maxPeers = std::max(out->maxPeers, peers.size());
    if (topo) nodeInter[(size_t)topo->nodeOf(r)] += 8.0 * inter / elems;
  }
  out->meanBits = sum / c.nranks;
  for (double b : nodeInter) out->maxNodeInterBits = std::max(out->maxNodeInterBits, b);
  return true;
}

void wireTable(int maxN, int maxNodes) {
  printf("\n## Wire cost: bits sent per element per rank (majority, exact ties, binary)\n\n");
  printf("| algorithm | N | blocks | measured mean | measured max | formula | most peers of a rank | seconds |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (ncclSignAlgo_t a : kFlat)
    for (int n : kRankCounts) {
      if (!inRange(n, maxN)) continue;
      SimCase c;
      c.algo = a;
      c.nranks = n;
      const int64_t nb = balancedBlocks(a, n);
      Wire wc;
      const auto t0 = std::chrono::steady_clock::now();
      if (!wireCost(c, nb, &wc)) {
        printf("| %s | %d | FAIL: buildSchedule |\n", algoName(a), n);
        failures++;
        continue;
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double f = formulaBits(a, n);
      // Exact: every rank sends the formula's bits (equal shards, no fold).
      const bool exact = !std::isnan(f);
      const bool ok = !exact || (std::fabs(wc.meanBits - f) < 1e-9 && std::fabs(wc.maxBits - f) < 1e-9);
      if (!ok) failures++;
      char fs[32];
      snprintf(fs, sizeof fs, exact ? "%.4f" : "-", f);
      printf("| %s | %d | %lld | %.4f | %.4f | %s%s | %zu | %.1f |\n", algoName(a), n, (long long)nb, wc.meanBits,
             wc.maxBits, fs, ok ? "" : " MISMATCH", wc.maxPeers, secs);
      fflush(stdout);
    }
  printf("\n## Hierarchical: bits per element per rank, and inter-node bits per element per node\n\n");
  printf(
      "| nodes x ranks | blocks | per rank mean | per rank max | inter-node, busiest node | flat hd inter-node |"
      " flat ring inter-node | most peers of a rank |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (int per : {4, 8})
    for (int nodes : {8, 16, 64, 128, 512}) {
      if (nodes > maxNodes || nodes * per > std::max(maxN, 4096)) continue;
      SimCase c;
      c.nranks = nodes * per;
      c.topo = nodesOf(std::vector<int>((size_t)nodes, per));
      const int64_t nb = 4 * (int64_t)c.nranks;
      Wire h, hd, ring;
      c.algo = ncclSignAlgoHierarchical;
      bool ok = wireCost(c, nb, &h);
      c.algo = ncclSignAlgoHalvingDoubling;
      ok = ok && wireCost(c, nb, &hd);
      c.algo = ncclSignAlgoRing;
      ok = ok && wireCost(c, nb, &ring);
      if (!ok) {
        printf("| %d x %d | FAIL: buildSchedule |\n", nodes, per);
        failures++;
        continue;
      }
      printf("| %d x %d | %lld | %.4f | %.4f | %.4f | %.4f | %.4f | %zu |\n", nodes, per, (long long)nb, h.meanBits,
             h.maxBits, h.maxNodeInterBits, hd.maxNodeInterBits, ring.maxNodeInterBits, h.maxPeers);
      fflush(stdout);
    }
}

}  // namespace
}  // namespace test
}  // namespace signlion

int main(int argc, char** argv) {
  using namespace signlion::test;
  int maxN = 4096, maxNodes = 512;
  bool table = true, check = true;
  ncclSignAlgo_t only = ncclSignAlgoAuto;  // --algo: one algorithm's checks only
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max-n") && i + 1 < argc) {
      maxN = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--max-nodes") && i + 1 < argc) {
      maxNodes = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--algo") && i + 1 < argc) {
      if (!signlion::parseAlgoName(argv[++i], &only) || only == ncclSignAlgoAuto) {
        fprintf(stderr, "--algo %s: one of ring, hd, allgather, fieldsum, hier\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--no-check")) {
      check = false;
    } else if (!strcmp(argv[i], "--no-table")) {
      table = false;
    } else {
      fprintf(stderr, "usage: %s [--max-n N] [--max-nodes M] [--quick] [--algo A] [--no-check] [--no-table]\n",
              argv[0]);
      return 2;
    }
  }
  if (maxN < 1 || maxNodes < 1) {
    fprintf(stderr, "--max-n and --max-nodes must be at least 1\n");
    return 2;
  }
  if (check) printf("## Bit for bit against the reference (CPU kernels: %s)\n\n", signlion::bits::kernels().name);
  for (ncclSignAlgo_t a : kFlat)
    for (int n : kRankCounts)
      if (check && inRange(n, maxN) && (only == ncclSignAlgoAuto || only == a)) checkFlat(a, n);
  // Hierarchical: equal nodes of 8 and 4, and one layout of unequal nodes.
  for (int per : {8, 4})
    for (int nodes : {8, 16, 64, 128, 512}) {
      if (!check || nodes > maxNodes || (only != ncclSignAlgoAuto && only != ncclSignAlgoHierarchical)) continue;
      SimCase c;
      c.algo = ncclSignAlgoHierarchical;
      c.nranks = nodes * per;
      c.topo = nodesOf(std::vector<int>((size_t)nodes, per));
      const std::string label = std::to_string(nodes) + "x" + std::to_string(per);
      c.spec = {ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero};
      c.dt = ncclFloat32;
      checkCase(c, 7u * (uint32_t)c.nranks + (uint32_t)per, label.c_str());
      c.spec = {ncclSignAverage, ncclSignZeroAbstain, ncclSignTieZero};
      c.dt = ncclBfloat16;
      checkCase(c, 11u * (uint32_t)c.nranks + (uint32_t)per, label.c_str());
    }
  if (check && (only == ncclSignAlgoAuto || only == ncclSignAlgoHierarchical)) {
    std::vector<int> sizes;  // nodes of 1..8 ranks, 37 of them
    for (int i = 0; i < 37; i++) sizes.push_back(1 + (i * 5) % 8);
    SimCase c;
    c.algo = ncclSignAlgoHierarchical;
    c.topo = nodesOf(sizes);
    c.nranks = (int)c.topo.node.size();
    c.spec = {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero};
    c.dt = ncclFloat32;
    checkCase(c, 4242u, "37 unequal");
  }
  if (table) wireTable(maxN, maxNodes);
  printf("\n%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
