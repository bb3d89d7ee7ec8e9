// Where the buffers of one rank's schedule live in an executor's scratch:
// plain data, made once per schedule and cached with it (algo/schedule_cache.h),
// so a warm call only adds these offsets to its scratch base. Both executors
// lay out the same regions in the same order; each decides its own alignment
// and its own staging space (what it stages differs).
#pragma once

#include <cstdint>

#include "algo/schedule.h"

namespace signlion {
namespace algo {

// Region offsets in uint64 words from the scratch base.
struct ScratchLayout {
  int64_t counter = 0;      // Buffer::kCounter
  int64_t result = 0;       // Buffer::kResult
  int64_t votes = 0;        // Buffer::kVotes
  int64_t fields = 0;       // Buffer::kFields
  int64_t fieldPlanes = 0;  // field-sum majority: the counts as bit-sliced planes, to decide
  int64_t stage = 0;        // the executor's staging space (the host's: every step's staged messages at once)
  int64_t words = 0;        // the whole scratch
  // Free words in front of every region and of every vote slot (0 unless
  // asked for): the host executor writes (receives) a message's header there,
  // in front of a payload that starts a plane, instead of copying the payload.
  int64_t headroom = 0;
  int64_t bytes() const { return 8 * words; }

  // Where plane `plane` of `buf` (vote slot `slot`) starts in a scratch at
  // `base`, as Schedule::planeOffset places planes within a buffer. Inline:
  // executors call it for every chunk of every transfer.
  uint64_t* plane(uint64_t* base, const Schedule& s, Buffer buf, int slot, int plane, int payloadWidth) const {
    const int64_t region = buf == Buffer::kCounter  ? counter
                           : buf == Buffer::kResult ? result
                           : buf == Buffer::kVotes  ? votes
                                                    : fields;
    const int64_t slotRoom = buf == Buffer::kVotes ? slot * headroom : 0;
    return base + region + slotRoom + s.planeOffset(buf, slot, plane, payloadWidth);
  }
};

// The regions of s in order (counter, result, votes, fields, fieldPlanes,
// stage), each starting on a multiple of alignWords (>= 1) words, the stage
// region stageWords long; with headroomWords > 0, that many free words in
// front of each region's data and of each vote slot (ScratchLayout::headroom).
ScratchLayout layoutScratch(const Schedule& s, int64_t stageWords, int64_t alignWords, int64_t headroomWords = 0);

}  // namespace algo
}  // namespace signlion
