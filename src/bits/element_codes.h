// Per-datatype facts the kernels share: how an element's raw bits say
// positive / negative / zero, and the raw bits of +1 and -1.
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "nccl_sign.h"

namespace signlion {
namespace bits {

// |x| bits of +infinity: anything in (0, inf] is a signed value; 0 is zero and
// anything above inf is NaN, which votes like zero.
constexpr uint32_t kF32AbsInf = 0x7f800000u;
constexpr uint16_t kF16AbsInf = 0x7c00u;
constexpr uint16_t kBf16AbsInf = 0x7f80u;

// Raw bits of +1 and -1 in each datatype (zero is all-zero bits in all).
constexpr uint32_t kF32One = 0x3f800000u, kF32MinusOne = 0xbf800000u;
constexpr uint16_t kF16One = 0x3c00u, kF16MinusOne = 0xbc00u;
constexpr uint16_t kBf16One = 0x3f80u, kBf16MinusOne = 0xbf80u;
constexpr uint8_t kI8One = 0x01u, kI8MinusOne = 0xffu;

// Mask of the first n bits of a word (n in 0..64).
SIGNLION_HD constexpr uint64_t lowBits(unsigned n) { return n >= 64 ? ~0ull : ((1ull << n) - 1); }

}  // namespace bits
}  // namespace signlion
