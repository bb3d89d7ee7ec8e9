// algo/: the alpha-beta cost model and the choice of algorithm.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "algo/cost_model.h"
#include "bits/trits.h"
#include "common/config.h"
#include "common/param.h"
#include "common/warn_capture.h"

namespace signlion {
namespace algo {
namespace {

using test::WarnCapture;

ncclSignAlgo_t choose(int n, uint64_t count, const CostModel& model, ncclSignAlgo_t requested = ncclSignAlgoAuto,
                      unsigned available = kAllAlgorithms) {
  ncclSignAlgo_t out = ncclSignAlgoAuto;
  EXPECT_EQ(chooseAlgorithm(n, count, OpSpec(), available, requested, model, &out), ncclSuccess);
  return out;
}

// Links and adds only: no pack or decide cost, so predictions are the
// message steps' alone.
CostParams linksOnly(double alphaUs, double betaBytesPerUs, double gammaUsPerPlane) {
  CostParams p;
  p.alphaUs = alphaUs;
  p.betaBytesPerUs = betaBytesPerUs;
  p.gammaUsPerPlane = gammaUsPerPlane;
  p.packUsPerElement = p.decideUsPerElement = 0.0;
  return p;
}

TEST(AlgoCostModel, PredictIsAlphaBetaOverMessageSteps) {
  CostModel m(linksOnly(10.0, 1000.0, 0.0));
  double us = 0;
  // Ring, N = 4, 1000 blocks per shard: reduce-scatter widths 1, 2, 2 (40000
  // bytes), then three all-gather steps of the result coded 5 elements per
  // byte (200 groups, 12800 bytes each): 78400 bytes in 6 steps.
  ASSERT_EQ(m.predict(ncclSignAlgoRing, 4, 4000 * 64, OpSpec(), &us), ncclSuccess);
  EXPECT_DOUBLE_EQ(us, 6 * 10.0 + 78400 / 1000.0);
  // One rank: nothing travels.
  ASSERT_EQ(m.predict(ncclSignAlgoHalvingDoubling, 1, 1 << 20, OpSpec(), &us), ncclSuccess);
  EXPECT_EQ(us, 0.0);
  // The compute term grows with the planes handled per element.
  CostModel g(linksOnly(0.0, 1e30, 1e-3));
  double two = 0, sixteen = 0;
  ASSERT_EQ(g.predict(ncclSignAlgoAllGather, 2, 6400, OpSpec(), &two), ncclSuccess);
  ASSERT_EQ(g.predict(ncclSignAlgoAllGather, 16, 6400, OpSpec(), &sixteen), ncclSuccess);
  EXPECT_GT(sixteen, two);
}

// The CPU work no transfer hides: every element packed (per counter) before
// the first step and decided after the last, once whatever the algorithm. The
// adds of a step run under its transfers: the step costs the longer of the two.
TEST(AlgoCostModel, PackAndDecideOncePerElementAddsUnderTheWire) {
  const uint64_t count = 6400;
  CostParams p = linksOnly(0.0, 1e30, 0.0);
  p.packUsPerElement = 1e-3;
  p.decideUsPerElement = 2e-3;
  CostModel cpu(p);
  OpSpec ternary;
  ternary.zeroRule = ncclSignZeroAbstain;  // P and M counters: two packs per element
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather}) {
    double binary = 0, abstain = 0;
    ASSERT_EQ(cpu.predict(a, 4, count, OpSpec(), &binary), ncclSuccess);
    ASSERT_EQ(cpu.predict(a, 4, count, ternary, &abstain), ncclSuccess);
    EXPECT_DOUBLE_EQ(binary, count * (1e-3 + 2e-3)) << algoName(a);
    EXPECT_DOUBLE_EQ(abstain, count * (2 * 1e-3 + 2e-3)) << algoName(a);
  }
  // Adds cheaper than the wire cost nothing more; dearer ones replace it.
  const uint64_t big = uint64_t{1} << 20;
  double wireOnly = 0, cheapAdds = 0, dearAdds = 0;
  ASSERT_EQ(CostModel(linksOnly(10.0, 1000.0, 0.0)).predict(ncclSignAlgoRing, 4, big, OpSpec(), &wireOnly),
            ncclSuccess);
  ASSERT_EQ(CostModel(linksOnly(10.0, 1000.0, 1e-6)).predict(ncclSignAlgoRing, 4, big, OpSpec(), &cheapAdds),
            ncclSuccess);
  ASSERT_EQ(CostModel(linksOnly(10.0, 1000.0, 1e-3)).predict(ncclSignAlgoRing, 4, big, OpSpec(), &dearAdds),
            ncclSuccess);
  EXPECT_DOUBLE_EQ(cheapAdds, wireOnly);
  // Ring, N = 4: what is received over six steps, all added: counters of
  // widths 1, 2, 2 over shards of 4096 blocks, and 3 coded result shards
  // (2.45 bits per element).
  const double received = 8.0 * (8 * 4096 * 5 + 3 * (double)bits::tritBytes(4096));
  EXPECT_NEAR(dearAdds, 1e-3 * received, 1e-9 * dearAdds);
}

// The host executor's overlap (CostParams::overlapChunkBytes): the first
// step's pack runs under its transfers but for the first chunk sent, each
// result range is unpacked under the step that writes it but for the last
// chunk received of the last message step (earlier ones spill into later
// steps' transfers). Ring, N = 4, shards of 1000 blocks: the first chunk sent
// is one shard, and the last all-gather step stores one shard of 2 result
// planes (N even: ties) whose unpack follows the wire.
TEST(AlgoCostModel, OverlapHidesCpuWorkButItsEdges) {
  const uint64_t count = 4000 * 64;
  const double pack = 1e-3, unpack = 2e-3, shard = 1000 * 64;
  auto params = [&](double alphaUs, double beta, int64_t chunkBytes) {
    CostParams p = linksOnly(alphaUs, beta, 0.0);
    p.packUsPerElement = pack;
    p.decideUsPerElement = unpack;
    p.overlapChunkBytes = chunkBytes;
    return p;
  };
  double wire = 0, serial = 0, overlapped = 0, small = 0;
  ASSERT_EQ(CostModel(linksOnly(10.0, 1.0, 0.0)).predict(ncclSignAlgoRing, 4, count, OpSpec(), &wire), ncclSuccess);
  ASSERT_EQ(CostModel(params(10.0, 1.0, 0)).predict(ncclSignAlgoRing, 4, count, OpSpec(), &serial), ncclSuccess);
  ASSERT_EQ(CostModel(params(10.0, 1.0, 1 << 20)).predict(ncclSignAlgoRing, 4, count, OpSpec(), &overlapped),
            ncclSuccess);
  // Without overlap every element is packed before and unpacked after.
  EXPECT_DOUBLE_EQ(serial, wire + count * (pack + unpack));
  // With it, on a slow wire that hides the rest: one shard's pack and unpack.
  EXPECT_DOUBLE_EQ(overlapped, wire + shard * pack + shard * unpack);
  // Smaller chunks expose less: 8 KiB is 1024 one-plane blocks (more than a
  // shard: the pack edge stays) and 128 coded result groups, 640 blocks (the
  // unpack edge shrinks).
  ASSERT_EQ(CostModel(params(10.0, 1.0, 8192)).predict(ncclSignAlgoRing, 4, count, OpSpec(), &small), ncclSuccess);
  EXPECT_DOUBLE_EQ(small, wire + shard * pack + (640 * 64) * unpack);

  // On a free wire nothing hides anything: every element's pack and unpack
  // show, as without overlap, whatever the algorithm; the all-gather of
  // votes decides after its last message, so all its unpacks follow the wire.
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather}) {
    for (int n : {3, 4, 8}) {
      double free = 0;
      ASSERT_EQ(CostModel(params(0.0, 1e30, 1 << 20)).predict(a, n, count, OpSpec(), &free), ncclSuccess);
      EXPECT_NEAR(free, count * (pack + unpack), 1e-6) << algoName(a) << " N=" << n;
    }
  }
  double gather = 0, gatherWire = 0;
  ASSERT_EQ(CostModel(linksOnly(10.0, 1.0, 0.0)).predict(ncclSignAlgoAllGather, 4, count, OpSpec(), &gatherWire),
            ncclSuccess);
  ASSERT_EQ(CostModel(params(10.0, 1.0, 1 << 20)).predict(ncclSignAlgoAllGather, 4, count, OpSpec(), &gather),
            ncclSuccess);
  // The first chunk sent is the whole packed vote vector (one plane, 4000 blocks).
  EXPECT_DOUBLE_EQ(gather, gatherWire + count * pack + count * unpack);
}

// A message longer than segmentElements costs its whole segments and the rest,
// each a schedule of its own (alpha paid per segment).
TEST(AlgoCostModel, SegmentsAreCostedOneByOne) {
  CostParams p = linksOnly(10.0, 1000.0, 1e-5);
  p.overlapChunkBytes = 1 << 20;
  CostModel whole(p);
  p.segmentElements = 64000;
  CostModel cut(p);
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling}) {
    double segment = 0, rest = 0, all = 0, unsegmented = 0, short_ = 0;
    ASSERT_EQ(whole.predict(a, 5, 64000, OpSpec(), &segment), ncclSuccess);
    ASSERT_EQ(whole.predict(a, 5, 6400, OpSpec(), &rest), ncclSuccess);
    ASSERT_EQ(cut.predict(a, 5, 4 * 64000 + 6400, OpSpec(), &all), ncclSuccess);
    ASSERT_EQ(whole.predict(a, 5, 4 * 64000 + 6400, OpSpec(), &unsegmented), ncclSuccess);
    ASSERT_EQ(cut.predict(a, 5, 64000, OpSpec(), &short_), ncclSuccess);
    EXPECT_DOUBLE_EQ(all, 4 * segment + rest) << algoName(a);
    EXPECT_GT(all, unsegmented) << algoName(a);  // more message steps
    EXPECT_DOUBLE_EQ(short_, segment) << algoName(a);
  }
}

// The ethernet benchmark's star (scripts/ethernet_bench.sh: each namespace a
// node, SIGNLION_COST_BETA_MBPS of the link rate), 256 MiB of fp32: auto picks
// direct (1.95 and 2.275 bits per element at N = 4 and 8 with results coded
// at 1.6 bits, against halving-doubling's 2.2 and 2.775 and the ring's 2.45
// and 3.525; its 2(N-1) steps cost little next to that many bytes). Without
// direct it picks halving-doubling (measured in docs/dev/SCALE.md, "The
// measured star: every contender"). The CPU costs, without overlap, are paid
// once per element by every algorithm: they move every prediction by the same
// amount and never the choice.
TEST(AlgoCostModel, AutoOnTheEmulatedEthernetStar) {
  const uint64_t count = uint64_t{64} << 20;
  for (double beta : {125.0, 1250.0})
    for (int n : {4, 8}) {
      Topology star;
      for (int r = 0; r < n; r++) star.node.push_back(r);
      CostParams p;
      p.betaBytesPerUs = beta;
      CostParams noCpu = p;
      noCpu.packUsPerElement = noCpu.decideUsPerElement = 0.0;
      ncclSignAlgo_t withCpu = ncclSignAlgoAuto, without = ncclSignAlgoAuto;
      ASSERT_EQ(chooseAlgorithm(n, count, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, CostModel(p), &withCpu, &star),
                ncclSuccess);
      ASSERT_EQ(
          chooseAlgorithm(n, count, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, CostModel(noCpu), &without, &star),
          ncclSuccess);
      EXPECT_EQ(withCpu, ncclSignAlgoDirect) << "N=" << n << " beta " << beta;
      EXPECT_EQ(withCpu, without) << "N=" << n << " beta " << beta;
      const unsigned noDirect = kAllAlgorithms & ~algoBit(ncclSignAlgoDirect) & ~algoBit(ncclSignAlgoTree);
      ASSERT_EQ(chooseAlgorithm(n, count, OpSpec(), noDirect, ncclSignAlgoAuto, CostModel(p), &withCpu, &star),
                ncclSuccess);
      EXPECT_EQ(withCpu, ncclSignAlgoHalvingDoubling) << "N=" << n << " beta " << beta;
      double hd = 0, ring = 0;
      ASSERT_EQ(CostModel(p).predict(ncclSignAlgoHalvingDoubling, n, count, OpSpec(), &hd, &star), ncclSuccess);
      ASSERT_EQ(CostModel(noCpu).predict(ncclSignAlgoRing, n, count, OpSpec(), &ring, &star), ncclSuccess);
      // 1 Gbit/s, N = 4: 18.5 MB on the wire (147.6 ms) plus 64M x (430 + 575) ps (67 ms).
      if (beta == 125.0 && n == 4) {
        EXPECT_NEAR(hd, 147.6e3 + 67.4e3, 2e3);
      }
      // The host executor as it runs by default (512K chunks, 32M-element
      // segments, steps overlapped chunk by chunk): the pack and unpack run
      // under the transfers but at the segments' edges, each block packed
      // under the step that first needs it. On the slow link the wire
      // decides: direct. On the fast one the CPU does (64M elements packed
      // and unpacked take longer than any algorithm's wire): direct, the
      // ring and the tree, whose first steps need a part of the votes, come
      // within 2 % of each other and one of them is picked; halving-doubling,
      // whose first step needs all of them packed, is 3 % or more above.
      CostModel host(p);
      host.setHostExecutor(512 << 10, 32 << 20);
      ncclSignAlgo_t onHost = ncclSignAlgoAuto;
      ASSERT_EQ(chooseAlgorithm(n, count, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, host, &onHost, &star),
                ncclSuccess);
      double hostHd = 0, hostRing = 0, hostDirect = 0;
      ASSERT_EQ(host.predict(ncclSignAlgoHalvingDoubling, n, count, OpSpec(), &hostHd, &star), ncclSuccess);
      ASSERT_EQ(host.predict(ncclSignAlgoRing, n, count, OpSpec(), &hostRing, &star), ncclSuccess);
      ASSERT_EQ(host.predict(ncclSignAlgoDirect, n, count, OpSpec(), &hostDirect, &star), ncclSuccess);
      if (beta == 125.0) {
        EXPECT_EQ(onHost, ncclSignAlgoDirect) << "N=" << n;
        EXPECT_LT(hostDirect, 0.97 * hostHd) << "N=" << n;
      } else {
        EXPECT_TRUE(onHost == ncclSignAlgoDirect || onHost == ncclSignAlgoRing || onHost == ncclSignAlgoTree)
            << "N=" << n << " " << onHost;
        double hostTree = 0;
        ASSERT_EQ(host.predict(ncclSignAlgoTree, n, count, OpSpec(), &hostTree, &star), ncclSuccess);
        EXPECT_NEAR(hostRing, hostDirect, 0.02 * hostDirect) << "N=" << n;
        EXPECT_NEAR(hostTree, hostDirect, 0.02 * hostDirect) << "N=" << n;
        EXPECT_GT(hostHd, 1.03 * hostDirect) << "N=" << n;
      }
      ASSERT_EQ(chooseAlgorithm(n, count, OpSpec(), noDirect, ncclSignAlgoAuto, host, &onHost, &star), ncclSuccess);
      EXPECT_EQ(onHost, beta == 125.0 ? ncclSignAlgoHalvingDoubling : ncclSignAlgoRing)
          << "N=" << n << " beta " << beta;
      if (beta == 125.0 && n == 4) {
        // Wire 147.6 ms (hd) and 164.4 ms (ring), plus two segments' edges
        // (the ring's pack runs a shard at a time under its first steps).
        EXPECT_NEAR(hostHd, 154.8e3, 1e3);
        EXPECT_NEAR(hostRing, 171.8e3, 1e3);
      }
    }
}

TEST(AlgoCostModel, DefaultChoices) {
  unsetenv("SIGNLION_COST_ALPHA_NS");
  unsetenv("SIGNLION_COST_BETA_MBPS");
  unsetenv("SIGNLION_COST_GAMMA_PS");
  paramResetCache();
  CostModel m;
  // Two ranks: one step of 1 bit per element beats everything, at any size.
  for (uint64_t count : {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 20, uint64_t{1} << 30})
    EXPECT_EQ(choose(2, count, m), ncclSignAlgoAllGather) << count;
  // Tiny messages on few ranks: the fewest message steps.
  for (int n : {3, 4, 5, 6}) EXPECT_EQ(choose(n, 64, m), ncclSignAlgoAllGather) << n;
  // Large messages: the fewest bits. Direct up to its 16 ranks; past them it
  // is left out, and halving-doubling or the ring sends the fewest.
  for (int n : {3, 4, 8, 12, 16}) EXPECT_EQ(choose(n, uint64_t{1} << 28, m), ncclSignAlgoDirect) << n;
  for (int n : {17, 32}) {
    ncclSignAlgo_t a = choose(n, uint64_t{1} << 28, m);
    EXPECT_TRUE(a == ncclSignAlgoHalvingDoubling || a == ncclSignAlgoRing) << n << " " << a;
  }
  // Without direct: powers of two: halving-doubling sends fewer bits in fewer
  // steps. Otherwise its fold sends the whole message twice more, and the
  // tree (3.6 bits per element on its busiest rank at N = 12, against the
  // ring's 4.3, in K + 9 steps) is predicted faster than the ring, but not
  // by the margin auto asks of the tree (kTreeMargin): the ring.
  const unsigned noDirect = kAllAlgorithms & ~algoBit(ncclSignAlgoDirect);
  EXPECT_EQ(choose(16, uint64_t{1} << 28, m, ncclSignAlgoAuto, noDirect), ncclSignAlgoHalvingDoubling);
  double tree12 = 0, ring12 = 0;
  ASSERT_EQ(m.predict(ncclSignAlgoTree, 12, uint64_t{1} << 28, OpSpec(), &tree12), ncclSuccess);
  ASSERT_EQ(m.predict(ncclSignAlgoRing, 12, uint64_t{1} << 28, OpSpec(), &ring12), ncclSuccess);
  EXPECT_LT(tree12, ring12);
  EXPECT_GT(tree12, kTreeMargin * ring12);
  EXPECT_EQ(choose(12, uint64_t{1} << 28, m, ncclSignAlgoAuto, noDirect), ncclSignAlgoRing);
  // The margin weighs the tree against the others only: alone, it is taken.
  EXPECT_EQ(choose(12, uint64_t{1} << 28, m, ncclSignAlgoAuto, algoBit(ncclSignAlgoTree)), ncclSignAlgoTree)
      << "the tree alone is taken whatever its time";
  EXPECT_EQ(choose(32, uint64_t{1} << 28, m), ncclSignAlgoHalvingDoubling);
  // Many ranks, tiny message: latency rules, halving-doubling has log N steps.
  EXPECT_EQ(choose(64, 64, m), ncclSignAlgoHalvingDoubling);
  // Only what is available is chosen.
  EXPECT_EQ(choose(2, 1000, m, ncclSignAlgoAuto, algoBit(ncclSignAlgoFieldSum)), ncclSignAlgoFieldSum);
  EXPECT_EQ(choose(16, uint64_t{1} << 28, m, ncclSignAlgoAuto, noDirect & ~algoBit(ncclSignAlgoHalvingDoubling)),
            ncclSignAlgoRing);
}

TEST(AlgoCostModel, ForcedAlgorithmIsRespected) {
  CostModel m;
  for (ncclSignAlgo_t a :
       {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoFieldSum, ncclSignAlgoDirect,
        ncclSignAlgoTree})
    for (int n : {1, 2, 7, 16}) EXPECT_EQ(choose(n, 12345, m, a), a);
  WarnCapture w;
  ncclSignAlgo_t out;
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), algoBit(ncclSignAlgoRing), ncclSignAlgoFieldSum, m, &out),
            ncclInvalidArgument);
  EXPECT_EQ(w.count(), 1);
  // The WARN names what the communicator can run, not a bit mask.
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), kAllAlgorithms & ~algoBit(ncclSignAlgoHierarchical),
                            ncclSignAlgoHierarchical, m, &out),
            ncclInvalidArgument);
  EXPECT_EQ(w.countContaining("hier is forced"), 1);
  EXPECT_EQ(w.countContaining("it can run: ring, hd, allgather, fieldsum, direct, tree;"), 1) << w.lines().back();
  EXPECT_EQ(w.countContaining("mask"), 0);
}

TEST(AlgoCostModel, BadInputsAreInvalidArguments) {
  CostModel m;
  ncclSignAlgo_t out;
  WarnCapture w;
  EXPECT_EQ(chooseAlgorithm(0, 100, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, &out), ncclInvalidArgument);
  EXPECT_EQ(chooseAlgorithm(-3, 100, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, &out), ncclInvalidArgument);
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), kAllAlgorithms, ncclSignNumAlgos, m, &out), ncclInvalidArgument);
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), kAllAlgorithms, static_cast<ncclSignAlgo_t>(ncclSignNumAlgos + 1), m, &out),
            ncclInvalidArgument);
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), 0, ncclSignAlgoAuto, m, &out), ncclInvalidArgument);
  EXPECT_EQ(chooseAlgorithm(4, 100, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, nullptr), ncclInvalidArgument);
  OpSpec bad;
  bad.op = ncclSignNumOps;
  EXPECT_EQ(chooseAlgorithm(4, 100, bad, kAllAlgorithms, ncclSignAlgoAuto, m, &out), ncclInvalidArgument);
  double us;
  EXPECT_EQ(m.predict(ncclSignAlgoAuto, 4, 100, OpSpec(), &us), ncclInvalidArgument);
  EXPECT_EQ(m.predict(ncclSignAlgoRing, 0, 100, OpSpec(), &us), ncclInvalidArgument);
  EXPECT_EQ(w.count(), 9);
}

// A setting that rules an algorithm out (fields too narrow for N) takes it
// out of Auto's candidates with one WARN per distinct value and N, however
// many sizes are chosen for; forced, the algorithm still fails to build.
TEST(AlgoCostModel, AutoLeavesOutWhatTheSettingsRuleOut) {
  // Bandwidth alone decides: between these two, 9 votes in 4-bit fields
  // (about 7.1 bits per element) beat the all-gather of votes (8).
  CostModel m(linksOnly(0.0, 1.0, 0.0));
  const unsigned pair = algoBit(ncclSignAlgoAllGather) | algoBit(ncclSignAlgoFieldSum);
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
  ASSERT_EQ(choose(9, 1 << 20, m, ncclSignAlgoAuto, pair), ncclSignAlgoFieldSum);

  setenv("SIGNLION_FIELD_BITS", "3", 1);  // 9 votes need 4 bits
  paramResetCache();
  WarnCapture w;
  for (uint64_t count : {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 20}) {
    EXPECT_EQ(choose(9, count, m, ncclSignAlgoAuto, pair), ncclSignAlgoAllGather) << count;
    EXPECT_NE(choose(9, count, m), ncclSignAlgoFieldSum) << count;
  }
  ASSERT_EQ(w.count(), 1);
  EXPECT_NE(w.lines()[0].find("SIGNLION_FIELD_BITS=3"), std::string::npos) << w.lines()[0];
  EXPECT_NE(w.lines()[0].find("fieldsum"), std::string::npos) << w.lines()[0];
  // Another N, or another value, is said once more.
  EXPECT_NE(choose(12, 1000, m), ncclSignAlgoFieldSum);
  EXPECT_NE(choose(12, 1 << 20, m), ncclSignAlgoFieldSum);
  EXPECT_EQ(w.count(), 2);
  setenv("SIGNLION_FIELD_BITS", "2", 1);
  paramResetCache();
  EXPECT_EQ(choose(9, 1 << 20, m, ncclSignAlgoAuto, pair), ncclSignAlgoAllGather);
  EXPECT_EQ(w.count(), 3);
  // Votes that fit the fields: field-sum is a candidate again.
  EXPECT_EQ(choose(3, 1000, m, ncclSignAlgoAuto, algoBit(ncclSignAlgoFieldSum)), ncclSignAlgoFieldSum);
  EXPECT_EQ(w.count(), 3);

  // Nothing left to choose from: an invalid argument, with a WARN (leaving
  // field-sum out was said already).
  ncclSignAlgo_t out;
  EXPECT_EQ(chooseAlgorithm(9, 1000, OpSpec(), algoBit(ncclSignAlgoFieldSum), ncclSignAlgoAuto, m, &out),
            ncclInvalidArgument);
  ASSERT_EQ(w.count(), 4);
  EXPECT_NE(w.lines().back().find("'available'"), std::string::npos) << w.lines().back();
  // Forced: chosen as asked, then refused by buildSchedule on every call,
  // each time with a WARN naming the variable.
  EXPECT_EQ(choose(9, 1000, m, ncclSignAlgoFieldSum), ncclSignAlgoFieldSum);
  Schedule s;
  for (int call = 0; call < 2; call++) {
    EXPECT_EQ(buildSchedule(ncclSignAlgoFieldSum, 9, 0, 16, OpSpec(), &s), ncclInvalidArgument);
    ASSERT_EQ(w.count(), 5 + call);
    EXPECT_NE(w.lines().back().find("'SIGNLION_FIELD_BITS'"), std::string::npos) << w.lines().back();
  }
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
  EXPECT_EQ(buildSchedule(ncclSignAlgoFieldSum, 9, 0, 16, OpSpec(), &s), ncclSuccess);
  EXPECT_EQ(s.fieldBits, 4);
}

TEST(AlgoCostModel, ParamsAndMeasuredValuesOverrideDefaults) {
  setenv("SIGNLION_COST_ALPHA_NS", "5000", 1);
  setenv("SIGNLION_COST_BETA_MBPS", "12500", 1);
  setenv("SIGNLION_COST_GAMMA_PS", "1", 1);
  setenv("SIGNLION_COST_PACK_PS", "200", 1);
  setenv("SIGNLION_COST_DECIDE_PS", "300", 1);
  paramResetCache();
  CostModel env;
  EXPECT_DOUBLE_EQ(env.params().packUsPerElement, 200e-6);
  EXPECT_DOUBLE_EQ(env.params().decideUsPerElement, 300e-6);
  EXPECT_DOUBLE_EQ(env.params().alphaUs, 5.0);
  EXPECT_DOUBLE_EQ(env.params().betaBytesPerUs, 12500.0);
  EXPECT_DOUBLE_EQ(env.params().gammaUsPerPlane, 1e-6);
  {
    WarnCapture w;
    setenv("SIGNLION_COST_BETA_MBPS", "0", 1);
    paramResetCache();
    EXPECT_DOUBLE_EQ(CostModel().params().betaBytesPerUs, CostParams().betaBytesPerUs);
    EXPECT_EQ(w.count(), 1);
  }
  unsetenv("SIGNLION_COST_ALPHA_NS");
  unsetenv("SIGNLION_COST_BETA_MBPS");
  unsetenv("SIGNLION_COST_GAMMA_PS");
  {
    WarnCapture w;
    setenv("SIGNLION_COST_PACK_PS", "-1", 1);
    paramResetCache();
    EXPECT_DOUBLE_EQ(CostModel().params().packUsPerElement, CostParams().packUsPerElement);
    EXPECT_EQ(w.count(), 1);
  }
  unsetenv("SIGNLION_COST_PACK_PS");
  unsetenv("SIGNLION_COST_DECIDE_PS");
  paramResetCache();

  CostModel m;
  // A slow network with a huge latency: the fewest steps win even for 16 ranks
  // and a mid-size message.
  ASSERT_EQ(m.setMeasured(1e6, 1e6), ncclSuccess);
  EXPECT_DOUBLE_EQ(m.params().alphaUs, 1e6);
  EXPECT_EQ(choose(16, 1 << 16, m), ncclSignAlgoHalvingDoubling);
  // No latency at all: bits alone decide, and 4 ranks prefer direct (2.25
  // bits per element) to halving-doubling (2.5) and the all-gather of votes (3).
  ASSERT_EQ(m.setMeasured(0.0, 1.0), ncclSuccess);
  EXPECT_EQ(choose(4, 1 << 20, m), ncclSignAlgoDirect);
  EXPECT_EQ(choose(4, 1 << 20, m, ncclSignAlgoAuto, kAllAlgorithms & ~algoBit(ncclSignAlgoDirect)),
            ncclSignAlgoHalvingDoubling);
  WarnCapture w;
  EXPECT_EQ(m.setMeasured(-1.0, 100.0), ncclInvalidArgument);
  EXPECT_EQ(m.setMeasured(1.0, 0.0), ncclInvalidArgument);
  EXPECT_EQ(w.count(), 2);
  EXPECT_DOUBLE_EQ(m.params().alphaUs, 0.0);  // unchanged by the failed calls
}

// The NCCL executor runs allgather and field-sum as one library collective:
// one alpha for the call, a small cost per ring step inside it; the other
// algorithms still pay alpha per step.
TEST(AlgoCostModel, OneLibraryCollectivePaysAlphaOnce) {
  CostParams p = linksOnly(10.0, 1e30, 0.0);
  CostModel steps(p);
  p.collectiveStepUs = 1.0;
  CostModel collective(p);
  double a = 0, b = 0;
  ASSERT_EQ(steps.predict(ncclSignAlgoAllGather, 8, 6400, OpSpec(), &a), ncclSuccess);
  ASSERT_EQ(collective.predict(ncclSignAlgoAllGather, 8, 6400, OpSpec(), &b), ncclSuccess);
  EXPECT_DOUBLE_EQ(a, 7 * 10.0);
  EXPECT_DOUBLE_EQ(b, 10.0 + 7 * 1.0);
  ASSERT_EQ(collective.predict(ncclSignAlgoFieldSum, 8, 6400, OpSpec(), &b), ncclSuccess);
  EXPECT_DOUBLE_EQ(b, 10.0 + 14 * 1.0);
  ASSERT_EQ(steps.predict(ncclSignAlgoRing, 8, 6400, OpSpec(), &a), ncclSuccess);
  ASSERT_EQ(collective.predict(ncclSignAlgoRing, 8, 6400, OpSpec(), &b), ncclSuccess);
  EXPECT_DOUBLE_EQ(a, b);
  // Nothing travels for one rank: not even the collective's alpha.
  ASSERT_EQ(collective.predict(ncclSignAlgoAllGather, 1, 6400, OpSpec(), &b), ncclSuccess);
  EXPECT_EQ(b, 0.0);
}

TEST(AlgoCostModel, ParamsFromAnotherPrefixKeepTheirDefaults) {
  CostParams d{5.0, 100000.0, 1e-6};
  CostParams p = costParamsFrom("NCCL_COST", 7000, 200000, 3, d);
  EXPECT_DOUBLE_EQ(p.alphaUs, 7.0);
  EXPECT_DOUBLE_EQ(p.betaBytesPerUs, 200000.0);
  EXPECT_DOUBLE_EQ(p.gammaUsPerPlane, 3e-6);
  WarnCapture w;
  p = costParamsFrom("NCCL_COST", 0, -1, 0, d);
  EXPECT_EQ(w.count(), 3);
  EXPECT_DOUBLE_EQ(p.alphaUs, d.alphaUs);
  EXPECT_DOUBLE_EQ(p.betaBytesPerUs, d.betaBytesPerUs);
  EXPECT_DOUBLE_EQ(p.gammaUsPerPlane, d.gammaUsPerPlane);
}

// Direct against halving-doubling on a flat network (every rank its own
// node, 1 Gbit/s links): direct sends fewer bits (2.25 / 2.625 / 2.8125 per
// element at N = 4 / 8 / 16 against 2.5 / 3.125 / 3.5) in 2(N-1) steps
// against 2 log2 N. Small messages go to the fewer steps, large ones to the
// fewer bits, and the crossover moves to larger messages as N grows (the
// extra steps grow faster than the bits saved); past 16 ranks direct is never
// picked, however large the message. With links only (no CPU terms) the
// crossover is where the extra steps' alpha equals the bits saved:
// 2(N-1) - 2 log2 N steps of 20 us against (hd - direct) bits / 8 per element
// at 125 B/us.
TEST(AlgoCostModel, DirectWinsLargeMessagesUpToItsRankLimit) {
  CostParams p = linksOnly(20.0, 125.0, 0.0);
  CostModel m(p);
  Topology none;
  auto crossover = [&](int n) {  // the smallest power of two from which on direct is picked
    uint64_t from = 0;
    for (int lg = 34; lg >= 6; lg--) {
      if (choose(n, uint64_t{1} << lg, m) != ncclSignAlgoDirect) break;
      from = uint64_t{1} << lg;
    }
    return from;
  };
  const struct {
    int n;
    double hdBits, directBits;
    int extraSteps;
  } rows[] = {{4, 2.5, 2.25, 2}, {8, 3.125, 2.625, 8}, {16, 3.5, 2.8125, 22}};
  uint64_t last = 0;
  for (const auto& row : rows) {
    const uint64_t from = crossover(row.n);
    const double model = row.extraSteps * p.alphaUs / ((row.hdBits - row.directBits) / 8 / p.betaBytesPerUs);
    EXPECT_GT(from, model / 2) << "N=" << row.n;
    EXPECT_LE(from, 2 * model) << "N=" << row.n;
    EXPECT_EQ(choose(row.n, from / 4, m), ncclSignAlgoHalvingDoubling) << "N=" << row.n;
    EXPECT_GT(from, last) << "N=" << row.n;
    last = from;
  }
  for (int n : {17, 24, 32, 64}) EXPECT_NE(choose(n, uint64_t{1} << 34, m), ncclSignAlgoDirect) << n;
  // Forced past the limit, the model still returns it (the communicator
  // refuses it: it has no links for it).
  EXPECT_EQ(choose(32, 1000, m, ncclSignAlgoDirect), ncclSignAlgoDirect);
}

// Two link classes: on 2 nodes of 4 ranks joined by 1 Gbit/s links, the
// flat algorithms push every rank's votes through the node's one link and
// the hierarchy wins large messages; with an unknown topology (or one rank
// per node) auto never picks it (it would be halving-doubling).
TEST(AlgoCostModel, HierarchyWinsAcrossSlowNodeLinks) {
  CostParams p;
  p.alphaUs = 50.0;
  p.betaBytesPerUs = 125.0;  // 1 Gbit/s between nodes
  p.gammaUsPerPlane = 0.0;
  CostModel m(p);
  Topology two;
  two.node = {0, 0, 0, 0, 1, 1, 1, 1};
  ncclSignAlgo_t out = ncclSignAlgoAuto;
  ASSERT_EQ(chooseAlgorithm(8, uint64_t{1} << 26, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, &out, &two),
            ncclSuccess);
  EXPECT_EQ(out, ncclSignAlgoHierarchical);
  double hier = 0, ring = 0, hd = 0;
  ASSERT_EQ(m.predict(ncclSignAlgoHierarchical, 8, uint64_t{1} << 26, OpSpec(), &hier, &two), ncclSuccess);
  ASSERT_EQ(m.predict(ncclSignAlgoRing, 8, uint64_t{1} << 26, OpSpec(), &ring, &two), ncclSuccess);
  ASSERT_EQ(m.predict(ncclSignAlgoHalvingDoubling, 8, uint64_t{1} << 26, OpSpec(), &hd, &two), ncclSuccess);
  EXPECT_LT(hier, ring);
  EXPECT_LT(ring, hd);  // halving-doubling's first step sends 4 half-messages through one link
  ASSERT_EQ(chooseAlgorithm(8, uint64_t{1} << 26, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, &out), ncclSuccess);
  EXPECT_NE(out, ncclSignAlgoHierarchical);
  Topology singles;
  for (int r = 0; r < 8; r++) singles.node.push_back(r);
  ASSERT_EQ(chooseAlgorithm(8, uint64_t{1} << 26, OpSpec(), kAllAlgorithms, ncclSignAlgoAuto, m, &out, &singles),
            ncclSuccess);
  EXPECT_NE(out, ncclSignAlgoHierarchical);
  // Forced, it is used whatever the model says.
  ASSERT_EQ(chooseAlgorithm(8, 64, OpSpec(), kAllAlgorithms, ncclSignAlgoHierarchical, m, &out), ncclSuccess);
  EXPECT_EQ(out, ncclSignAlgoHierarchical);
}

}  // namespace
}  // namespace algo
}  // namespace signlion
