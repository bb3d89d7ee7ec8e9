// The per-element arithmetic of a Lion step, one definition for both memory
// spaces: the CPU passes (lion_passes.cc) loop over these functions and the
// CUDA passes (kernels/lion_passes.cu) call the same ones per thread, so the
// CPU unit tests exercise the element code the GPU runs.
//
// Every operation is rounded once, to nearest even, in the order written
// (nccl_sign.h, "Distributed Lion"). On the GPU that takes the _rn
// intrinsics: nvcc would otherwise contract a*b + c into one FMA (one
// rounding instead of two). On the CPU the build passes -ffp-contract=off
// (GCC contracts by default in C++ wherever FMA exists: aarch64, -march=native).
#pragma once

#include <cstdint>

#include "bits/float16.h"
#include "common/hd.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

SIGNLION_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SIGNLION_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SIGNLION_HD float subRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SIGNLION_HD float divRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The fp32 factors of both interpolations; 1 - beta is rounded once in fp32.
struct Coefficients {
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2;
  static Coefficients of(float beta1, float beta2) { return {beta1, 1.0f - beta1, beta2, 1.0f - beta2}; }
};

// Element access by datatype: load() widens to fp32 (exact), store() rounds
// to nearest even.
struct Fp32 {
  using T = float;
  static SIGNLION_HD float load(float x) { return x; }
  static SIGNLION_HD float store(float x) { return x; }
};
struct Fp16 {
  using T = uint16_t;
  static SIGNLION_HD float load(uint16_t x) { return bits::halfToFloat(x); }
  static SIGNLION_HD uint16_t store(float x) { return bits::floatToHalf(x); }
};
struct Bf16 {
  using T = uint16_t;
  static SIGNLION_HD float load(uint16_t x) { return bits::bf16ToFloat(x); }
  static SIGNLION_HD uint16_t store(float x) { return bits::floatToBf16(x); }
};

// Calls f(Fp32{}), f(Fp16{}) or f(Bf16{}) for a parameter/gradient datatype
// (host code: the passes' launchers and loops pick their instantiation here).
template <class F>
void dispatchFloatType(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclFloat16: f(Fp16{}); break;
    case ncclBfloat16: f(Bf16{}); break;
    default: f(Fp32{}); break;
  }
}

// Lion's sign: +1, -1, and 0 for +-0 and NaN (both comparisons false).
// Written without branches: GCC left pass 1's loop unvectorized ("control
// flow in loop") over the nested conditional, which made the int8-vote
// passes (majority vote, local) 5x slower than the fp32 ones (average).
SIGNLION_HD int8_t signOf(float c) { return (int8_t)((int)(c > 0.0f) - (int)(c < 0.0f)); }

// Not inf, not NaN (an exponent field of all ones), from the bits alone.
SIGNLION_HD bool isFinite(float x) { return (bits::floatBits(x) & 0x7f800000u) != 0x7f800000u; }

// What pass 1 writes as the vote of c: the int8 sign, or c itself (fp32).
SIGNLION_HD void encodeVote(float c, int8_t* vote) { *vote = signOf(c); }
SIGNLION_HD void encodeVote(float c, float* vote) { *vote = c; }

// Pass 1 for one element: g = grad / divisor, c = beta1*m + (1-beta1)*g
// (returned), m <- beta2*m + (1-beta2)*g.
SIGNLION_HD float interpolate(float grad, float divisor, float& m, const Coefficients& k) {
  const float g = divRn(grad, divisor);
  const float c = addRn(mulRn(k.beta1, m), mulRn(k.oneMinusBeta1, g));
  m = addRn(mulRn(k.beta2, m), mulRn(k.oneMinusBeta2, g));
  return c;
}

// Pass 2 for one element: p - lr*(u + weightDecay*p).
SIGNLION_HD float lionUpdate(float p, float u, float lr, float weightDecay) {
  return subRn(p, mulRn(lr, addRn(u, mulRn(weightDecay, p))));
}

}  // namespace lion
}  // namespace signlion
