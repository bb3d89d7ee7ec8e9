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
// Variants (kernels/variants.h; variant 0 is the pair above):
//  - packFields 1 thread-word: a thread per field word reads its per
//    elements itself (16-byte vectors when per elements are whole vectors
//    and the source is aligned; several loads in flight per thread) and
//    spreads the vote bits into fields; no ballots.
//  - fieldsToPlanes 1 thread-block: a thread per 64-element block walks its
//    fields in order (a word is read once, when the walk enters it) and sets
//    bit k of up to kPlaneGroup planes per field; every plane word is stored
//    whole, coalesced (variant 0 stores one half-word per plane and ballot,
//    from one lane).
//  - fieldsToPlanes 2 thread-block-pow2: for f = 1, 2, 4, 8 (f divides 64, so a
//    block's fields are exactly f whole words) a thread reads its f words at
//    once and gathers bit p of every field with log2(64 / f) shift-and-mask
//    steps per word; other widths as variant 1.
//  - fieldsToPlanes 3 thread-block-gather: the same for any f up to 8 (f need
//    not divide 64, e.g. f = 3 for N = 4..7): a thread reads the up to 9
//    words of its block at once and gathers each word's bits with
//    shift-and-mask steps whose masks it makes once; wider fields as
//    variant 1.
#include "bits/fields.h"
#include "kernels/field_layout.h"
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"
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

template <typename E>
SIGNLION_KERNEL packFieldsThreadKernel(const typename E::Raw* __restrict__ src, size_t count, ncclSignZeroRule_t zero,
                                       int fieldBits, uint64_t* __restrict__ out, size_t stride, size_t nwords,
                                       bool vec) {
  constexpr int V = E::kVec;
  const unsigned per = (unsigned)(64 / fieldBits);
  const bool twoPlanes = zero == ncclSignZeroAbstain;
  for (size_t w = globalThread(); w < nwords; w += threadCount()) {
    const size_t first = w * per;  // < count: w < nwords
    const unsigned n = count - first < per ? (unsigned)(count - first) : per;
    uint64_t b0 = 0, b1 = 0;  // the votes, element first + i at bit i
    if (vec && n == per) {
      // per * sizeof(element) is a multiple of 16 (the launcher's vec): whole vectors.
      const uint4* x4 = reinterpret_cast<const uint4*>(src + first);
      for (unsigned k = 0; k < per / V; k++) {
        const uint4 x = x4[k];
        const uint32_t v[4] = {x.x, x.y, x.z, x.w};
        uint32_t pos, neg;
        voteMasks<E>(v, pos, neg);
        b0 |= (uint64_t)firstVotePlane(zero, pos, neg, LaneSlice<V>::mask()) << (k * V);
        b1 |= (uint64_t)neg << (k * V);
      }
    } else {
      for (unsigned i = 0; i < n; i++) {
        const uint32_t raw = (uint32_t)src[first + i];
        const uint32_t pos = E::positive(raw), neg = E::negative(raw);
        b0 |= (uint64_t)firstVotePlane(zero, pos, neg, 1u) << i;
        b1 |= (uint64_t)neg << i;
      }
    }
    out[w] = spreadToFields(b0, (int)per, fieldBits);
    if (twoPlanes) out[stride + w] = spreadToFields(b1, (int)per, fieldBits);
  }
}

// Planes fieldsToPlanesThreadKernel sets per walk over a block's fields.
constexpr int kPlaneGroup = 4;

SIGNLION_KERNEL fieldsToPlanesThreadKernel(const uint64_t* __restrict__ words, int fieldBits, size_t first, size_t n,
                                           uint64_t* __restrict__ planes, int width, size_t stride, size_t nblocks) {
  const unsigned f = (unsigned)fieldBits, per = 64 / f;
  const uint64_t mask = bits::lowBits(f);
  const size_t start = globalThread(), step = threadCount();
  FieldCursor cursor(first + start * 64, step * 64, per);
  for (size_t i = start; i < nblocks; i += step, cursor.advance()) {
    const unsigned len = n - i * 64 < 64 ? (unsigned)(n - i * 64) : 64u;  // fields of block i
    for (int p0 = 0; p0 < width; p0 += kPlaneGroup) {
      uint64_t out[kPlaneGroup];
      SIGNLION_UNROLL
      for (int q = 0; q < kPlaneGroup; q++) out[q] = 0;
      size_t w = cursor.word;
      unsigned fld = cursor.field;
      uint64_t cur = words[w] >> (fld * f);  // the walk's field at the low bits
      for (unsigned k = 0; k < len; k++) {
        const uint64_t v = (cur & mask) >> p0;
        SIGNLION_UNROLL
        for (int q = 0; q < kPlaneGroup; q++) out[q] |= ((v >> q) & 1) << k;
        if (++fld == per) {
          fld = 0;
          if (k + 1 < len) cur = words[++w];  // never past the last field
        } else {
          cur >>= f;  // f < 64 here: a 64-bit field ends its word
        }
      }
      SIGNLION_UNROLL
      for (int q = 0; q < kPlaneGroup; q++) {
        if (p0 + q < width) planes[(size_t)(p0 + q) * stride + i] = out[q];
      }
    }
  }
}

// Bits at positions j * F of x (all others zero) moved to bit j, j < 64 / F:
// each step merges neighbouring groups of g bits (g = 1, 2, 4, ...).
template <int F>
SIGNLION_DEVICE uint64_t gatherFieldBits(uint64_t x) {
  SIGNLION_UNROLL
  for (int g = 1; g < 64 / F; g *= 2) {
    uint64_t keep = 0;  // groups of 2g bits every 2gF bits
    SIGNLION_UNROLL
    for (int at = 0; at < 64; at += 2 * g * F) keep |= bits::lowBits((unsigned)(2 * g)) << at;
    x = (x | (x >> (g * F - g))) & keep;
  }
  return x;
}

// Bit 0 of every F-bit field.
template <int F>
SIGNLION_DEVICE uint64_t fieldLowBits() {
  uint64_t m = 0;
  SIGNLION_UNROLL
  for (int at = 0; at < 64; at += F) m |= 1ull << at;
  return m;
}

template <int F>
SIGNLION_KERNEL fieldsToPlanesPow2Kernel(const uint64_t* __restrict__ words, size_t first, size_t n,
                                         uint64_t* __restrict__ planes, int width, size_t stride, size_t nblocks,
                                         bool vec) {
  constexpr int kPer = 64 / F;
  const uint64_t* base = words + first / kPer;  // first is a multiple of 64: block i is words [iF, iF + F)
  for (size_t i = globalThread(); i < nblocks; i += threadCount()) {
    const size_t nf = n - i * 64 < 64 ? n - i * 64 : 64;  // fields of block i
    const size_t nw = (nf + kPer - 1) / kPer;             // words holding them
    uint64_t w[F];
    if (vec && nw == F && F >= 2) {
      SIGNLION_UNROLL
      for (int j = 0; j < F / 2; j++) {
        const uint4 x = reinterpret_cast<const uint4*>(base + i * F)[j];
        w[2 * j] = (uint64_t)x.x | (uint64_t)x.y << 32;
        w[2 * j + 1] = (uint64_t)x.z | (uint64_t)x.w << 32;
      }
    } else {
      SIGNLION_UNROLL
      for (int j = 0; j < F; j++) w[j] = (size_t)j < nw ? base[i * F + j] : 0;
    }
    const uint64_t valid = bits::lowBits((unsigned)nf);  // fields past n are not counts
    SIGNLION_UNROLL
    for (int p = 0; p < F; p++) {
      if (p >= width) break;
      uint64_t r = 0;
      SIGNLION_UNROLL
      for (int j = 0; j < F; j++) r |= gatherFieldBits<F>((w[j] >> p) & fieldLowBits<F>()) << (j * kPer);
      planes[(size_t)p * stride + i] = r & valid;
    }
    for (int p = F; p < width; p++) planes[(size_t)p * stride + i] = 0;
  }
}

// The largest field width the gather variant takes: a block's 64 fields then
// lie in at most kGatherWords words (64 / per + 1 with per >= 8).
constexpr int kGatherMaxBits = 8;
constexpr int kGatherWords = 64 / (64 / kGatherMaxBits) + 1;

// The shift-and-mask steps that move bit 0 of each of `per` f-bit fields of a
// word to bits [0, per): step s merges neighbouring groups of 2^s bits, which
// lie 2^s * f apart, into groups of 2^(s + 1) (masks keep[s]); f need not
// divide 64. Made once per thread.
struct FieldGather {
  static constexpr int kSteps = 6;  // per <= 64 = 2^6
  uint64_t low;                     // bit 0 of every field
  uint64_t keep[kSteps];
  unsigned f, per;
  SIGNLION_DEVICE FieldGather(unsigned fieldBits, unsigned perWord) : low(0), f(fieldBits), per(perWord) {
    for (unsigned j = 0; j < per; j++) low |= 1ull << (j * f);
    SIGNLION_UNROLL
    for (int s = 0; s < kSteps; s++) {
      const unsigned g = 1u << s;
      keep[s] = 0;
      if (g < per) {
        for (unsigned at = 0; at < 64; at += 2 * g * f) keep[s] |= bits::lowBits(2 * g) << at;
      }
    }
  }
  // Bit p of every field of w, field j at bit j.
  SIGNLION_DEVICE uint64_t operator()(uint64_t w, unsigned p) const {
    uint64_t x = (w >> p) & low;
    SIGNLION_UNROLL
    for (int s = 0; s < kSteps; s++) {
      const unsigned g = 1u << s;
      if (g >= per) break;
      x = (x | (x >> (g * f - g))) & keep[s];
    }
    return x;
  }
};

// fieldsToPlanes for f <= kGatherMaxBits, any f: a thread per 64-element
// block loads the words its fields lie in (at most kGatherWords, all loads in
// flight at once), gathers bit p of each word's fields with FieldGather and
// joins the words' bits into the block's plane word.
SIGNLION_KERNEL fieldsToPlanesGatherKernel(const uint64_t* __restrict__ words, int fieldBits, size_t first, size_t n,
                                           uint64_t* __restrict__ planes, int width, size_t stride, size_t nblocks) {
  const unsigned f = (unsigned)fieldBits, per = 64 / f;
  const FieldGather gather(f, per);
  const size_t start = globalThread(), step = threadCount();
  FieldCursor cursor(first + start * 64, step * 64, per);
  for (size_t i = start; i < nblocks; i += step, cursor.advance()) {
    const unsigned nf = n - i * 64 < 64 ? (unsigned)(n - i * 64) : 64u;  // fields of block i
    const unsigned skip = cursor.field;                                 // fields of the first word before the block's
    const unsigned nw = (skip + nf + per - 1) / per;                     // words holding the block's fields
    uint64_t w[kGatherWords];
    SIGNLION_UNROLL
    for (int j = 0; j < kGatherWords; j++) w[j] = (unsigned)j < nw ? words[cursor.word + j] : 0;
    const uint64_t valid = bits::lowBits(nf);
    for (int p = 0; p < width; p++) {
      uint64_t out = 0;
      if ((unsigned)p < f) {
        out = gather(w[0], (unsigned)p) >> skip;
        unsigned at = per - skip;  // the block's bits made so far
        SIGNLION_UNROLL
        for (int j = 1; j < kGatherWords; j++) {
          if ((unsigned)j >= nw || at >= 64) break;
          out |= gather(w[j], (unsigned)p) << at;
          at += per;
        }
      }
      planes[(size_t)p * stride + i] = out & valid;
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
    const typename E::Raw* elems = static_cast<const typename E::Raw*>(src);
    if (currentVariant(Tuned::kPackFields) == 1) {
      const bool vec = aligned16(src) && (size_t)(64 / fieldBits) * sizeof(typename E::Raw) % 16 == 0;
      return launchFor(nwords, packFieldsThreadKernel<E>, stream, elems, count, zero, fieldBits, out, stride, nwords,
                       vec);
    }
    return launchFor(warps * 32, packFieldsKernel<E>, stream, elems, count, zero, fieldBits, out, stride, nwords);
  });
}

cudaError_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                           size_t planeStride, cudaStream_t stream) {
  if (n == 0 || width <= 0) return cudaSuccess;
  if (fieldBits < 1 || fieldBits > 64 || width > 64) return cudaErrorInvalidValue;
  const size_t nblocks = bits::numWords(n);
  const int variant = currentVariant(Tuned::kFieldsToPlanes);
  if (variant == 2) {
    const bool vec = aligned16(words + first / (size_t)(64 / fieldBits));
    switch (fieldBits) {
      case 1: return launchFor(nblocks, fieldsToPlanesPow2Kernel<1>, stream, words, first, n, planes, width, planeStride, nblocks, vec);
      case 2: return launchFor(nblocks, fieldsToPlanesPow2Kernel<2>, stream, words, first, n, planes, width, planeStride, nblocks, vec);
      case 4: return launchFor(nblocks, fieldsToPlanesPow2Kernel<4>, stream, words, first, n, planes, width, planeStride, nblocks, vec);
      case 8: return launchFor(nblocks, fieldsToPlanesPow2Kernel<8>, stream, words, first, n, planes, width, planeStride, nblocks, vec);
      default: break;
    }
  }
  if (variant == 3 && fieldBits <= kGatherMaxBits) {
    return launchFor(nblocks, fieldsToPlanesGatherKernel, stream, words, fieldBits, first, n, planes, width,
                     planeStride, nblocks);
  }
  if (variant >= 1) {
    return launchFor(nblocks, fieldsToPlanesThreadKernel, stream, words, fieldBits, first, n, planes, width,
                     planeStride, nblocks);
  }
  const size_t nhw = 2 * nblocks;
  return launchFor(nhw * 32, fieldsToPlanesKernel, stream, words, fieldBits, first, n,
                   reinterpret_cast<uint32_t*>(planes), width, 2 * planeStride, nhw);
}

}  // namespace kernels
}  // namespace signlion
