// Where a lane's elements sit in the bit planes. The planes' uint64 words are
// read on the GPU as uint32 "half-words" (little-endian: element j at bit
// j % 32 of half-word j / 32). A lane that loads a 16-byte vector holds V
// consecutive elements, so 32 / V lanes fill one half-word and a warp's 32
// vectors fill V half-words. Host-device, so the CPU tests check the index
// math against the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bits/bitslice.h"
#include "bits/element_codes.h"

namespace signlion {
namespace kernels {

constexpr int kWarpLanes = 32;

// Lane `lane`'s V elements of a warp-wide run of 32 * V elements: they are
// bits [shift, shift + V) of the run's half-word `word`.
template <int V>
struct LaneSlice {
  static_assert(V >= 1 && V <= 32 && 32 % V == 0, "V must divide 32");
  static constexpr int kLanesPerWord = kWarpLanes / V;
  SIGNLION_HD static int word(int lane) { return lane / kLanesPerWord; }
  SIGNLION_HD static int shift(int lane) { return (lane % kLanesPerWord) * V; }
  SIGNLION_HD static uint32_t mask() { return V == 32 ? ~0u : (1u << V) - 1; }
};

// n bits (n <= 64) of a bit string starting at bit `off` (< 32) of half-word
// lo, continuing into hi (the next half-word; pass lo again when the range
// does not cross). off + n must not exceed 64.
SIGNLION_HD uint64_t bitRange(uint32_t lo, uint32_t hi, unsigned off, unsigned n) {
  uint64_t x = (((uint64_t)hi << 32) | lo) >> off;
  return x & bits::lowBits(n);
}

// Counts of V consecutive elements from `width` bit-sliced planes: bits(q)
// returns plane q's bits of those elements (element k at bit k). A count is
// an int: planes past 31 cannot hold a count of int-sized voters and are not
// read.
template <int V, typename PlaneBits>
SIGNLION_HD void vectorCounts(PlaneBits bits, int width, int (&count)[V]) {
  SIGNLION_UNROLL
  for (int k = 0; k < V; k++) count[k] = 0;
  if (width > 31) width = 31;
  for (int q = 0; q < width; q++) {
    uint32_t b = bits(q);
    SIGNLION_UNROLL
    for (int k = 0; k < V; k++) count[k] |= (int)((b >> k) & 1) << q;
  }
}

// `width` bit-sliced planes read as half-words, plane q at planes + q * stride.
struct PlaneWords {
  const uint32_t* planes;
  int width;
  size_t stride;  // in half-words

  // The planes of a counter laid out as uint64 words (stride in words).
  SIGNLION_HD static PlaneWords of(const uint64_t* words, int width, size_t wordStride) {
    return PlaneWords{reinterpret_cast<const uint32_t*>(words), width, 2 * wordStride};
  }

  // Half-word hw of plane q.
  SIGNLION_HD uint32_t at(int q, size_t hw) const { return planes[(size_t)q * stride + hw]; }

  // The counts of the N elements from e, which share a half-word
  // (e % 32 + N <= 32).
  template <int N>
  SIGNLION_HD void counts(size_t e, int (&c)[N]) const {
    const uint32_t* p = planes + (e >> 5);
    const unsigned off = (unsigned)(e & 31);
    const size_t s = stride;
    vectorCounts<N>([p, off, s](int q) { return p[(size_t)q * s] >> off; }, width, c);
  }
};

}  // namespace kernels
}  // namespace signlion
