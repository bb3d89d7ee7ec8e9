// algo/chunk_order: which earlier chunks each chunk of a schedule waits for.
// Steps overlap chunk by chunk: a chunk waits for the chunks of earlier steps
// over the same blocks, not for the whole earlier step (that is what keeps
// the link busy between halving-doubling's steps); and never for less than
// what its data needs (adds in order, no overwrite of what is still sent).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algo/chunk_order.h"
#include "algo/schedule.h"
#include "common/config.h"

namespace signlion {
namespace algo {
namespace {

using Kind = Chunk::Kind;

bool overlaps(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

struct Cut {
  std::vector<Chunk> chunks;
  const Local* lazyPack = nullptr;
};

Cut cut(const Schedule& s, int64_t chunkBytes, int64_t pieceBlocks) {
  Cut c;
  cutIntoChunks(s, chunkBytes, pieceBlocks, &c.chunks, &c.lazyPack);
  return c;
}

// The chunks of `step` of `kind`.
std::vector<Chunk> of(const Cut& c, uint32_t step, Kind kind) {
  std::vector<Chunk> out;
  for (const Chunk& x : c.chunks)
    if (x.step == step && x.kind == kind) out.push_back(x);
  return out;
}

// Everything x waits for.
std::vector<Chunk> waitsFor(const Schedule& s, const Cut& c, const Chunk& x) {
  std::vector<Chunk> out;
  for (const Chunk& y : c.chunks)
    if (chunkWaitsFor(s, x, y)) out.push_back(y);
  return out;
}

// Halving-doubling, N = 4, rank 0, 256 blocks in chunks of 32 blocks per
// plane: step 1 sends blocks [128, 256) and adds what comes into [0, 128);
// step 2 sends [64, 128) (two planes) and adds into [0, 64); step 3 decides
// [0, 64); step 4 sends it and stores [64, 128); step 5 sends [0, 128) and
// stores [128, 256).
TEST(AlgoChunkOrder, HalvingDoublingForwardsEachChunkOnceItsBlocksAreAdded) {
  Schedule s;
  ASSERT_EQ(buildSchedule(ncclSignAlgoHalvingDoubling, 4, 0, 256, OpSpec{}, &s), ncclSuccess);
  ASSERT_EQ(s.steps.size(), 6u);
  const Cut c = cut(s, 256, 32);
  ASSERT_NE(c.lazyPack, nullptr);  // the fold step's pack runs on demand
  const std::vector<Chunk> added1 = of(c, 1, Kind::kRecv);
  ASSERT_EQ(added1.size(), 4u);  // [0, 128) in 32-block chunks

  // Each chunk step 2 sends waits for the step-1 adds over its blocks only:
  // it may go while step 1's other chunks are still on the wire.
  const std::vector<Chunk> sent2 = of(c, 2, Kind::kSend);
  ASSERT_EQ(sent2.size(), 4u);  // [64, 128) in 16-block chunks (two planes)
  for (const Chunk& x : sent2) {
    const std::vector<Chunk> w = waitsFor(s, c, x);
    ASSERT_EQ(w.size(), 1u) << "step-2 chunk at " << x.range.begin;
    EXPECT_EQ(w[0].step, 1u);
    EXPECT_EQ(w[0].kind, Kind::kRecv);
    EXPECT_TRUE(overlaps(w[0].range, x.range));
  }
  // Step 2's adds into [0, 64) come after step 1's adds there, and only those.
  for (const Chunk& x : of(c, 2, Kind::kRecv)) {
    const std::vector<Chunk> w = waitsFor(s, c, x);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].step, 1u);
    EXPECT_TRUE(overlaps(w[0].range, x.range));
  }
  // Each decided piece waits for the adds of its blocks (both steps).
  for (const Chunk& x : of(c, 3, Kind::kLocal)) {
    int adds1 = 0, adds2 = 0;
    for (const Chunk& y : waitsFor(s, c, x)) {
      EXPECT_EQ(y.kind, Kind::kRecv);
      EXPECT_TRUE(overlaps(y.range, x.range));
      adds1 += y.step == 1;
      adds2 += y.step == 2;
    }
    EXPECT_EQ(adds1, 1);
    EXPECT_GE(adds2, 1);
  }
  // Step 5 sends this rank's own decided piece [0, 64) without waiting for
  // step 4's receive of the partner's piece [64, 128): only its decide. (The
  // result travels trit coded, in chunks of whole 5-block groups: 4 groups,
  // 20 blocks, in 256 bytes; the chunk [60, 80) holds both pieces and waits
  // for both.)
  int ownOnly = 0;
  for (const Chunk& x : of(c, 5, Kind::kSend)) {
    EXPECT_EQ(x.range.size() % 5, x.range.end == 128 ? 128 % 5 : 0) << "chunk at " << x.range.begin;
    ownOnly += x.range.end <= 64;
    for (const Chunk& y : waitsFor(s, c, x)) {
      EXPECT_TRUE(overlaps(y.range, x.range));
      if (x.range.end <= 64 || y.step == 3) {
        EXPECT_EQ(y.step, 3u) << "own piece at " << x.range.begin << " waits for step " << y.step;
        EXPECT_EQ(y.kind, Kind::kLocal);
      } else {
        EXPECT_EQ(y.step, 4u);
        EXPECT_EQ(y.kind, Kind::kRecv);
      }
    }
  }
  EXPECT_EQ(ownOnly, 3);  // [0, 20), [20, 40), [40, 60)
}

// The ring forwards chunk by chunk: step k+1 sends what step k added, each
// chunk as soon as that chunk's add is done.
TEST(AlgoChunkOrder, RingForwardsChunkByChunk) {
  Schedule s;
  ASSERT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, 256, OpSpec{}, &s), ncclSuccess);
  const Cut c = cut(s, 128, 16);  // 16 blocks per one-plane chunk, 8 per two-plane one
  for (uint32_t k = 1; k < 3; k++) {
    const std::vector<Chunk> sent = of(c, k, Kind::kSend);
    ASSERT_GE(sent.size(), 2u);
    for (const Chunk& x : sent) {
      const std::vector<Chunk> w = waitsFor(s, c, x);
      ASSERT_EQ(w.size(), 1u) << "step " << k << " chunk at " << x.range.begin;
      EXPECT_EQ(w[0].step, k - 1);
      EXPECT_EQ(w[0].kind, Kind::kRecv);
      EXPECT_TRUE(overlaps(w[0].range, x.range));
    }
  }
}

// Hand-made steps for the hazards: a receive into blocks that an earlier
// step sends waits for that send; a step's transfers wait for its locals; its
// sends never wait for its own receives; a piece of a local for the earlier
// pieces of locals over the same blocks only.
TEST(AlgoChunkOrder, HazardsOnTheSameBlocksAreOrdered) {
  Schedule s;
  s.algo = ncclSignAlgoRing;
  s.nranks = 2;
  s.nblocks = 64;
  s.counterMax = 2;
  s.counterWidth = 2;
  Step a;
  a.sends.push_back(detail::makeSend(1, Buffer::kCounter, Range{0, 32}, 1, 1));
  a.recvs.push_back(detail::makeAddRecv(1, Range{32, 64}, 1, 1, 1));
  Step b;
  b.locals.push_back(detail::decide(Buffer::kCounter, Range{32, 64}, 2, 2));
  b.sends.push_back(detail::makeResultSend(1, Range{32, 64}, 1));
  b.recvs.push_back(detail::makeAddRecv(1, Range{0, 32}, 1, 1, 1));
  s.steps = {a, b};
  const Cut c = cut(s, 1 << 20, 8);
  ASSERT_EQ(c.lazyPack, nullptr);  // no pack here
  const Chunk send0 = of(c, 0, Kind::kSend)[0], recv0 = of(c, 0, Kind::kRecv)[0];
  const std::vector<Chunk> decides = of(c, 1, Kind::kLocal);
  ASSERT_EQ(decides.size(), 4u);  // [32, 64) in pieces of 8 blocks
  const Chunk send1 = of(c, 1, Kind::kSend)[0], recv1 = of(c, 1, Kind::kRecv)[0];
  EXPECT_TRUE(chunkWaitsFor(s, recv1, send0));   // write after read: [0, 32) is still being sent
  EXPECT_FALSE(chunkWaitsFor(s, send0, recv0));  // within a step transfers are not ordered
  EXPECT_FALSE(chunkWaitsFor(s, recv0, send0));
  EXPECT_FALSE(chunkWaitsFor(s, send1, recv1));
  EXPECT_FALSE(chunkWaitsFor(s, send0, recv1));  // never on a later step
  for (const Chunk& d : decides) {
    EXPECT_TRUE(chunkWaitsFor(s, d, recv0));  // reads what step 0 added
    EXPECT_TRUE(chunkWaitsFor(s, send1, d));  // the step's send waits for its locals
    EXPECT_FALSE(chunkWaitsFor(s, recv1, d)); // other blocks
    for (const Chunk& e : decides) EXPECT_FALSE(chunkWaitsFor(s, d, e));  // disjoint pieces
  }
}

// The graph an executor counts down (buildChunkGraph) is exactly the
// chunkWaitsFor relation, all pairs checked the slow way: every algorithm,
// ranks, op, chunk sizes down to 64 B (many chunks per transfer), one rank
// of each shape. Its lazy pack is cutIntoChunks'.
TEST(AlgoChunkOrder, GraphIsTheWaitsRelation) {
  const ncclSignAlgo_t algos[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                  ncclSignAlgoFieldSum, ncclSignAlgoDirect, ncclSignAlgoTree};
  for (ncclSignAlgo_t algo : algos)
    for (int n : {2, 3, 4, 5})
      for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage})
        for (int64_t chunkBytes : {int64_t{64}, int64_t{512}, int64_t{1} << 19}) {
          Schedule s;
          OpSpec spec;
          spec.op = op;
          ASSERT_EQ(buildSchedule(algo, n, n - 1, 96, spec, &s), ncclSuccess);
          ChunkGraph g;
          buildChunkGraph(s, chunkBytes, 8, &g);
          const Cut c = cut(s, chunkBytes, 8);
          const std::string what = std::string(algoName(algo)) + " N " + std::to_string(n) + " op " +
                                   std::to_string((int)op) + " chunk " + std::to_string(chunkBytes);
          ASSERT_EQ(g.chunks.size(), c.chunks.size()) << what;
          const Local* lazy = g.lazyPackStep < 0 ? nullptr : &s.steps[g.lazyPackStep].locals[g.lazyPackIndex];
          EXPECT_EQ(lazy, c.lazyPack) << what;
          ASSERT_EQ(g.waits.size(), g.chunks.size()) << what;
          ASSERT_EQ(g.succBegin.size(), g.chunks.size() + 1) << what;
          std::vector<uint32_t> waits(g.chunks.size(), 0);
          size_t edges = 0;
          for (size_t y = 0; y < g.chunks.size(); y++) {
            std::vector<uint8_t> held(g.chunks.size(), 0);
            for (uint32_t i = g.succBegin[y]; i < g.succBegin[y + 1]; i++) held[g.succ[i]] = 1;
            for (size_t x = 0; x < g.chunks.size(); x++) {
              const bool want = x > y && chunkWaitsFor(s, g.chunks[x], g.chunks[y]);
              ASSERT_EQ(held[x] != 0, want) << what << ": chunk " << x << " on " << y;
              waits[x] += want;
              edges += want;
            }
          }
          EXPECT_EQ(waits, g.waits) << what;
          EXPECT_EQ(g.succ.size(), edges) << what;
        }
}

}  // namespace
}  // namespace algo
}  // namespace signlion
