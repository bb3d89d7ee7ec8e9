// The field-sum format (src/bits/fields.h) seen from a warp: element e's vote
// is field e % per of uint64 word e / per, f bits wide, per = 64 / f. The GPU
// kernels pack 32 field words per warp (one per lane) and read fields 32
// elements at a time; this is their index math and bit spreading, host-device
// so the CPU tests check it against bits::packFields / bits::fieldsToPlanes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bits/bitslice.h"

namespace signlion {
namespace kernels {

// Lane `lane` of a warp that packs 32 field words from the votes of 32 * per
// consecutive elements, gathered 32 at a time by ballots (ballot g covers the
// elements [32g, 32g + 32) of the group): the lane's word takes the per vote
// bits starting at bit lane * per of that bit string, which lie in ballots
// first() and last() (equal, or adjacent) from bit offset() of first().
struct FieldLane {
  unsigned start;  // lane * per
  unsigned per;
  SIGNLION_HD FieldLane(int lane, int perWord) : start((unsigned)lane * (unsigned)perWord), per((unsigned)perWord) {}
  SIGNLION_HD unsigned first() const { return start / 32; }
  SIGNLION_HD unsigned last() const { return (start + per - 1) / 32; }
  SIGNLION_HD unsigned offset() const { return start % 32; }
};

// The votes of per elements (bit i = element i) spread into fields of f bits:
// bit i moves to bit i * f. per * f <= 64.
SIGNLION_HD uint64_t spreadToFields(uint64_t votes, int per, int f) {
  uint64_t word = 0;
  for (int i = 0; i < per; i++) word |= ((votes >> i) & 1) << (i * f);
  return word;
}

// The word and field of an element, advanced by a fixed stride without a
// 64-bit division per step (one division at the start, as a GPU thread
// walking a grid-stride loop needs).
struct FieldCursor {
  size_t word;    // element / per
  unsigned field; // element % per
  size_t stepWords;
  unsigned stepFields;
  unsigned per;
  SIGNLION_HD FieldCursor(size_t element, size_t stride, unsigned perWord)
      : word(element / perWord),
        field((unsigned)(element % perWord)),
        stepWords(stride / perWord),
        stepFields((unsigned)(stride % perWord)),
        per(perWord) {}
  SIGNLION_HD void advance() {
    word += stepWords;
    field += stepFields;
    if (field >= per) {
      field -= per;
      word++;
    }
  }
  // Word and field of the element `lane` (< 64) places further on.
  SIGNLION_HD void at(unsigned lane, size_t& w, unsigned& fld) const {
    unsigned r = field + lane;
    w = word + r / per;
    fld = r % per;
  }
};

}  // namespace kernels
}  // namespace signlion
