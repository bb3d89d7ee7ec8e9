// scale_predict: the cost model's predicted time per call (src/algo/cost_model.h,
// the host executor's overlap and segments as the communicator sets them) for
// every algorithm and for a plain ring all-reduce of fp32 and bf16, as CSV on
// stdout, with what auto picks. SIGNLION_HOST_SEGMENT and _CHUNK_BYTES apply
// as in a communicator.
//
//   scale_predict cluster   64M fp32 elements, N = 64..4096, links of 10, 25,
//                           100 and 400 Gbit/s, flat (one rank per node) and
//                           8 ranks per node
//   scale_predict star      the points measured on the emulated star
//                           (docs/ethernet.csv: N = 4 and 8, 1 and 10 Gbit/s;
//                           docs/ethernet_n16.csv: N = 12 and 16, 1 Gbit/s;
//                           1 MiB..256 MiB of fp32), with the star's settings
//                           (every rank its own node, SIGNLION_COST_BETA_MBPS
//                           of the tbf rate), to compare with the measurements
//   scale_predict crossover for N = 2..16 (every rank its own node) and links
//                           of 1, 10 and 100 Gbit/s: the smallest power-of-two
//                           count of fp32 elements from which on auto picks
//                           the direct algorithm (majority, exact ties, and
//                           with a tie rule), and what it picks just below
//   scale_predict tree      for N = 4..4096 (every rank its own node) and
//                           links of 1, 10 and 100 Gbit/s, counts of fp32
//                           elements 2^10..2^28 (by 4x): the predictions of
//                           the tree, halving-doubling, the ring and direct
//                           (up to its 16 ranks), and what auto picks: where
//                           the tree crosses over
//
// The ring all-reduce rows are the alpha-beta ring of NCCL and of signlion's
// ncclSignHostSumAllReduce: 2(N-1) steps of alpha + (bytes/N)/beta, the
// bytes crossing each node's link once per step whatever its rank count
// (a ring enters and leaves a node once), no compute term. Every other row
// is CostModel::predict. The model's parameters are the defaults
// (docs/ALGORITHMS.md, "Choosing") unless the SIGNLION_COST_* variables say
// otherwise; beta is set per row from the link rate.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algo/cost_model.h"
#include "algo/direct.h"
#include "algo/topology.h"
#include "common/config.h"
#include "common/param.h"
#include "host/host_params.h"

namespace {

using signlion::algo::CostModel;
using signlion::algo::CostParams;
using signlion::algo::Topology;

constexpr ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing,     ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                     ncclSignAlgoFieldSum, ncclSignAlgoHierarchical,    ncclSignAlgoDirect,
                                     ncclSignAlgoTree};

double ringAllReduceUs(const CostParams& p, int nranks, double bytes) {
  if (nranks < 2) return 0;
  return 2.0 * (nranks - 1) * (p.alphaUs + bytes / nranks / p.betaBytesPerUs);
}

Topology nodesOf(int nranks, int perNode) {
  Topology t;
  if (perNode <= 1) return t;  // every rank its own node: the flat model
  for (int r = 0; r < nranks; r++) t.node.push_back(r / perNode);
  return t;
}

// One row per contender: algorithm, predicted us (or "-" when it cannot run
// there), and auto's pick.
void rows(const char* tag, int nranks, int perNode, double gbit, uint64_t count, double betaMBps) {
  // As a communicator whose SIGNLION_COST_BETA_MBPS is the link's: the
  // model reads it, and the host chunk follows it (host::hostChunkBytes).
  setenv("SIGNLION_COST_BETA_MBPS", std::to_string((long long)betaMBps).c_str(), 1);
  signlion::paramResetCache();
  CostModel model;
  model.setHostExecutor(signlion::host::hostChunkBytes(), (int64_t)signlion::host::hostSegmentElements());
  const CostParams& p = model.params();
  const Topology topo = nodesOf(nranks, perNode);
  const Topology* t = topo.known() ? &topo : nullptr;
  signlion::algo::OpSpec spec;
  unsigned available = signlion::algo::kAllAlgorithms;
  if (perNode <= 1) available &= ~signlion::algo::algoBit(ncclSignAlgoHierarchical);
  if (!signlion::algo::directAllowed(nranks)) available &= ~signlion::algo::algoBit(ncclSignAlgoDirect);
  ncclSignAlgo_t chosen = ncclSignAlgoAuto;
  if (signlion::algo::chooseAlgorithm(nranks, count, spec, available, ncclSignAlgoAuto, model, &chosen, t) !=
      ncclSuccess)
    chosen = ncclSignAlgoAuto;
  for (ncclSignAlgo_t a : kAlgos) {
    if (!(available & signlion::algo::algoBit(a))) continue;
    double us = 0;
    if (model.predict(a, nranks, count, spec, &us, t) != ncclSuccess) continue;
    printf("%s,%d,%d,%g,%llu,sign-%s,%.1f,%s\n", tag, nranks, perNode, gbit, (unsigned long long)count,
           signlion::algoName(a), us, signlion::algoName(chosen));
  }
  printf("%s,%d,%d,%g,%llu,fp32-ring,%.1f,%s\n", tag, nranks, perNode, gbit, (unsigned long long)count,
         ringAllReduceUs(p, nranks, 4.0 * (double)count), signlion::algoName(chosen));
  printf("%s,%d,%d,%g,%llu,bf16-ring,%.1f,%s\n", tag, nranks, perNode, gbit, (unsigned long long)count,
         ringAllReduceUs(p, nranks, 2.0 * (double)count), signlion::algoName(chosen));
}

// The smallest power of two from which on (up to 2^30 elements) auto picks
// direct, as a communicator on a flat network of `gbit` links would.
void crossoverRow(int nranks, double gbit, const signlion::algo::OpSpec& spec, const char* rules) {
  setenv("SIGNLION_COST_BETA_MBPS", std::to_string((long long)(gbit * 125.0)).c_str(), 1);
  signlion::paramResetCache();
  CostModel model;
  model.setHostExecutor(signlion::host::hostChunkBytes(), (int64_t)signlion::host::hostSegmentElements());
  unsigned available = signlion::algo::kAllAlgorithms & ~signlion::algo::algoBit(ncclSignAlgoHierarchical);
  uint64_t from = 0;
  ncclSignAlgo_t below = ncclSignAlgoAuto;
  for (int lg = 30; lg >= 6; lg--) {
    ncclSignAlgo_t chosen = ncclSignAlgoAuto;
    if (signlion::algo::chooseAlgorithm(nranks, uint64_t{1} << lg, spec, available, ncclSignAlgoAuto, model, &chosen) !=
        ncclSuccess)
      break;
    if (chosen != ncclSignAlgoDirect) {
      below = chosen;
      break;
    }
    from = uint64_t{1} << lg;
  }
  printf("crossover,%d,%g,%s,%llu,%s\n", nranks, gbit, rules, (unsigned long long)from,
         below == ncclSignAlgoAuto ? "-" : signlion::algoName(below));
}

int treeGrid() {
  printf("grid,nranks,gbit,count,tree_us,hd_us,ring_us,direct_us,auto\n");
  signlion::algo::OpSpec spec;
  for (double gbit : {1.0, 10.0, 100.0})
    for (int n : {4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 1536, 2048, 3072, 4096}) {
      setenv("SIGNLION_COST_BETA_MBPS", std::to_string((long long)(gbit * 125.0)).c_str(), 1);
      signlion::paramResetCache();
      CostModel model;
      model.setHostExecutor(signlion::host::hostChunkBytes(), (int64_t)signlion::host::hostSegmentElements());
      unsigned available = signlion::algo::kAllAlgorithms & ~signlion::algo::algoBit(ncclSignAlgoHierarchical);
      if (!signlion::algo::directAllowed(n)) available &= ~signlion::algo::algoBit(ncclSignAlgoDirect);
      for (int lg = 10; lg <= 28; lg += 2) {
        const uint64_t count = uint64_t{1} << lg;
        auto us = [&](ncclSignAlgo_t a) {
          double t = -1;
          if ((available & signlion::algo::algoBit(a)) && model.predict(a, n, count, spec, &t) != ncclSuccess) t = -1;
          return t;
        };
        ncclSignAlgo_t chosen = ncclSignAlgoAuto;
        if (signlion::algo::chooseAlgorithm(n, count, spec, available, ncclSignAlgoAuto, model, &chosen) != ncclSuccess)
          chosen = ncclSignAlgoAuto;
        printf("tree,%d,%g,%llu,%.1f,%.1f,%.1f,%.1f,%s\n", n, gbit, (unsigned long long)count, us(ncclSignAlgoTree),
               us(ncclSignAlgoHalvingDoubling), us(ncclSignAlgoRing), us(ncclSignAlgoDirect),
               signlion::algoName(chosen));
      }
    }
  return 0;
}

int crossover() {
  printf("grid,nranks,gbit,rules,direct_from_count,auto_picks_below\n");
  signlion::algo::OpSpec ties, tieRule;
  tieRule.tieRule = ncclSignTiePositive;
  for (double gbit : {1.0, 10.0, 100.0})
    for (int n = 2; n <= signlion::algo::kMaxDirectRanks; n++) {
      crossoverRow(n, gbit, ties, "exact-ties");
      crossoverRow(n, gbit, tieRule, "tie-rule");
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what != "cluster" && what != "star" && what != "crossover" && what != "tree") {
    fprintf(stderr, "usage: %s cluster|star|crossover|tree   (CSV on stdout)\n", argv[0]);
    return 2;
  }
  if (what == "crossover") return crossover();
  if (what == "tree") return treeGrid();
  printf("grid,nranks,ranks_per_node,gbit,count,contender,predicted_us,auto_picks\n");
  if (what == "cluster") {
    for (int perNode : {1, 8})
      for (double gbit : {10.0, 25.0, 100.0, 400.0})
        for (int n = 64; n <= 4096; n *= 2) rows("cluster", n, perNode, gbit, 64ull << 20, gbit * 125.0);
  } else {
    for (int n : {4, 8, 12, 16})
      for (double gbit : {1.0, 10.0})
        for (uint64_t bytes = 1ull << 20; bytes <= 256ull << 20; bytes *= 4)
          rows("star", n, 1, gbit, bytes / 4, gbit * 125.0);
  }
  return 0;
}
