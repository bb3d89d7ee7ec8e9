// packFields and fieldsToPlanes: the field-sum format (src/bits/fields.h),
// where votes sit in f-bit integer fields so that ncclAllReduce(sum) adds
// them; kernels/field_layout.h has the index math.
//  - packFields: a warp makes 32 field words (one per lane) from the votes of
//    their 32 * per elements, gathered by per ballots of 32 elements; each
//    lane keeps the one or two ballots its per bits lie in and spreads them.
//  - fieldsToPlanes: a warp makes one half-word of every plane: lane l reads
//    the field of element 32g + l, and one ballot per plane collects bit p of
//    the 32 counts.
// Element reads are one element per lane, coalesced; neither kernel needs the
// source aligned beyond its element size.
#include "bits/fields.h"
#include "kernels/field_layout.h"
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/warp_layout.h"

namespace signlion {
namespace kernels {

namespace {

template <typename E>
SIGNLION_KERNEL packFieldsKernel(const typename E::Raw* __restrict__ src, size_t count, ncclSignZeroRule_t zero,
                                 int fieldBits, uint64_t* __restrict__ out, size_t stride, size_t nwords) {
  const int lane = (int)laneId();
  const int per = 64 / fieldBits;
  const FieldLane mine(lane, per);
  const bool twoPlanes = zero == ncclSignZeroAbstain;
  const size_t groups = (nwords + 31) / 32;
  for (size_t g = globalWarp(); g < groups; g += warpCount()) {
    const size_t first = g * 32 * (size_t)per;  // the group's first element
    uint32_t lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
    for (int r = 0; r < per; r++) {
      if (first + (size_t)r * 32 >= count) break;  // warp-uniform; the rest is zero
      const size_t e = first + (size_t)r * 32 + lane;
      const bool valid = e < count;
      const uint32_t raw = valid ? (uint32_t)src[e] : 0u;
      const bool pos = E::positive(raw), neg = E::negative(raw);
      const uint32_t b0 = warpBallot(firstVotePlane(zero, pos, neg, valid) != 0);
      const uint32_t b1 = twoPlanes ? warpBallot(neg) : 0u;
      if ((unsigned)r == mine.first()) lo0 = b0, lo1 = b1;
      if ((unsigned)r == mine.last()) hi0 = b0, hi1 = b1;
    }
    const size_t w = g * 32 + lane;
    if (w < nwords) {
      out[w] = spreadToFields(bitRange(lo0, hi0, mine.offset(), (unsigned)per), per, fieldBits);
      if (twoPlanes) out[stride + w] = spreadToFields(bitRange(lo1, hi1, mine.offset(), (unsigned)per), per, fieldBits);
    }
  }
}

SIGNLION_KERNEL fieldsToPlanesKernel(const uint64_t* __restrict__ words, int fieldBits, size_t first, size_t n,
                                     uint32_t* __restrict__ planes, int width, size_t stride, size_t nhw) {
  const unsigned lane = laneId();
  const unsigned per = (unsigned)(64 / fieldBits);
  const uint64_t mask = bits::lowBits((unsigned)fieldBits);
  const size_t start = globalWarp(), step = warpCount();
  FieldCursor cursor(first + start * 32, step * 32, per);
  for (size_t hw = start; hw < nhw; hw += step, cursor.advance()) {
    uint64_t v = 0;
    if (hw * 32 + lane < n) {
      size_t w;
      unsigned fld;
      cursor.at(lane, w, fld);
      v = (words[w] >> (fld * (unsigned)fieldBits)) & mask;
    }
    for (int p = 0; p < width; p++) {
      const uint32_t b = warpBallot((v >> p) & 1);
      if ((int)lane == p % 32) planes[p * stride + hw] = b;
    }
  }
}

}  // namespace

cudaError_t packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero, int fieldBits,
                       uint64_t* out, size_t stride, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (fieldBits < 1 || fieldBits > 64 || zero < 0 || zero >= ncclSignNumZeroRules) return cudaErrorInvalidValue;
  const size_t nwords = bits::fieldWordsFor(count, fieldBits);
  const size_t warps = (nwords + 31) / 32;
  return withElemTraits(dt, [&](auto traits) {
    using E = decltype(traits);
    return launchFor(warps * 32, packFieldsKernel<E>, stream, static_cast<const typename E::Raw*>(src), count, zero,
                     fieldBits, out, stride, nwords);
  });
}

cudaError_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                           size_t planeStride, cudaStream_t stream) {
  if (n == 0 || width <= 0) return cudaSuccess;
  if (fieldBits < 1 || fieldBits > 64 || width > 64) return cudaErrorInvalidValue;
  const size_t nhw = 2 * bits::numWords(n);
  return launchFor(nhw * 32, fieldsToPlanesKernel, stream, words, fieldBits, first, n,
                   reinterpret_cast<uint32_t*>(planes), width, 2 * planeStride, nhw);
}

}  // namespace kernels
}  // namespace signlion
