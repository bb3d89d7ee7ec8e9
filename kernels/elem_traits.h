// Per-datatype facts of the GPU kernels, in host-device functions so the CPU
// tests run them too: the raw integer of an element, how many elements a
// 16-byte vector holds, the vote an element's raw bits cast (the same unsigned
// ranges as src/bits/kernels_portable.cc: NaN and +-0 are zero, int8's -128
// is negative) and the raw bits of +1 / -1 in the result.
#pragma once

#include <cstdint>

#include "bits/bitslice.h"
#include "bits/element_codes.h"

namespace signlion {
namespace kernels {

// One datatype. positive(raw) <=> raw - 1 < kPosSpan and negative(raw) <=>
// raw - kNegLo < kNegSpan, in uint32 arithmetic on the zero-extended raw
// bits: for floats (0, +inf] and (-0, -inf] as integers, anything past an
// infinity being NaN; for int8 1..127 and 128..255 (-128..-1).
template <typename RawT, uint32_t kPosSpan, uint32_t kNegLo, uint32_t kNegSpan, RawT kOneBits, RawT kMinusBits>
struct ElemTraits {
  using Raw = RawT;
  static constexpr int kBytes = (int)sizeof(Raw);
  static constexpr int kVec = 16 / kBytes;  // elements per 16-byte vector
  static constexpr Raw kOne = kOneBits;
  static constexpr Raw kMinusOne = kMinusBits;

  SIGNLION_HD static bool positive(uint32_t raw) { return raw - 1u < kPosSpan; }
  SIGNLION_HD static bool negative(uint32_t raw) { return raw - kNegLo < kNegSpan; }

  // Element k of a 16-byte vector read as four little-endian uint32.
  SIGNLION_HD static uint32_t get(const uint32_t (&v)[4], int k) {
    constexpr int perWord = 4 / kBytes;
    constexpr uint32_t mask = kBytes == 4 ? ~0u : (1u << (8 * kBytes)) - 1;
    return (v[k / perWord] >> (8 * kBytes * (k % perWord))) & mask;
  }
  // Sets element k of a vector whose words start at zero.
  SIGNLION_HD static void put(uint32_t (&v)[4], int k, uint32_t raw) {
    constexpr int perWord = 4 / kBytes;
    v[k / perWord] |= raw << (8 * kBytes * (k % perWord));
  }
};

using F32Traits = ElemTraits<uint32_t, bits::kF32AbsInf, 0x80000001u, bits::kF32AbsInf, bits::kF32One,
                             bits::kF32MinusOne>;
using F16Traits = ElemTraits<uint16_t, bits::kF16AbsInf, 0x8001u, bits::kF16AbsInf, bits::kF16One,
                             bits::kF16MinusOne>;
using Bf16Traits = ElemTraits<uint16_t, bits::kBf16AbsInf, 0x8001u, bits::kBf16AbsInf, bits::kBf16One,
                              bits::kBf16MinusOne>;
using I8Traits = ElemTraits<uint8_t, 0x7fu, 0x80u, 0x80u, bits::kI8One, bits::kI8MinusOne>;

// The +1 and -1 masks of V elements of a vector (element k at bit k).
template <typename E>
SIGNLION_HD void voteMasks(const uint32_t (&v)[4], uint32_t& pos, uint32_t& neg) {
  pos = 0;
  neg = 0;
  SIGNLION_UNROLL
  for (int k = 0; k < E::kVec; k++) {
    uint32_t raw = E::get(v, k);
    pos |= (uint32_t)E::positive(raw) << k;
    neg |= (uint32_t)E::negative(raw) << k;
  }
}

// The first vote plane under a zero rule, from the +1 / -1 masks of elements
// of which `valid` are real (bits past count stay zero): ZeroPositive sets
// every real element that is not negative, the others set the positives. The
// second plane (ZeroAbstain only) is the -1 mask itself.
SIGNLION_HD uint32_t firstVotePlane(ncclSignZeroRule_t rule, uint32_t pos, uint32_t neg, uint32_t valid) {
  return rule == ncclSignZeroPositive ? (~neg & valid) : pos;
}

// V result elements from V bits of each result plane: +1 where pos is set,
// else -1 where neg is set, else 0 (unpack's order of precedence).
template <typename E>
SIGNLION_HD void resultVector(uint32_t pos, uint32_t neg, uint32_t (&v)[4]) {
  v[0] = v[1] = v[2] = v[3] = 0;
  SIGNLION_UNROLL
  for (int k = 0; k < E::kVec; k++) {
    uint32_t raw = ((pos >> k) & 1) ? E::kOne : ((neg >> k) & 1) ? E::kMinusOne : 0u;
    E::put(v, k, raw);
  }
}

}  // namespace kernels
}  // namespace signlion
