// algo/scratch_layout.h: the regions of one rank's scratch as both executors
// lay them out (in order, aligned, each large enough for every plane the
// schedule addresses in it), and the host executor's layout, cached with
// each schedule: its stage holds the staged payloads of any step.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algo/schedule.h"
#include "algo/scratch_layout.h"
#include "common/config.h"
#include "common/warn_capture.h"
#include "host/host_params.h"
#include "host/schedule_executor.h"

namespace signlion {
namespace algo {
namespace {

// Calls f(schedule, what) over every algorithm, N (odd, even, folds), sizes,
// ops and zero rules (binary and ternary counters).
template <class F>
void forSchedules(F f) {
  for (int a = ncclSignAlgoAuto + 1; a < ncclSignNumAlgos; a++)
    for (int n : {1, 2, 3, 5, 8, 16})
      for (int64_t nblocks : {0, 1, 7, 100})
        for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage})
          for (ncclSignZeroRule_t zero : {ncclSignZeroPositive, ncclSignZeroAbstain}) {
            const ncclSignAlgo_t algo = static_cast<ncclSignAlgo_t>(a);
            Schedule s;
            ASSERT_EQ(buildSchedule(algo, n, n - 1, nblocks, OpSpec{op, zero, ncclSignTieZero}, &s), ncclSuccess);
            f(s, std::string(algoName(algo)) + " N=" + std::to_string(n) + " nblocks=" + std::to_string(nblocks) +
                     " op=" + std::to_string(op) + " zero=" + std::to_string(zero));
          }
}

// Every plane the schedule can name in `buf` lies inside [begin, end) words.
void checkPlanesInside(const Schedule& s, const ScratchLayout& L, Buffer buf, int64_t begin, int64_t end,
                       const std::string& what) {
  std::vector<uint64_t> scratch(static_cast<size_t>(L.words) + 1);
  uint64_t* base = scratch.data();
  int slots = 1, planes = 0, width = 1;
  int64_t words = s.nblocks;
  switch (buf) {
    case Buffer::kCounter:
      planes = s.counters * s.counterWidth;
      width = std::max(s.counterWidth, 1);
      break;
    case Buffer::kResult:
      planes = s.resultPlanes;
      break;
    case Buffer::kVotes:
      slots = s.voteSlots;
      planes = s.counters;
      break;
    case Buffer::kFields:
      planes = s.counters;
      words = s.fieldWords;
      break;
  }
  if (words == 0) return;
  for (int slot = 0; slot < slots; slot++)
    for (int p = 0; p < planes; p++) {
      const int64_t at = L.plane(base, s, buf, slot, p, width) - base;
      EXPECT_GE(at, begin) << what << " buffer " << (int)buf << " slot " << slot << " plane " << p;
      EXPECT_LE(at + words, end) << what << " buffer " << (int)buf << " slot " << slot << " plane " << p;
    }
}

TEST(ScratchLayout, RegionsInOrderAlignedAndHoldingEveryPlane) {
  forSchedules([](const Schedule& s, const std::string& what) {
    for (int64_t align : {1, 32}) {
      const int64_t stageWords = 37;
      const ScratchLayout L = layoutScratch(s, stageWords, align);
      const int64_t fieldPlanes = s.algo == ncclSignAlgoFieldSum && s.spec.op == ncclSignMajority
                                      ? s.counters * counterWidth(s.nranks) * s.nblocks
                                      : 0;
      const struct {
        int64_t at, need;
      } regions[] = {{L.counter, s.counterBytes() / 8}, {L.result, s.resultBytes() / 8}, {L.votes, s.votesBytes() / 8},
                     {L.fields, s.fieldsBytes() / 8},   {L.fieldPlanes, fieldPlanes},    {L.stage, stageWords}};
      int64_t end = 0;
      for (const auto& r : regions) {
        EXPECT_EQ(r.at % align, 0) << what;
        EXPECT_GE(r.at, end) << what << ": a region overlaps the one before it";
        EXPECT_LT(r.at - end, align) << what << ": more padding than the alignment needs";
        end = r.at + r.need;
      }
      EXPECT_GE(L.words, end) << what;
      EXPECT_LT(L.words - end, align) << what;
      EXPECT_EQ(L.bytes(), 8 * L.words);
      checkPlanesInside(s, L, Buffer::kCounter, L.counter, L.result, what);
      checkPlanesInside(s, L, Buffer::kResult, L.result, L.votes, what);
      checkPlanesInside(s, L, Buffer::kVotes, L.votes, L.fields, what);
      checkPlanesInside(s, L, Buffer::kFields, L.fields, L.fieldPlanes, what);
    }
  });
}

// The host stages a step's multi-plane sends (gathered into one message) and
// every receive but a single-plane store (which lands in place); its steps
// overlap (algo/chunk_order.h), each staged message keeping its space until
// it is done, so the stage region holds every step's worth at once and no more.
TEST(ScratchLayout, HostStageHoldsEveryStep) {
  forSchedules([](const Schedule& s, const std::string& what) {
    host::HostPlan plan;
    host::makeHostPlan(s, &plan);
    const ScratchLayout& L = plan.layout;
    const int64_t h = (int64_t)host::kHeaderWords;  // 2: the 16-byte CallHeader
    // Staged payloads, plus for every transfer a call header (h words) in
    // front of its first chunk, which is staged with it even when the rest
    // travels in place.
    const int64_t chunkBytes = host::hostChunkBytes();
    auto firstChunk = [&](int planes, const Range& r) {
      return planes * std::min(chunkBlocks(planes, chunkBytes), r.size());
    };
    int64_t total = 0;
    for (const Step& st : s.steps) {
      int64_t staged = 0;
      for (const Send& x : st.sends)
        staged += h + (x.planes > 1 ? x.bytes() / 8 : firstChunk(x.planes, x.range));
      for (const Recv& x : st.recvs)
        staged += h + (x.planes > 1 || x.op != RecvOp::kStore ? x.bytes() / 8 : firstChunk(x.planes, x.range));
      total += staged;
    }
    EXPECT_EQ(L.words - L.stage, total) << what;
    // The host packs its regions, with a header's headroom in front of each
    // region and each vote slot: nothing else lies there.
    const ScratchLayout packed = layoutScratch(s, total, 1, h);
    EXPECT_EQ(L.headroom, h) << what;
    EXPECT_GE(L.counter, h) << what;
    EXPECT_GE(L.result - h, L.counter + s.counterBytes() / 8) << what;
    EXPECT_GE(L.votes - h, L.result + s.resultBytes() / 8) << what;
    std::vector<uint64_t> scratch((size_t)L.words + 1);
    uint64_t* base = scratch.data();
    auto at = [&](int slot, int plane) { return L.plane(base, s, Buffer::kVotes, slot, plane, 1) - base; };
    for (int slot = 1; slot < s.voteSlots; slot++)
      EXPECT_GE(at(slot, 0) - h, at(slot - 1, s.counters - 1) + s.nblocks) << what;
    if (s.voteSlots > 0) {
      EXPECT_GE(L.fields - h, at(s.voteSlots - 1, s.counters - 1) + s.nblocks) << what;
    }
    EXPECT_EQ(L.counter, packed.counter) << what;
    EXPECT_EQ(L.fieldPlanes, packed.fieldPlanes) << what;
    EXPECT_EQ(L.words, packed.words) << what;
  });
}

}  // namespace
}  // namespace algo
}  // namespace signlion

// Less than one block is no segment: a WARN naming the variable and the
// default (it used to become 64 elements silently: a call of 289000 bytes ran
// ~700x slower). Otherwise whole blocks, rounded down.
TEST(HostParams, SegmentBelowOneBlockWarnsAndKeepsTheDefault) {
  struct Case {
    const char* set;  // nullptr: unset
    size_t want;
    bool warns;
  };
  const size_t deflt = (size_t)signlion::host::kDefaultHostSegment;
  for (Case c : {Case{nullptr, deflt, false}, Case{"0", deflt, true}, Case{"-1", deflt, true}, Case{"63", deflt, true},
                 Case{"-5G", deflt, true}, Case{"64", 64, false}, Case{"100", 64, false}, Case{"4096", 4096, false},
                 Case{"1M", 1 << 20, false}}) {
    if (c.set) setenv("SIGNLION_HOST_SEGMENT", c.set, 1); else unsetenv("SIGNLION_HOST_SEGMENT");
    signlion::paramResetCache();
    signlion::test::WarnCapture warns;
    EXPECT_EQ(signlion::host::hostSegmentElements(), c.want) << (c.set ? c.set : "unset");
    EXPECT_EQ(signlion::host::hostSegmentElements(), c.want) << (c.set ? c.set : "unset");
    EXPECT_EQ(warns.countContaining("SIGNLION_HOST_SEGMENT"), c.warns ? 1 : 0) << (c.set ? c.set : "unset");
  }
  unsetenv("SIGNLION_HOST_SEGMENT");
  signlion::paramResetCache();
}

// The host chunk follows the link unless set: about a millisecond of
// SIGNLION_COST_BETA_MBPS as a power of two in [128K, 512K]; an explicit
// SIGNLION_HOST_CHUNK_BYTES wins (outside 0 or [64 B, 1 GiB] it is WARNed and
// the link decides, as unset).
TEST(HostParams, ChunkFollowsTheLink) {
  struct Case {
    const char* chunk;  // nullptr: unset
    const char* beta;
    int64_t want;
  };
  for (Case c : {Case{nullptr, nullptr, 512 << 10}, Case{nullptr, "1250", 512 << 10}, Case{nullptr, "125", 128 << 10},
                 Case{nullptr, "312", 256 << 10}, Case{nullptr, "12500", 512 << 10}, Case{nullptr, "12", 128 << 10},
                 Case{"4096", "125", 4096}, Case{"1M", "125", 1 << 20}, Case{"8", nullptr, 512 << 10}, Case{"2G", "125", 128 << 10}}) {
    if (c.chunk) setenv("SIGNLION_HOST_CHUNK_BYTES", c.chunk, 1); else unsetenv("SIGNLION_HOST_CHUNK_BYTES");
    if (c.beta) setenv("SIGNLION_COST_BETA_MBPS", c.beta, 1); else unsetenv("SIGNLION_COST_BETA_MBPS");
    signlion::paramResetCache();
    EXPECT_EQ(signlion::host::hostChunkBytes(), c.want) << (c.chunk ? c.chunk : "unset") << " " << (c.beta ? c.beta : "unset");
  }
  unsetenv("SIGNLION_HOST_CHUNK_BYTES");
  unsetenv("SIGNLION_COST_BETA_MBPS");
  signlion::paramResetCache();
}
