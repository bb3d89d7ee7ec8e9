// Both passes are plain loops over lion_element.h's functions, which the
// compiler inlines and vectorizes; without -ffast-math or contraction
// (-ffp-contract=off, CMakeLists.txt) every element is computed exactly as
// the per-element reference (tests/unit/lion_test.cc) writes it.
#include "lion/lion_passes.h"

namespace signlion {
namespace lion {
namespace {

template <class G, class V>
void pass1(const typename G::T* g, float divisor, float* m, V* votes, size_t n, Coefficients k) {
  for (size_t i = 0; i < n; i++) encodeVote(interpolate(G::load(g[i]), divisor, m[i], k), &votes[i]);
}

template <class P, class U>
void pass2(typename P::T* p, float* master, const U* u, size_t n, float lr, float wd) {
  if (master != nullptr) {
    for (size_t i = 0; i < n; i++) {
      const float x = lionUpdate(master[i], (float)u[i], lr, wd);
      master[i] = x;
      p[i] = P::store(x);
    }
  } else {
    for (size_t i = 0; i < n; i++) p[i] = P::store(lionUpdate(P::load(p[i]), (float)u[i], lr, wd));
  }
}

}  // namespace

void interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                        VoteEncoding encoding, void* votes, size_t count, const Coefficients& k) {
  dispatchFloatType(gradType, [&](auto g) {
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
  dispatchFloatType(paramType, [&](auto p) {
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
  dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    // No early exit: the loop stays branch-free and vectorizes.
    int bad = 0;
    for (size_t i = 0; i < count; i++) bad |= !isFinite(T::load(xp[i]));
    finite = bad == 0;
  });
  return finite;
}

void toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) {
  dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    for (size_t i = 0; i < count; i++) dst[i] = T::load(xp[i]);
  });
}

void divide(float* x, float divisor, size_t count) {
  for (size_t i = 0; i < count; i++) x[i] = divRn(x[i], divisor);
}

}  // namespace lion
}  // namespace signlion
