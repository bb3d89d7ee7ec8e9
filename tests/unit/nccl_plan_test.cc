// nccl/: the NCCL executor's plan and the executor itself, on the CPU.
//
// The plan (chunks, groups, stage, fusion, scratch layout) is checked on its
// own over N = 1..16, every algorithm, counts 0, 1, 63, 64, 65 and large.
// Then the very executor that drives the GPU runs here over a CPU backend:
// the vote kernels of src/bits, NCCL's point-to-point groups and collectives
// played by threads (common/fake_fabric.h), and side-lane kernels optionally held back until the
// join (the latest a stream could run them), so a missing dependency between
// a chunk's action and the next chunk's transfer changes the result. Every
// rank's output must equal the plain reference bit for bit. Last, a comm
// context's choice of algorithm under a setting that rules one out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algo/schedule.h"
#include "algo/tree.h"
#include "bits/bits.h"
#include "bits/fields.h"
#include "bits/trits.h"
#include "common/config.h"
#include "common/fake_fabric.h"
#include "common/nccl_small_pieces.h"
#include "common/node_layouts.h"
#include "common/param.h"
#include "common/vote_inputs.h"
#include "common/warn_capture.h"
#include "nccl/backend.h"
#include "nccl/call_agreement.h"
#include "nccl/comm_context.h"
#include "nccl/nccl_executor.h"
#include "nccl/nccl_plan.h"
#include "nccl/node_groups.h"

namespace signlion {
namespace nccl {
namespace {

using algo::Buffer;
using algo::Range;
using algo::Schedule;

constexpr ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                     ncclSignAlgoFieldSum, ncclSignAlgoDirect, ncclSignAlgoTree};

struct Spec {
  ncclSignOp_t op;
  ncclSignZeroRule_t zero;
  ncclSignTieRule_t tie;
};
constexpr Spec kSpecs[] = {
    {ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero},
    {ncclSignMajority, ncclSignZeroNegative, ncclSignTiePositive},
    {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero},
    {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieNegative},
    {ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero},
    {ncclSignAverage, ncclSignZeroAbstain, ncclSignTieZero},
};

std::string name(ncclSignAlgo_t algo, int n, int64_t nblocks, const Spec& sp, int64_t chunk) {
  return std::string(algoName(algo)) + " N=" + std::to_string(n) + " nblocks=" + std::to_string(nblocks) +
         " op=" + std::to_string(sp.op) + " zero=" + std::to_string(sp.zero) + " tie=" + std::to_string(sp.tie) +
         " chunk=" + std::to_string(chunk);
}

struct RankPlan {
  Schedule s;
  Plan p;
};

std::vector<RankPlan> planAll(ncclSignAlgo_t algo, int n, int64_t nblocks, const Spec& sp, int64_t chunkBytes,
                              const algo::Topology* topo = nullptr) {
  std::vector<RankPlan> all(n);
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(algo::buildSchedule(algo, n, r, nblocks, algo::OpSpec{sp.op, sp.zero, sp.tie}, &all[r].s, topo),
              ncclSuccess);
    EXPECT_EQ(makePlan(all[r].s, chunkBytes, &all[r].p), ncclSuccess);
  }
  return all;
}

bool overlaps(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

// Regions in order, aligned, disjoint, each as large as the schedule needs.
void checkLayout(const RankPlan& rp) {
  const Schedule& s = rp.s;
  const ScratchLayout& L = rp.p.layout;
  struct Region {
    const char* name;
    int64_t at, need;
  };
  const int64_t fieldPlanes = s.algo == ncclSignAlgoFieldSum && s.spec.op == ncclSignMajority
                                  ? s.counters * algo::counterWidth(s.nranks) * s.nblocks
                                  : 0;
  const Region regions[] = {{"counter", L.counter, s.counterBytes() / 8}, {"result", L.result, s.resultBytes() / 8},
                            {"votes", L.votes, s.votesBytes() / 8},       {"fields", L.fields, s.fieldsBytes() / 8},
                            {"fieldPlanes", L.fieldPlanes, fieldPlanes},  {"stage", L.stage, rp.p.stageWords}};
  int64_t end = 0;
  for (const Region& r : regions) {
    EXPECT_EQ(r.at % kScratchAlignWords, 0) << r.name;
    EXPECT_GE(r.at, end) << r.name << " overlaps the region before it";
    end = r.at + r.need;
  }
  EXPECT_GE(L.words, end);
  EXPECT_EQ(L.bytes(), 8 * L.words);
}

// Chunks cover every transfer exactly, in order, within the chunk size; stage
// space only for adding receives, disjoint within a step and inside the region.
void checkChunks(const RankPlan& rp, int64_t chunkBytes) {
  for (const StepPlan& sp : rp.p.steps) {
    const algo::Step& st = rp.s.steps[sp.step];
    if (sp.exchange != Exchange::kSteps) {
      EXPECT_TRUE(sp.groups.empty());
      continue;
    }
    std::vector<int64_t> sendAt, recvAt;
    for (const auto& x : st.sends) sendAt.push_back(x.range.begin);
    for (const auto& x : st.recvs) recvAt.push_back(x.range.begin);
    std::vector<Range> stage;
    for (const ChunkGroup& g : sp.groups) {
      EXPECT_FALSE(g.sends.empty() && g.recvs.empty()) << "empty group, step " << sp.step;
      bool actions = false;
      for (int dir = 0; dir < 2; dir++) {
        for (const Chunk& c : dir ? g.recvs : g.sends) {
          const algo::Transfer& x = dir ? static_cast<const algo::Transfer&>(st.recvs[c.index])
                                        : static_cast<const algo::Transfer&>(st.sends[c.index]);
          int64_t& at = (dir ? recvAt : sendAt)[c.index];
          EXPECT_EQ(c.begin, at) << "chunks out of order, step " << sp.step;
          EXPECT_GT(c.len, 0);
          // A coded result's chunks are whole 5-block groups (64 bytes each).
          EXPECT_LE(x.wireBytes(c.len), std::max<int64_t>(chunkBytes, x.coding == algo::Coding::kTrits ? 64 : 8 * x.planes));
          at = c.begin + c.len;
          const bool adds = dir && st.recvs[c.index].op == algo::RecvOp::kAdd;
          const bool coded = x.coding == algo::Coding::kTrits;
          EXPECT_EQ(c.stage >= 0, adds || coded);
          if (adds || coded) {
            actions = actions || dir;
            Range r{c.stage, c.stage + x.wireBytes(c.len) / 8};
            EXPECT_LE(r.end, rp.p.stageWords);
            for (const Range& o : stage) EXPECT_FALSE(overlaps(r, o)) << "stage reused within step " << sp.step;
            stage.push_back(r);
          }
        }
      }
      EXPECT_EQ(g.hasActions, actions);
    }
    for (size_t t = 0; t < st.sends.size(); t++) EXPECT_EQ(sendAt[t], st.sends[t].range.end) << "send " << t;
    for (size_t t = 0; t < st.recvs.size(); t++) EXPECT_EQ(recvAt[t], st.recvs[t].range.end) << "recv " << t;
  }
}

// What rank r posts to (or expects from) one peer in group k of a step, as
// the (begin, len, planes) of each chunk in order.
using Posted = std::vector<std::tuple<int64_t, int64_t, int>>;

Posted posted(const RankPlan& rp, size_t step, size_t k, bool recv, int peer) {
  Posted out;
  const StepPlan& sp = rp.p.steps[step];
  if (k >= sp.groups.size()) return out;
  const algo::Step& st = rp.s.steps[sp.step];
  for (const Chunk& c : recv ? sp.groups[k].recvs : sp.groups[k].sends) {
    const algo::Transfer& x = recv ? static_cast<const algo::Transfer&>(st.recvs[c.index])
                                   : static_cast<const algo::Transfer&>(st.sends[c.index]);
    if (x.peer == peer) out.emplace_back(c.begin, c.len, x.planes);
  }
  return out;
}

// Every rank has the same steps and exchanges, and in every group every send
// has its receive on the peer: same chunks, same planes, same order.
void checkMatching(const std::vector<RankPlan>& all) {
  const int n = static_cast<int>(all.size());
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(all[r].p.steps.size(), all[0].p.steps.size());
    for (size_t i = 0; i < all[r].p.steps.size(); i++) {
      EXPECT_EQ(all[r].p.steps[i].step, all[0].p.steps[i].step);
      EXPECT_EQ(all[r].p.steps[i].exchange, all[0].p.steps[i].exchange);
    }
  }
  for (size_t i = 0; i < all[0].p.steps.size(); i++) {
    size_t groups = 0;
    for (int r = 0; r < n; r++) groups = std::max(groups, all[r].p.steps[i].groups.size());
    for (size_t k = 0; k < groups; k++)
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
          EXPECT_EQ(posted(all[a], i, k, false, b), posted(all[b], i, k, true, a))
              << "step " << i << " group " << k << ": rank " << a << " -> rank " << b;
  }
}

// The fused receive and the final unpack write every output block once; the
// fused one runs after every pack (in place) and while no send of its step
// reads the result planes it writes.
void checkOutputWrites(const RankPlan& rp) {
  const Plan& p = rp.p;
  const Schedule& s = rp.s;
  std::vector<int> written(static_cast<size_t>(s.nblocks), 0);
  auto mark = [&](const Range& r) {
    for (int64_t b = r.begin; b < r.end; b++) written[b]++;
  };
  mark(p.fused);
  for (const Range& r : p.unpack) mark(r);
  for (int64_t b = 0; b < s.nblocks; b++) EXPECT_EQ(written[b], 1) << "block " << b;
  int fusedStep = -1;
  for (const StepPlan& sp : p.steps)
    if (sp.fusedRecv >= 0) {
      EXPECT_EQ(fusedStep, -1) << "two fused receives";
      fusedStep = sp.step;
      const algo::Recv& r = s.steps[sp.step].recvs[sp.fusedRecv];
      EXPECT_EQ(r.op, algo::RecvOp::kAdd);
      EXPECT_EQ(r.range, p.fused);
      for (const algo::Send& x : s.steps[sp.step].sends)
        EXPECT_FALSE(x.buf == Buffer::kResult && overlaps(x.range, p.fused));
    }
  EXPECT_EQ(fusedStep >= 0, !p.fused.empty());
  if (fusedStep < 0) return;
  for (size_t i = 0; i < s.steps.size(); i++) {
    for (const algo::Local& l : s.steps[i].locals) {
      if (l.op == algo::LocalOp::kPackVotes || l.op == algo::LocalOp::kPackFields) {
        EXPECT_LE((int)i, fusedStep) << "a pack after the first result is written";
      }
    }
  }
}

TEST(NcclPlan, ChunksGroupsStageAndLayoutOverTheMatrix) {
  for (ncclSignAlgo_t algo : kAlgos)
    for (int n = 1; n <= 16; n++)
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000003}})
        for (const Spec& sp : kSpecs)
          for (int64_t chunk : {int64_t{64}, int64_t{4096}, int64_t{4} << 20}) {
            const int64_t nblocks = algo::blocksForCount((uint64_t)count);
            if (chunk == 64 && nblocks > 2000) continue;  // a million tiny chunks tell nothing more
            SCOPED_TRACE(name(algo, n, nblocks, sp, chunk));
            std::vector<RankPlan> all = planAll(algo, n, nblocks, sp, chunk);
            checkMatching(all);
            for (const RankPlan& rp : all) {
              checkLayout(rp);
              checkChunks(rp, chunk);
              checkOutputWrites(rp);
            }
            if (HasFailure()) return;
          }
}

// Ring, halving-doubling and direct fuse the last add with the decide on
// every rank that decides (the tree at most on a root); allgather and field-sum run one collective and
// fuse nothing.
TEST(NcclPlan, FusionAndExchanges) {
  const Spec sp = kSpecs[0];
  for (int n : {2, 3, 4, 5, 8}) {
    for (ncclSignAlgo_t algo : kAlgos) {
      SCOPED_TRACE(name(algo, n, 1000, sp, 4096));
      std::vector<RankPlan> all = planAll(algo, n, 1000, sp, 4096);
      int p2 = 1;
      while (p2 * 2 <= n) p2 *= 2;
      for (int r = 0; r < n; r++) {
        const Plan& p = all[r].p;
        if (algo == ncclSignAlgoAllGather || algo == ncclSignAlgoFieldSum) {
          ASSERT_EQ(p.steps.size(), 2u);
          EXPECT_EQ(p.steps[0].exchange, algo == ncclSignAlgoAllGather ? Exchange::kAllGather : Exchange::kAllReduce);
          EXPECT_TRUE(p.fused.empty());
        } else if (algo == ncclSignAlgoTree) {
          // Only a root decides; whether its last add can fuse depends on
          // what else arrives in that step.
          const bool root = algo::treeNode(n, 0, r).parent < 0 || algo::treeNode(n, 1, r).parent < 0;
          if (!root) EXPECT_TRUE(p.fused.empty()) << "rank " << r;
        } else {
          const bool decides = algo == ncclSignAlgoRing || algo == ncclSignAlgoDirect || r < p2;
          EXPECT_EQ(!p.fused.empty(), decides) << "rank " << r;
          EXPECT_EQ(p.fusedStoresPlanes, decides);  // every decided shard is sent on
        }
      }
    }
  }
  // One rank: nothing to exchange.
  std::vector<RankPlan> one = planAll(ncclSignAlgoAllGather, 1, 10, sp, 4096);
  EXPECT_EQ(one[0].p.steps[0].exchange, Exchange::kSteps);
}

// The sizes the GPU test MatrixOnThreeRanksInSmallChunksAndSegments runs
// with (common/nccl_small_pieces.h) do what it is there for: its calls of more
// than a segment run as several, and every segment of at least 65 blocks has,
// on every rank, a step of several chunks, for each algorithm that exchanges
// by steps and every op and rule pair. (Allgather and field-sum exchange by
// one collective, in no chunks; a segment of one block is one chunk.)
TEST(NcclPlan, SmallPiecesCutStepsIntoChunksAndCallsIntoSegments) {
  const int n = test::kSmallPiecesRanks;
  const uint64_t segment = (uint64_t)test::kSmallSegment;
  ASSERT_EQ(segment % 64, 0u);
  int severalSegments = 0;
  for (size_t count : test::kSmallPiecesCounts) {
    severalSegments += count > segment;
    for (uint64_t part : {std::min<uint64_t>(count, segment), count > segment ? count % segment : 0}) {
      const int64_t nblocks = algo::blocksForCount(part);
      if (nblocks < 65) continue;
      for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoDirect, ncclSignAlgoTree})
        for (const Spec& sp : kSpecs) {
          SCOPED_TRACE(name(algo, n, nblocks, sp, test::kSmallChunkBytes));
          std::vector<RankPlan> all = planAll(algo, n, nblocks, sp, test::kSmallChunkBytes);
          for (int r = 0; r < n; r++) {
            size_t most = 0;
            for (const StepPlan& st : all[r].p.steps) most = std::max(most, st.groups.size());
            EXPECT_GE(most, 2u) << "rank " << r << ": no step of several chunks";
          }
        }
    }
  }
  EXPECT_EQ(severalSegments, 2);
}

// A schedule this executor cannot run is refused, not mis-run.
TEST(NcclPlan, RefusesFieldWordsSummedByMessages) {
  Schedule s;
  ASSERT_EQ(algo::buildSchedule(ncclSignAlgoFieldSum, 4, 0, 100, algo::OpSpec(), &s), ncclSuccess);
  s.algo = ncclSignAlgoRing;  // as if its ring steps were to run as messages
  Plan p;
  EXPECT_EQ(makePlan(s, 4096, &p), ncclInternalError);
}

// ---- the executor on a CPU backend ----------------------------------------------

class CpuBackend final : public Backend {
 public:
  CpuBackend(test::FakeFabric& fabric, int rank, bool holdSide) : f_(fabric), rank_(rank), hold_(holdSide) {}
  ~CpuBackend() override {
    EXPECT_FALSE(diverted_) << "the executor left the side lane diverted";
    EXPECT_FALSE(inGroup_);
  }

  ncclResult_t pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
                    size_t stride) override {
    return run([=] { k_.pack(src, dt, count, rule, out, stride); });
  }
  ncclResult_t add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
                   size_t so, size_t nwords) override {
    return run([=] { k_.add(a, wa, sa, b, wb, sb, out, wout, so, nwords); });
  }
  ncclResult_t sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout, size_t so,
                        size_t nwords) override {
    EXPECT_EQ(wout, bits::widthFor((uint64_t)nslots));
    return run([=] {
      for (int r = 0; r < nslots; r++)  // vote r makes the count at most r + 1
        k_.add(out, r == 0 ? 0 : bits::widthFor((uint64_t)r), so, votes + r * slotStride, 1, slotStride, out,
               bits::widthFor((uint64_t)r + 1), so, nwords);
    });
  }
  ncclResult_t decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so,
                          size_t nwords) override {
    return run([=] { k_.decideBits(c, nranks, tie, out, so, nwords); });
  }
  ncclResult_t unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt,
                      void* dst) override {
    return run([=] { k_.unpack(planes, nplanes, stride, count, dt, dst); });
  }
  ncclResult_t average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) override {
    return run([=] { k_.average(c, nranks, count, dt, dst); });
  }
  // The fused kernel's contract, composed of the CPU kernels.
  ncclResult_t addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                               ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* planesOut,
                               size_t so, size_t count, ncclDataType_t dt, void* dst) override {
    return run([=] {
      const size_t nw = bits::numWords(count);
      const int counters = acc.neg ? 2 : 1;
      EXPECT_EQ(counters, bits::votePlanes(zero));
      std::vector<uint64_t> sum((size_t)counters * sumWidth * nw);
      k_.add(acc.pos, acc.posWidth, acc.posStride, in.pos, in.posWidth, in.posStride, sum.data(), sumWidth, nw, nw);
      bits::Counts c{sum.data(), sumWidth, nw};
      if (counters == 2) {
        k_.add(acc.neg, acc.negWidth, acc.negStride, in.neg, in.negWidth, in.negStride, sum.data() + sumWidth * nw,
               sumWidth, nw, nw);
        c.neg = sum.data() + sumWidth * nw;
        c.negWidth = sumWidth;
        c.negStride = nw;
      }
      std::vector<uint64_t> planes;
      int nplanes;
      if (op == ncclSignAverage) {
        k_.average(c, nranks, count, dt, dst);
        planes = sum;
        nplanes = counters * sumWidth;
      } else {
        nplanes = bits::majorityPlanes(nranks, zero, tie);
        planes.resize((size_t)nplanes * nw);
        k_.decideBits(c, nranks, tie, planes.data(), nw, nw);
        k_.unpack(planes.data(), nplanes, nw, count, dt, dst);
      }
      if (planesOut && nw > 0)  // count 0 (a test plans one block for it): no words
        for (int q = 0; q < nplanes; q++) std::memcpy(planesOut + q * so, planes.data() + q * nw, nw * 8);
    });
  }
  ncclResult_t packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero, int fieldBits,
                          uint64_t* out, size_t stride) override {
    return run([=] { bits::packFields(k_, src, dt, count, zero, fieldBits, out, stride); });
  }
  ncclResult_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                              size_t planeStride) override {
    return run([=] { bits::fieldsToPlanes(words, fieldBits, first, n, planes, width, planeStride); });
  }
  ncclResult_t copyPlanes(uint64_t* dst, size_t dstStride, const uint64_t* src, size_t srcStride, int planes,
                          size_t nwords) override {
    return run([=] {
      for (int q = 0; q < planes; q++) std::memcpy(dst + q * dstStride, src + q * srcStride, nwords * 8);
    });
  }
  ncclResult_t encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nwords, uint64_t* out) override {
    return run([=] { k_.encodeTrits(pos, neg, nwords, reinterpret_cast<uint8_t*>(out)); });
  }
  // A malformed coded result is recorded (peer + 1), as the device backend's flag.
  ncclResult_t decodeTrits(const uint64_t* in, size_t nwords, uint64_t* pos, uint64_t* neg, int peer) override {
    return run([=] {
      if (!k_.decodeTrits(reinterpret_cast<const uint8_t*>(in), nwords, pos, neg)) malformed = (uint32_t)peer + 1;
    });
  }
  uint32_t malformed = 0;

  ncclResult_t groupStart() override {
    EXPECT_FALSE(inGroup_);
    inGroup_ = true;
    return ncclSuccess;
  }
  ncclResult_t groupEnd() override {
    EXPECT_TRUE(inGroup_);
    inGroup_ = false;
    test::FakeFabric::Lock lock(f_.mutex());
    for (const Pending& p : pending_) f_.take(lock, p.peer, rank_, p.data, p.words * 8);
    pending_.clear();
    return ncclSuccess;
  }
  ncclResult_t send(const uint64_t* data, size_t words, int peer) override {
    EXPECT_TRUE(inGroup_);
    EXPECT_NE(peer, rank_);
    test::FakeFabric::Lock lock(f_.mutex());
    f_.post(lock, rank_, peer, data, words * 8);
    return ncclSuccess;
  }
  ncclResult_t recv(uint64_t* data, size_t words, int peer) override {
    EXPECT_TRUE(inGroup_);
    pending_.push_back({peer, data, words});
    return ncclSuccess;
  }
  ncclResult_t allGather(const uint64_t* send, uint64_t* recv, size_t wordsPerRank) override {
    EXPECT_FALSE(inGroup_);
    test::FakeFabric::Lock lock(f_.mutex());
    f_.allGather(lock, rank_, send, recv, wordsPerRank * 8);
    return ncclSuccess;
  }
  ncclResult_t allReduceSum(uint64_t* data, size_t words) override {
    EXPECT_FALSE(inGroup_);
    test::FakeFabric::Lock lock(f_.mutex());
    f_.allReduceSum(lock, rank_, data, data, words);
    return ncclSuccess;
  }

  ncclResult_t copyIn(uint64_t* dst, const void* src, size_t words) override {
    return run([=] { std::memcpy(dst, src, words * 8); });
  }
  ncclResult_t copyOut(void* dst, const uint64_t* src, size_t words) override {
    EXPECT_FALSE(diverted_) << "copyOut waits for the main lane";
    std::memcpy(dst, src, words * 8);
    return ncclSuccess;
  }

  ncclResult_t divert() override {
    diverted_ = true;
    return ncclSuccess;
  }
  ncclResult_t join() override {
    EXPECT_TRUE(diverted_);
    diverted_ = false;
    for (auto& f : held_) f();
    held_.clear();
    return ncclSuccess;
  }

 private:
  struct Pending {
    int peer;
    uint64_t* data;
    size_t words;
  };
  ncclResult_t run(std::function<void()> f) {
    if (diverted_ && hold_)
      held_.push_back(std::move(f));
    else
      f();
    return ncclSuccess;
  }

  test::FakeFabric& f_;
  int rank_;
  bool hold_;
  const bits::Kernels& k_ = bits::kernels();
  bool diverted_ = false;
  bool inGroup_ = false;
  std::vector<Pending> pending_;
  std::vector<std::function<void()>> held_;
};

// Runs body(rank) on n threads, one per rank, and waits for them all.
void onRankThreads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// One call of `plans` (one per rank) on ranks as threads; every rank's
// output against the reference. posted (if not null): the bytes each rank
// sent point to point.
void runPlansOnCpu(const std::vector<RankPlan>& plans, size_t count, ncclDataType_t dt, const Spec& sp, bool inPlace,
                   bool holdSide, std::vector<uint64_t>* posted = nullptr) {
  const int n = static_cast<int>(plans.size());
  std::vector<test::Bytes> in = test::randomVoteInputs(n, count, dt, 7 + (uint32_t)count + 131u * n);
  test::Bytes want = test::referenceOutput(in, count, dt, sp.op, sp.zero, sp.tie);
  test::FakeFabric fabric(n);
  std::vector<test::Bytes> out(n, test::Bytes(count * bits::typeSize(dt), 0xEE));
  std::vector<ncclResult_t> res(n, ncclSuccess);
  onRankThreads(n, [&](int r) {
    // Garbage in the scratch: nothing may read a word it did not write.
    std::vector<uint64_t> scratch((size_t)plans[r].p.layout.words + 1, 0xA5A5A5A5A5A5A5A5ull);
    if (inPlace) out[r] = in[r];
    CpuBackend backend(fabric, r, holdSide);
    res[r] = runSchedule(plans[r].s, plans[r].p, scratch.data(), inPlace ? out[r].data() : in[r].data(), out[r].data(),
                         count, dt, backend);
    if (backend.malformed != 0) res[r] = ncclSystemError;  // a coded result this rank could not decode
  });
  EXPECT_TRUE(fabric.drained()) << "messages left undelivered, or of another size than received";
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(res[r], ncclSuccess) << "rank " << r;
    size_t bad = test::firstMismatch(out[r], want);
    EXPECT_EQ(bad, std::string::npos) << "rank " << r << " first wrong byte " << bad << " (element "
                                      << bad / bits::typeSize(dt) << ")";
  }
  if (posted != nullptr)
    for (int r = 0; r < n; r++) posted->push_back(fabric.bytesPosted(r));
}

// The same with the plans of `algo`.
void runOnCpu(ncclSignAlgo_t algo, int n, size_t count, ncclDataType_t dt, const Spec& sp, bool inPlace,
              int64_t chunkBytes, bool holdSide) {
  SCOPED_TRACE(name(algo, n, algo::blocksForCount(count), sp, chunkBytes) + " count=" + std::to_string(count) +
               " dt=" + bits::typeName(dt) + (inPlace ? " in-place" : "") + (holdSide ? " side-held" : ""));
  std::vector<RankPlan> plans = planAll(algo, n, algo::blocksForCount(count), sp, chunkBytes);
  ASSERT_FALSE(::testing::Test::HasFailure());
  runPlansOnCpu(plans, count, dt, sp, inPlace, holdSide);
}

class NcclExecutorOnCpu : public ::testing::TestWithParam<ncclSignAlgo_t> {};

TEST_P(NcclExecutorOnCpu, EveryRankGetsTheReference) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  int variant = 0;
  for (int n = 1; n <= 16; n++)  // odd and even, powers of two and the folds between them
    for (size_t count : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4097}})
      for (const Spec& sp : kSpecs) {
        variant++;
        ncclDataType_t dt = dts[variant % 4];
        if (dt == ncclInt8 && sp.op == ncclSignAverage) dt = ncclFloat16;
        // Chunks of one block, of a few blocks, and whole transfers.
        const int64_t chunk = variant % 3 == 0 ? 64 : variant % 3 == 1 ? 256 : int64_t{1} << 20;
        runOnCpu(GetParam(), n, count, dt, sp, variant % 2 == 0, chunk, variant % 5 != 0);
        if (HasFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, NcclExecutorOnCpu, ::testing::ValuesIn(kAlgos),
                         [](const ::testing::TestParamInfo<ncclSignAlgo_t>& info) {
                           return std::string(algoName(info.param));
                         });

// A coded result with a byte above 242 is recorded as malformed by the rank
// that decodes it, naming the sender (the device backend's flag, which the
// next call reports: CommContext::malformedResults). N = 2 ring, 20 blocks:
// the result shards are 10 blocks, 2 groups, 128 bytes; no other message has
// that size (the counter shards are 80), and the fabric delivers those with
// their first byte 0xff.
TEST(NcclExecutorOnCpu, MalformedCodedResultIsRecordedWithItsSender) {
  const size_t count = 20 * 64;
  const Spec exact{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero};
  std::vector<RankPlan> plans = planAll(ncclSignAlgoRing, 2, 20, exact, 1 << 20);
  std::vector<test::Bytes> in = test::randomVoteInputs(2, count, ncclFloat32, 3);
  test::FakeFabric fabric(2);
  fabric.corruptSize(128);
  uint32_t malformed[2] = {0, 0};
  std::vector<test::Bytes> out(2, test::Bytes(count * 4));
  onRankThreads(2, [&](int r) {
    std::vector<uint64_t> scratch((size_t)plans[r].p.layout.words + 1, 0);
    CpuBackend backend(fabric, r, false);
    EXPECT_EQ(runSchedule(plans[r].s, plans[r].p, scratch.data(), in[r].data(), out[r].data(), count, ncclFloat32,
                          backend),
              ncclSuccess);
    malformed[r] = backend.malformed;
  });
  EXPECT_EQ(malformed[0], 2u);  // from rank 1
  EXPECT_EQ(malformed[1], 1u);  // from rank 0
}

// Larger and odd: many chunks per step, non-power-of-two folds.
TEST(NcclExecutorOnCpu, ManyChunksAndOddRankCounts) {
  for (ncclSignAlgo_t algo : kAlgos)
    for (int n : {6, 11, 16}) {
      runOnCpu(algo, n, 100003, ncclBfloat16, kSpecs[2], true, 512, true);
      runOnCpu(algo, n, 20000, ncclFloat32, kSpecs[5], false, 4096, true);
      if (HasFailure()) return;
    }
}

// The direct algorithm on the NCCL executor sends what the formula says: the
// bytes each rank posts (its ncclSends, counted by the fabric), as bits per
// element, are (N-1)/N * (counters + result) within 1 % at N = 2..16, result
// 1.6 where it travels coded (exactly, counting the coded bytes, where the
// shards are equal): majority with exact ties, with a tie
// rule, and ternary; the formula written out here, not taken from the
// schedule. 5040 blocks: equal shards for every N but 11 and 13.
TEST(NcclExecutorOnCpu, DirectBitsPerElementAreTheFormula) {
  const size_t count = 5040 * 64;
  const Spec specs[] = {{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero},
                        {ncclSignMajority, ncclSignZeroPositive, ncclSignTiePositive},
                        {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero}};
  for (int n = 2; n <= 16; n++)
    for (const Spec& sp : specs) {
      const int votePlanes = sp.zero == ncclSignZeroAbstain ? 2 : 1;
      const int resultPlanes = sp.tie != ncclSignTieZero ? 1 : votePlanes == 2 || n % 2 == 0 ? 2 : 1;
      // Two result planes (-1/0/+1) travel coded (bits/trits.h): 1.6 bits per element.
      const bool coded = resultPlanes == 2;
      const double formula = (n - 1.0) / n * (votePlanes + (coded ? 1.6 : 1.0));
      // Equal shards of S blocks, exactly: N-1 vote shards and N-1 copies of the own result shard out.
      const size_t shard = 5040 / size_t(n);
      const double exact = 8.0 * (n - 1) *
                           (8.0 * votePlanes * shard + (coded ? double(bits::tritBytes(shard)) : 8.0 * shard)) /
                           double(count);
      SCOPED_TRACE(name(ncclSignAlgoDirect, n, 5040, sp, 65536));
      std::vector<RankPlan> plans = planAll(ncclSignAlgoDirect, n, 5040, sp, 65536);
      std::vector<uint64_t> posted;
      runPlansOnCpu(plans, count, ncclFloat32, sp, false, true, &posted);
      ASSERT_EQ(posted.size(), size_t(n));
      for (int r = 0; r < n; r++) {
        const double bits = 8.0 * (double)posted[r] / count;
        EXPECT_NEAR(bits, formula, 0.01 * formula) << "rank " << r;
        if (5040 % n == 0) {
          EXPECT_DOUBLE_EQ(bits, exact) << "rank " << r;
        }
      }
      if (HasFailure()) return;
    }
}

// The tree on the NCCL executor posts what its formula says, within 1 % at
// N = 2..16 on every rank: in each tree (half the message) counters *
// width(subtree ranks) to its parent and q to each child, q = 1.6 for a coded
// result, else 1 (AlgoTree.WireBitsPerElementAreTheFormula has the formula).
// 5040 blocks cut into several pipeline chunks.
TEST(NcclExecutorOnCpu, TreeBitsPerElementAreTheFormula) {
  const size_t count = 5040 * 64;
  const Spec specs[] = {{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero},
                        {ncclSignMajority, ncclSignZeroPositive, ncclSignTiePositive},
                        {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero}};
  for (int n = 2; n <= 16; n++)
    for (const Spec& sp : specs) {
      const int votePlanes = sp.zero == ncclSignZeroAbstain ? 2 : 1;
      const int resultPlanes = sp.tie != ncclSignTieZero ? 1 : votePlanes == 2 || n % 2 == 0 ? 2 : 1;
      const double q = resultPlanes == 2 ? 1.6 : 1.0;
      SCOPED_TRACE(name(ncclSignAlgoTree, n, 5040, sp, 65536));
      std::vector<RankPlan> plans = planAll(ncclSignAlgoTree, n, 5040, sp, 65536);
      std::vector<uint64_t> posted;
      runPlansOnCpu(plans, count, ncclFloat32, sp, false, true, &posted);
      ASSERT_EQ(posted.size(), size_t(n));
      for (int r = 0; r < n; r++) {
        double formula = 0;
        for (int t = 0; t < algo::kTreeCount; t++) {
          const algo::TreeNode me = algo::treeNode(n, t, r);
          if (me.parent >= 0) formula += 0.5 * votePlanes * std::floor(std::log2(me.size) + 1);
          formula += 0.5 * q * me.nchildren;
        }
        EXPECT_NEAR(8.0 * (double)posted[r] / count, formula, 0.01 * formula) << "rank " << r;
      }
      if (HasFailure()) return;
    }
}

// ncclCommSplit and the node comm's queries on the fake fabric: a node comm
// is an allocation that only ncclCommDestroy frees (a leak shows under
// LeakSanitizer, and in the count of live ones).
thread_local test::FakeFabric* tFabric = nullptr;
thread_local int tRank = -1;
std::atomic<int> gLiveNodeComms{0};
int gSplitSizeSkew = 0;  // added to the size the node comm reports (a broken NCCL)

struct FakeNodeComm {
  int rank = -1;
  std::vector<int> members;
};
FakeNodeComm* nodeCommOf(ncclComm_t c) { return reinterpret_cast<FakeNodeComm*>(c); }

ncclResult_t cpuSplit(ncclComm_t, int color, int key, ncclComm_t* out, ncclConfig_t*) {
  test::FakeFabric::Lock lock(tFabric->mutex());
  auto* c = new FakeNodeComm;
  tFabric->split(lock, tRank, color, key, &c->members, &c->rank);
  gLiveNodeComms++;
  *out = reinterpret_cast<ncclComm_t>(c);
  return ncclSuccess;
}
ncclResult_t cpuCommCount(const ncclComm_t c, int* n) {
  *n = (int)nodeCommOf(c)->members.size() + gSplitSizeSkew;
  return ncclSuccess;
}
ncclResult_t cpuCommUserRank(const ncclComm_t c, int* r) {
  *r = nodeCommOf(c)->rank;
  return ncclSuccess;
}
ncclResult_t cpuCommDestroy(ncclComm_t c) {
  delete nodeCommOf(c);
  gLiveNodeComms--;
  return ncclSuccess;
}
const char* cpuErrorString(ncclResult_t) { return "fake"; }

NcclApi splitApi() {
  NcclApi api;
  api.getErrorString = cpuErrorString;
  api.commCount = cpuCommCount;
  api.commUserRank = cpuCommUserRank;
  api.commSplit = cpuSplit;
  api.commDestroy = cpuCommDestroy;
  return api;
}

// Every rank learns the nodes of `topo` from host ids "node-<i>" on the CPU
// backend; each rank's groups (before release) and result.
std::vector<std::pair<ncclResult_t, NodeGroups>> learnOnCpu(const algo::Topology& topo, const NcclApi& api) {
  const int n = (int)topo.node.size();
  test::FakeFabric fabric(n);
  std::vector<std::pair<ncclResult_t, NodeGroups>> out(n);
  onRankThreads(n, [&](int r) {
    tFabric = &fabric;
    tRank = r;
    std::vector<uint64_t> scratch(nodeGroupWords(n), 0xA5A5A5A5A5A5A5A5ull);
    CpuBackend backend(fabric, r, false);
    const ncclComm_t parent = reinterpret_cast<ncclComm_t>(uintptr_t{0x1000});  // never dereferenced
    out[r].first = learnNodeGroups(api, backend, parent, n, r, "node-" + std::to_string(topo.nodeOf(r)), scratch.data(),
                                   &out[r].second);
  });
  EXPECT_TRUE(fabric.drained());
  return out;
}

// The hierarchical schedule over node layouts (common/node_layouts.h: nodes
// x ranks per node in {1..4} x {1, 2, 3, 4, 8}, unequal and interleaved) on
// the NCCL executor's CPU backend, over the nodes the ranks learn from their
// host ids (learnNodeGroups, the emulated ncclCommSplit), as a comm's first
// call does: every op and rule, counts 0/1/63/64/65/large, in and out of
// place, chunked several ways. One node, or a rank per node: no grouping,
// so hier runs over no topology (as halving-doubling), as on NCCL.
TEST(NcclExecutorOnCpu, HierarchicalOverNodeLayouts) {
  const NcclApi api = splitApi();
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  int variant = 0;
  for (const algo::Topology& topo : test::nodeLayouts()) {
    const int n = (int)topo.node.size();
    auto learned = learnOnCpu(topo, api);  // the node comms keep &api until released
    ASSERT_EQ(learned[0].first, ncclSuccess);
    const algo::Topology nodes = learned[0].second.topology;  // unknown when not grouped
    for (auto& l : learned) {
      EXPECT_EQ(l.second.topology.node, nodes.node) << "every rank learns the same nodes";
      EXPECT_EQ(releaseNodeGroups(&l.second), ncclSuccess);
    }
    const algo::Topology* over = nodes.known() ? &nodes : nullptr;
    if (over != nullptr) {
      EXPECT_EQ(over->node, topo.node);
    }
    for (size_t count : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{20011}})
      for (const Spec& sp : kSpecs) {
        variant++;
        ncclDataType_t dt = dts[variant % 4];
        if (dt == ncclInt8 && sp.op == ncclSignAverage) dt = ncclFloat16;
        const int64_t chunk = variant % 3 == 0 ? 64 : variant % 3 == 1 ? 512 : int64_t{1} << 20;
        SCOPED_TRACE("nodes " + test::layoutName(topo) + " " +
                     name(ncclSignAlgoHierarchical, n, algo::blocksForCount(count), sp, chunk) +
                     " count=" + std::to_string(count) + " dt=" + bits::typeName(dt));
        std::vector<RankPlan> plans =
            planAll(ncclSignAlgoHierarchical, n, std::max<int64_t>(1, algo::blocksForCount(count)), sp, chunk, over);
        ASSERT_FALSE(HasFailure());
        runPlansOnCpu(plans, count, dt, sp, variant % 2 == 0, variant % 5 != 0);
        if (HasFailure()) return;
      }
  }
}

// SIGNLION_CHECK=1's signature check (call_agreement.h) on the CPU backend:
// one all-gather, then every rank compares. Agreeing ranks pass; when the
// last rank passed another count, datatype, op, rule, algorithm or segment,
// or is at another call, every rank fails with ncclInvalidUsage and a WARN
// naming the field.
TEST(CallAgreementOnCpu, EveryRankFailsWhenOneDisagrees) {
  struct Case {
    const char* warn;  // the field as the WARN names it
    const char* odd;   // the odd rank's value as the WARN writes it
    std::function<void(CallSignature*)> change;
  };
  const Case cases[] = {
      {"", "", [](CallSignature*) {}},
      {"passed count ", "999", [](CallSignature* s) { s->count = 999; }},
      {"passed datatype ", "half", [](CallSignature* s) { s->datatype = ncclFloat16; }},
      {"passed op ", "average", [](CallSignature* s) { s->op = ncclSignAverage; }},
      {"passed zero rule ", "abstain", [](CallSignature* s) { s->zeroRule = ncclSignZeroAbstain; }},
      {"passed tie rule ", "negative", [](CallSignature* s) { s->tieRule = ncclSignTieNegative; }},
      {"passed algorithm ", "ring", [](CallSignature* s) { s->algorithm = ncclSignAlgoRing; }},
      {"passed segment size ", "64", [](CallSignature* s) { s->segment = 64; }},
      {" at call ", "8", [](CallSignature* s) { s->seq = 8; }},
  };
  for (const Case& c : cases) {
    for (int n : {2, 3, 4, 8}) {
      SCOPED_TRACE(std::string(c.warn) + " N=" + std::to_string(n));
      test::FakeFabric fabric(n);
      test::WarnCapture warns;
      std::vector<ncclResult_t> res(n, ncclInternalError);
      onRankThreads(n, [&](int r) {
        CallSignature mine;
        mine.seq = 7;
        mine.count = 1000;
        mine.segment = 1 << 20;
        mine.rank = r;
        mine.kind = (uint8_t)CallKind::kSignAllReduce;
        mine.datatype = ncclFloat32;
        mine.algorithm = ncclSignAlgoHalvingDoubling;
        if (r == n - 1) c.change(&mine);
        std::vector<uint64_t> scratch(agreementWords(n), 0xA5A5A5A5A5A5A5A5ull);
        std::vector<CallSignature> table(n);
        CpuBackend backend(fabric, r, false);
        res[r] = checkAgreement(backend, mine, n, scratch.data(), table.data(), "test");
      });
      const bool agree = c.warn[0] == '\0';
      for (int r = 0; r < n; r++) EXPECT_EQ(res[r], agree ? ncclSuccess : ncclInvalidUsage) << "rank " << r;
      if (agree) {
        EXPECT_EQ(warns.count(), 0);
      } else {
        EXPECT_EQ(warns.countContaining(c.warn), n) << "every rank names the field";
        EXPECT_EQ(warns.countContaining(c.odd), n) << "every rank names the odd value";
      }
    }
  }
}

// The NCCL path chooses by the same rule as the host: under Auto, fields too
// narrow for N leave field-sum out of the comm's choice and the call runs
// another algorithm (here on the CPU backend) to the reference; forced,
// field-sum is an invalid argument.
TEST(NcclCommContext, AutoLeavesOutFieldsTooNarrowForN) {
  const int n = 5;  // 5 votes need 3-bit fields
  setenv("SIGNLION_FIELD_BITS", "2", 1);
  paramResetCache();
  const ncclComm_t comm = reinterpret_cast<ncclComm_t>(uintptr_t{0x1000});  // never dereferenced: no device work
  const Spec sp = kSpecs[2];
  for (size_t count : {size_t{1000}, size_t{70001}}) {
    std::vector<std::unique_ptr<CommContext>> ctx;
    std::vector<RankPlan> plans(n);
    for (int r = 0; r < n; r++) {
      ctx.emplace_back(new CommContext(comm, CommShape{n, r, 0}, ResolvedConfig()));
      const algo::ScheduleCache<Plan>::Entry* e = nullptr;
      ASSERT_EQ(ctx[r]->planFor(algo::blocksForCount(count), algo::OpSpec{sp.op, sp.zero, sp.tie}, &e), ncclSuccess)
          << "count " << count << " rank " << r;
      EXPECT_NE(e->schedule.algo, ncclSignAlgoFieldSum);
      plans[r] = RankPlan{e->schedule, e->extra};
    }
    runPlansOnCpu(plans, count, ncclBfloat16, sp, true, true);
  }
  ResolvedConfig forced;
  forced.algorithm = ncclSignAlgoFieldSum;
  CommContext ctx(comm, CommShape{n, 0, 0}, forced);
  const algo::ScheduleCache<Plan>::Entry* e = nullptr;
  EXPECT_EQ(ctx.planFor(16, algo::OpSpec(), &e), ncclInvalidArgument);
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
  EXPECT_EQ(ctx.planFor(16, algo::OpSpec(), &e), ncclSuccess);
  EXPECT_EQ(e->schedule.algo, ncclSignAlgoFieldSum);
}

// Host ids all-gathered, one node comm per rank with its node's size and
// local rank when there are several nodes and one has several ranks (none
// otherwise), every rank with the same topology; releaseNodeGroups destroys
// it (none left; no leak under ASan).
TEST(NcclNodeGroups, LearnedFromHostIdsAndReleased) {
  const NcclApi api = splitApi();
  for (const algo::Topology& topo : test::nodeLayouts()) {
    SCOPED_TRACE("nodes " + test::layoutName(topo));
    const int n = (int)topo.node.size();
    const auto members = topo.members(n);
    const bool grouped = members.size() > 1 && (int)members.size() < n;
    auto learned = learnOnCpu(topo, api);
    EXPECT_EQ(gLiveNodeComms.load(), grouped ? n : 0);
    for (int r = 0; r < n; r++) {
      NodeGroups& g = learned[r].second;
      ASSERT_EQ(learned[r].first, ncclSuccess) << "rank " << r;
      EXPECT_TRUE(g.learned);
      EXPECT_EQ(g.nodes, (int)members.size());
      EXPECT_EQ(g.hierarchical(), grouped);
      if (grouped) {
        EXPECT_EQ(g.topology.node, topo.node);
        const std::vector<int>& mates = members[topo.nodeOf(r)];
        EXPECT_EQ(nodeCommOf(g.nodeComm)->members, mates) << "rank " << r;
      } else {
        EXPECT_EQ(g.nodeComm, nullptr);
      }
      EXPECT_EQ(releaseNodeGroups(&g), ncclSuccess);
      EXPECT_FALSE(g.learned);
      EXPECT_EQ(g.nodeComm, nullptr);
    }
    EXPECT_EQ(gLiveNodeComms.load(), 0);
  }
}

// A node comm that is not this rank's node (NCCL disagreeing with the host
// ids) is an error on every rank, destroyed, not kept.
TEST(NcclNodeGroups, NodeCommOfTheWrongSizeIsRefused) {
  algo::Topology two3;
  two3.node = {0, 0, 0, 1, 1, 1};
  test::WarnCapture warns;
  gSplitSizeSkew = 1;
  const NcclApi api = splitApi();
  auto learned = learnOnCpu(two3, api);
  gSplitSizeSkew = 0;
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ(learned[r].first, ncclInternalError) << "rank " << r;
    EXPECT_EQ(learned[r].second.nodeComm, nullptr);
  }
  EXPECT_EQ(warns.countContaining("expected rank"), 6);
  EXPECT_EQ(gLiveNodeComms.load(), 0);
}

}  // namespace
}  // namespace nccl
}  // namespace signlion
