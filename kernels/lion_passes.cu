// The Lion passes on the GPU (kernels/lion_kernels.h). One grid-stride
// kernel template runs an element operation over [0, count): in packs of 4
// consecutive elements (16-byte fp32, 8-byte fp16/bf16, 4-byte int8 accesses)
// when every buffer is aligned to a pack, then one element at a time for the
// rest. The arithmetic is lion/lion_element.h's; this file only moves bytes.
// Threads and launches come from launch.cuh, so the SIMT emulator runs this
// source on the CPU too (tests/simt/).
#include "kernels/launch.cuh"
#include "kernels/lion_kernels.h"

#include <type_traits>

#include "bits/bitslice.h"
#include "lion/lion_element.h"

namespace signlion {
namespace kernels {
namespace {

constexpr int kPack = 4;

template <class T, int W>
struct alignas(sizeof(T) * W) Lanes {
  T v[W];
};

template <int W, class T>
SIGNLION_DEVICE Lanes<T, W> load(const T* p) {
  return *reinterpret_cast<const Lanes<T, W>*>(p);
}
template <int W, class T>
SIGNLION_DEVICE void store(T* p, const Lanes<T, W>& x) {
  *reinterpret_cast<Lanes<T, W>*>(p) = x;
}

bool packAligned(const void* p, size_t elementBytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (elementBytes * kPack) == 0;
}

// op.apply<W>(i) handles elements [i, i + W). The skip flag and the skipped
// counter are read and written by the kernel, so a step needs no host sync.
template <class Op>
SIGNLION_KERNEL elementwise(Op op, size_t n, bool packed, const float* skip, unsigned long long* skipped) {
  if (skip != nullptr && *skip != 0.0f) {
    if (skipped != nullptr && globalThread() == 0) *skipped += 1ull;
    return;
  }
  size_t tail = 0;
  if (packed) {
    const size_t packs = n / kPack;
    for (size_t p = globalThread(); p < packs; p += threadCount()) op.template apply<kPack>(p * kPack);
    tail = packs * kPack;
  }
  for (size_t i = tail + globalThread(); i < n; i += threadCount()) op.template apply<1>(i);
}

template <class Op>
cudaError_t run(const Op& op, size_t n, bool packed, cudaStream_t stream, const float* skip = nullptr,
                uint64_t* skipped = nullptr) {
  if (n == 0) return cudaSuccess;
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "counter width");
  return launchFor(packed ? n / kPack + n % kPack : n, elementwise<Op>, stream, op, n, packed, skip,
                   reinterpret_cast<unsigned long long*>(skipped));
}

template <class G, class V>
struct InterpolateAndVote {
  const typename G::T* g;
  float divisor;
  float* m;
  V* votes;
  lion::Coefficients k;
  template <int W>
  SIGNLION_DEVICE void apply(size_t i) const {
    const Lanes<typename G::T, W> gl = load<W>(g + i);
    Lanes<float, W> ml = load<W>(m + i);
    Lanes<V, W> vl;
    SIGNLION_UNROLL
    for (int j = 0; j < W; j++) lion::encodeVote(lion::interpolate(G::load(gl.v[j]), divisor, ml.v[j], k), &vl.v[j]);
    store<W>(votes + i, vl);
    store<W>(m + i, ml);
  }
};

template <class P, class U, bool kMaster>
struct ApplyUpdate {
  typename P::T* p;
  float* master;
  const U* u;
  float lr, wd;
  template <int W>
  SIGNLION_DEVICE void apply(size_t i) const {
    const Lanes<U, W> ul = load<W>(u + i);
    Lanes<typename P::T, W> pl;
    if constexpr (kMaster) {
      Lanes<float, W> xl = load<W>(master + i);
      SIGNLION_UNROLL
      for (int j = 0; j < W; j++) {
        xl.v[j] = lion::lionUpdate(xl.v[j], (float)ul.v[j], lr, wd);
        pl.v[j] = P::store(xl.v[j]);
      }
      store<W>(master + i, xl);
    } else {
      pl = load<W>(p + i);
      SIGNLION_UNROLL
      for (int j = 0; j < W; j++) pl.v[j] = P::store(lion::lionUpdate(P::load(pl.v[j]), (float)ul.v[j], lr, wd));
    }
    store<W>(p + i, pl);
  }
};

template <class T>
struct FlagNonFinite {
  const typename T::T* x;
  float* flag;
  template <int W>
  SIGNLION_DEVICE void apply(size_t i) const {
    const Lanes<typename T::T, W> xl = load<W>(x + i);
    bool bad = false;
    SIGNLION_UNROLL
    for (int j = 0; j < W; j++) bad |= !lion::isFinite(T::load(xl.v[j]));
    if (bad) *flag = 1.0f;  // every writer stores the same value
  }
};

template <class T>
struct ToFloat {
  const typename T::T* x;
  float* dst;
  template <int W>
  SIGNLION_DEVICE void apply(size_t i) const {
    const Lanes<typename T::T, W> xl = load<W>(x + i);
    Lanes<float, W> out;
    SIGNLION_UNROLL
    for (int j = 0; j < W; j++) out.v[j] = T::load(xl.v[j]);
    store<W>(dst + i, out);
  }
};

// *x = value (one element): the flag's reset, ordered on the stream like
// everything else.
struct Assign {
  float* x;
  float value;
  template <int W>
  SIGNLION_DEVICE void apply(size_t) const {
    *x = value;
  }
};

struct Divide {
  float* x;
  float divisor;
  template <int W>
  SIGNLION_DEVICE void apply(size_t i) const {
    Lanes<float, W> xl = load<W>(x + i);
    SIGNLION_UNROLL
    for (int j = 0; j < W; j++) xl.v[j] = lion::divRn(xl.v[j], divisor);
    store<W>(x + i, xl);
  }
};

}  // namespace

cudaError_t lionInterpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                                   lion::VoteEncoding encoding, void* votes, size_t count,
                                   const lion::Coefficients& k, const float* skip, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  lion::dispatchFloatType(gradType, [&](auto g) {
    using G = decltype(g);
    const auto* gp = static_cast<const typename G::T*>(grads);
    const bool packed = packAligned(gp, sizeof(*gp)) && packAligned(momentum, 4);
    if (encoding == lion::VoteEncoding::kSignInt8) {
      auto* v = static_cast<int8_t*>(votes);
      err = run(InterpolateAndVote<G, int8_t>{gp, divisor, momentum, v, k}, count, packed && packAligned(v, 1),
                   stream, skip);
    } else {
      auto* v = static_cast<float*>(votes);
      err = run(InterpolateAndVote<G, float>{gp, divisor, momentum, v, k}, count, packed && packAligned(v, 4),
                   stream, skip);
    }
  });
  return err;
}

cudaError_t lionApplyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                            const void* update, size_t count, float lr, float weightDecay, const float* skip,
                            uint64_t* skipped, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  lion::dispatchFloatType(paramType, [&](auto p) {
    using P = decltype(p);
    auto* pp = static_cast<typename P::T*>(params);
    auto withUpdate = [&](auto* u) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(u)>>;
      const bool packed = packAligned(pp, sizeof(*pp)) && packAligned(master, 4) && packAligned(u, sizeof(U));
      if (master != nullptr)
        err = run(ApplyUpdate<P, U, true>{pp, master, u, lr, weightDecay}, count, packed, stream, skip, skipped);
      else
        err = run(ApplyUpdate<P, U, false>{pp, nullptr, u, lr, weightDecay}, count, packed, stream, skip, skipped);
    };
    if (updateType == ncclInt8)
      withUpdate(static_cast<const int8_t*>(update));
    else
      withUpdate(static_cast<const float*>(update));
  });
  return err;
}

cudaError_t lionFlagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag, cudaStream_t stream) {
  cudaError_t err = run(Assign{flag, 0.0f}, 1, false, stream);
  if (err != cudaSuccess) return err;
  lion::dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    err = run(FlagNonFinite<T>{xp, flag}, count, packAligned(xp, sizeof(*xp)), stream);
  });
  return err;
}

cudaError_t lionToFloat(ncclDataType_t type, const void* x, float* dst, size_t count, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  lion::dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    err = run(ToFloat<T>{xp, dst}, count, packAligned(xp, sizeof(*xp)) && packAligned(dst, 4), stream);
  });
  return err;
}

cudaError_t lionDivide(float* x, float divisor, size_t count, cudaStream_t stream) {
  return run(Divide{x, divisor}, count, packAligned(x, 4), stream);
}

}  // namespace kernels
}  // namespace signlion
