// fp16 and bf16 conversions, bit-exact and portable (no F16C needed): the
// reference, the portable kernels, the tests and the CUDA Lion passes
// (SIGNLION_HD) all round the same way, NaN payloads included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/hd.h"
#include "nccl_sign.h"

namespace signlion {
namespace bits {

SIGNLION_HD uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
SIGNLION_HD float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 -> float (exact).
SIGNLION_HD float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) {  // inf, or a NaN made quiet (as vcvtph2ps and CUDA do)
    return bitsFloat(sign | 0x7f800000 | (man ? 0x400000 : 0) | (man << 13));
  }
  if (exp == 0) {
    if (man == 0) return bitsFloat(sign);
    // Subnormal: value = man * 2^-24, exactly representable in float.
    float f = (float)man * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

// float -> IEEE binary16, round to nearest even (what F16C's vcvtps2ph with
// _MM_FROUND_TO_NEAREST_INT and CUDA's __float2half_rn do).
SIGNLION_HD uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu > 0x7f800000) return sign | 0x7e00 | (uint16_t)((absu >> 13) & 0x3ff);  // nan, keep payload bits
  if (absu >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: inf
  if (absu < 0x38800000) {                        // below fp16's smallest normal: subnormal or zero
    if (absu < 0x33000000) return sign;           // < 2^-25: rounds to zero (2^-25 exactly ties to even = 0)
    uint32_t exp = absu >> 23;
    uint32_t man = (absu & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // so that the result is man * 2^-24 units
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return sign | (uint16_t)half;
  }
  uint32_t r = absu - 0x38000000;  // rebias exponent 127 -> 15
  uint32_t half = r >> 13;
  uint32_t rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return sign | (uint16_t)half;
}

SIGNLION_HD float bf16ToFloat(uint16_t b) { return bitsFloat((uint32_t)b << 16); }

// float -> bfloat16, round to nearest even; NaN stays NaN.
SIGNLION_HD uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

// Writes v as element i of a dt buffer: fp32 as is, fp16/bf16 rounded to
// nearest even, int8 truncated (callers only pass -1, 0, +1 for int8).
inline void storeFloatAs(float v, ncclDataType_t dt, void* dst, size_t i) {
  char* p = static_cast<char*>(dst);
  switch (dt) {
    case ncclFloat32: memcpy(p + 4 * i, &v, 4); break;
    case ncclFloat16: {
      uint16_t h = floatToHalf(v);
      memcpy(p + 2 * i, &h, 2);
      break;
    }
    case ncclBfloat16: {
      uint16_t h = floatToBf16(v);
      memcpy(p + 2 * i, &h, 2);
      break;
    }
    default: p[i] = (char)(int8_t)v; break;
  }
}

}  // namespace bits
}  // namespace signlion
