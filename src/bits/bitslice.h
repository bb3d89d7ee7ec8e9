// Word-level bit-sliced arithmetic, shared by every implementation: W is
// uint64_t on the portable path, a 256-bit vector on AVX2 and uint32_t per
// thread on the GPU. Branch-free in the data; loops run over planes only.
#pragma once

#include <cstdint>

#include "common/hd.h"

// Full unrolling where it keeps a per-plane array in registers on the GPU;
// host compilers get nothing (GCC would warn about an unknown pragma).
#if defined(__CUDA_ARCH__)
#define SIGNLION_UNROLL _Pragma("unroll")
#else
#define SIGNLION_UNROLL
#endif

namespace signlion {
namespace bits {

// One bit-sliced full adder: sum and carry-out of x + y + carry, per bit lane.
template <typename W>
SIGNLION_HD W fullAdd(W x, W y, W& carry) {
  W t = x ^ y;
  W sum = t ^ carry;
  carry = (x & y) | (carry & t);
  return sum;
}

// Compares a counter (plane(p) for p < w, zero above) with the constant t,
// lane by lane: gt = count > t, eq = count == t. `ones` is the all-ones word.
template <typename W, typename PlaneFn>
SIGNLION_HD void compareWithConstant(PlaneFn plane, int w, uint64_t t, W ones, W& gt, W& eq) {
  int top = w;
  while (top < 64 && (t >> top) != 0) top++;
  W zero = ones ^ ones;
  gt = zero;
  eq = ones;
  for (int p = top - 1; p >= 0; p--) {
    W x = p < w ? plane(p) : zero;
    if ((t >> p) & 1) {
      eq = eq & x;
    } else {
      gt = gt | (eq & x);
      eq = eq & ~x;
    }
  }
}

// Compares two counters lane by lane: gt = a > b, eq = a == b.
template <typename W, typename PlaneA, typename PlaneB>
SIGNLION_HD void compareCounters(PlaneA a, int wa, PlaneB b, int wb, W ones, W& gt, W& eq) {
  int top = wa > wb ? wa : wb;
  W zero = ones ^ ones;
  gt = zero;
  eq = ones;
  for (int p = top - 1; p >= 0; p--) {
    W x = p < wa ? a(p) : zero;
    W y = p < wb ? b(p) : zero;
    gt = gt | (eq & x & ~y);
    eq = eq & ~(x ^ y);
  }
}

// The comparison of compareCounters made from the lowest plane up, one plane
// pair per call, for counters that are produced plane by plane (the output of
// a ripple adder): start with gt = 0, eq = ones and feed planes 0, 1, ...;
// after plane p, gt and eq compare the counters' low p + 1 bits. A higher
// plane that differs decides; an equal one keeps the verdict of those below.
template <typename W>
SIGNLION_HD void compareStep(W x, W y, W& gt, W& eq) {
  W diff = x ^ y;
  gt = (x & ~y) | (gt & ~diff);
  eq = eq & ~diff;
}

}  // namespace bits
}  // namespace signlion
