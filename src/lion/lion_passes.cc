// Both passes are plain loops the compiler vectorizes; without -ffast-math or
// contraction every element is computed exactly as the per-element reference
// (tests/unit/lion_test.cc) writes it.
#include "lion/lion_passes.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "bits/float16.h"

namespace signlion {
namespace lion {
namespace {

// Element access by datatype: load() widens to fp32, store() rounds to
// nearest even.
struct Fp32 {
  using T = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct Fp16 {
  using T = uint16_t;
  static float load(uint16_t x) { return bits::halfToFloat(x); }
  static uint16_t store(float x) { return bits::floatToHalf(x); }
};
struct Bf16 {
  using T = uint16_t;
  static float load(uint16_t x) { return bits::bf16ToFloat(x); }
  static uint16_t store(float x) { return bits::floatToBf16(x); }
};

// Calls f(Fp32{}) etc. for a parameter/gradient datatype.
template <class F>
void dispatch(ncclDataType_t type, F&& f) {
  switch (type) {
    case ncclFloat16: f(Fp16{}); break;
    case ncclBfloat16: f(Bf16{}); break;
    default: f(Fp32{}); break;
  }
}

inline int8_t signOf(float c) { return c > 0.0f ? 1 : c < 0.0f ? -1 : 0; }

template <class G, class V>
void pass1(const typename G::T* g, float divisor, float* m, V* votes, size_t n, Coefficients k) {
  for (size_t i = 0; i < n; i++) {
    float gi = G::load(g[i]) / divisor;
    float c = k.beta1 * m[i] + k.oneMinusBeta1 * gi;
    if constexpr (std::is_same<V, int8_t>::value) {
      votes[i] = signOf(c);
    } else {
      votes[i] = c;
    }
    m[i] = k.beta2 * m[i] + k.oneMinusBeta2 * gi;
  }
}

template <class P, class U>
void pass2(typename P::T* p, float* master, const U* u, size_t n, float lr, float wd) {
  if (master != nullptr) {
    for (size_t i = 0; i < n; i++) {
      float x = master[i];
      x = x - lr * ((float)u[i] + wd * x);
      master[i] = x;
      p[i] = P::store(x);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float x = P::load(p[i]);
      p[i] = P::store(x - lr * ((float)u[i] + wd * x));
    }
  }
}

}  // namespace

void interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                        VoteEncoding encoding, void* votes, size_t count, const Coefficients& k) {
  dispatch(gradType, [&](auto g) {
    using G = decltype(g);
    const auto* gp = static_cast<const typename G::T*>(grads);
    if (encoding == VoteEncoding::kSignInt8)
      pass1<G>(gp, divisor, momentum, static_cast<int8_t*>(votes), count, k);
    else
      pass1<G>(gp, divisor, momentum, static_cast<float*>(votes), count, k);
  });
}

void applyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                 const void* update, size_t count, float lr, float weightDecay) {
  dispatch(paramType, [&](auto p) {
    using P = decltype(p);
    auto* pp = static_cast<typename P::T*>(params);
    if (updateType == ncclInt8)
      pass2<P>(pp, master, static_cast<const int8_t*>(update), count, lr, weightDecay);
    else
      pass2<P>(pp, master, static_cast<const float*>(update), count, lr, weightDecay);
  });
}

bool allFinite(ncclDataType_t type, const void* x, size_t count) {
  bool finite = true;
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    // No early exit: the loop stays branch-free and vectorizes.
    int bad = 0;
    for (size_t i = 0; i < count; i++) bad |= !std::isfinite(T::load(xp[i]));
    finite = bad == 0;
  });
  return finite;
}

void toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) {
  dispatch(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    for (size_t i = 0; i < count; i++) dst[i] = T::load(xp[i]);
  });
}

}  // namespace lion
}  // namespace signlion
