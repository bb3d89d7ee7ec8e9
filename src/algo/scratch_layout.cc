#include "algo/scratch_layout.h"

namespace signlion {
namespace algo {

ScratchLayout layoutScratch(const Schedule& s, int64_t stageWords, int64_t alignWords, int64_t headroomWords) {
  ScratchLayout L;
  L.headroom = headroomWords;
  int64_t at = 0;
  auto region = [&](int64_t words) {
    const int64_t start = at + headroomWords;  // a region's data starts after its headroom
    words += headroomWords;
    at += (words + alignWords - 1) / alignWords * alignWords;
    return start;
  };
  L.counter = region(s.counterBytes() / 8);
  L.result = region(s.resultBytes() / 8);
  // Each vote slot but the first has headroom of its own (the first has the region's).
  L.votes = region(s.votesBytes() / 8 + (s.voteSlots > 0 ? (s.voteSlots - 1) * headroomWords : 0));
  L.fields = region(s.fieldsBytes() / 8);
  // Field-sum's majority decides from bit-sliced planes of the counts; an
  // average writes those planes into the result directly and needs none.
  const bool fieldPlanes = s.algo == ncclSignAlgoFieldSum && s.spec.op == ncclSignMajority;
  L.fieldPlanes = region(fieldPlanes ? s.counters * counterWidth(s.nranks) * s.nblocks : 0);
  L.stage = region(stageWords);
  L.words = at;
  return L;
}

}  // namespace algo
}  // namespace signlion
