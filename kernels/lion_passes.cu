// The Lion passes on the GPU (kernels/lion_kernels.h). One grid-stride
// kernel template runs an element operation over [0, count): in packs of 4
// consecutive elements (16-byte fp32, 8-byte fp16/bf16, 4-byte int8 accesses)
// when every buffer is aligned to a pack, then one element at a time for the
// rest. The arithmetic is lion_element.h's; this file only moves bytes.
#include "kernels/lion_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "lion/lion_element.h"

namespace signlion {
namespace kernels {
namespace {

constexpr int kThreads = 256;
// Enough resident threads for any current GPU (132 SMs x 2048); the grid
// strides over the rest.
constexpr size_t kMaxBlocks = 2048;
constexpr int kPack = 4;

template <class T, int W>
struct alignas(sizeof(T) * W) Lanes {
  T v[W];
};

template <int W, class T>
__device__ __forceinline__ Lanes<T, W> load(const T* p) {
  return *reinterpret_cast<const Lanes<T, W>*>(p);
}
template <int W, class T>
__device__ __forceinline__ void store(T* p, const Lanes<T, W>& x) {
  *reinterpret_cast<Lanes<T, W>*>(p) = x;
}

bool packAligned(const void* p, size_t elementBytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (elementBytes * kPack) == 0;
}

// op.apply<W>(i) handles elements [i, i + W). The skip flag and the skipped
// counter are read and written by the kernel, so a step needs no host sync.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    elementwise(Op op, size_t n, bool packed, const float* skip, unsigned long long* skipped) {
  if (skip != nullptr && *skip != 0.0f) {
    if (skipped != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *skipped += 1ull;
    return;
  }
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t tail = 0;
  if (packed) {
    const size_t packs = n / kPack;
    for (size_t p = first; p < packs; p += stride) op.template apply<kPack>(p * kPack);
    tail = packs * kPack;
  }
  for (size_t i = tail + first; i < n; i += stride) op.template apply<1>(i);
}

template <class Op>
cudaError_t launch(const Op& op, size_t n, bool packed, cudaStream_t stream, const float* skip = nullptr,
                   uint64_t* skipped = nullptr) {
  if (n == 0) return cudaSuccess;
  const size_t units = packed ? n / kPack + n % kPack : n;
  const size_t blocks = std::min(kMaxBlocks, (units + kThreads - 1) / kThreads);
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "counter width");
  elementwise<<<(unsigned)blocks, kThreads, 0, stream>>>(op, n, packed, skip,
                                                          reinterpret_cast<unsigned long long*>(skipped));
  return cudaGetLastError();
}

template <class G, class V>
struct InterpolateAndVote {
  const typename G::T* g;
  float divisor;
  float* m;
  V* votes;
  lion::Coefficients k;
  template <int W>
  __device__ __forceinline__ void apply(size_t i) const {
    const Lanes<typename G::T, W> gl = load<W>(g + i);
    Lanes<float, W> ml = load<W>(m + i);
    Lanes<V, W> vl;
#pragma unroll
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
  __device__ __forceinline__ void apply(size_t i) const {
    const Lanes<U, W> ul = load<W>(u + i);
    Lanes<typename P::T, W> pl;
    if constexpr (kMaster) {
      Lanes<float, W> xl = load<W>(master + i);
#pragma unroll
      for (int j = 0; j < W; j++) {
        xl.v[j] = lion::lionUpdate(xl.v[j], (float)ul.v[j], lr, wd);
        pl.v[j] = P::store(xl.v[j]);
      }
      store<W>(master + i, xl);
    } else {
      pl = load<W>(p + i);
#pragma unroll
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
  __device__ __forceinline__ void apply(size_t i) const {
    const Lanes<typename T::T, W> xl = load<W>(x + i);
    bool bad = false;
#pragma unroll
    for (int j = 0; j < W; j++) bad |= !lion::isFinite(T::load(xl.v[j]));
    if (bad) *flag = 1.0f;  // every writer stores the same value
  }
};

template <class T>
struct ToFloat {
  const typename T::T* x;
  float* dst;
  template <int W>
  __device__ __forceinline__ void apply(size_t i) const {
    const Lanes<typename T::T, W> xl = load<W>(x + i);
    Lanes<float, W> out;
#pragma unroll
    for (int j = 0; j < W; j++) out.v[j] = T::load(xl.v[j]);
    store<W>(dst + i, out);
  }
};

struct Divide {
  float* x;
  float divisor;
  template <int W>
  __device__ __forceinline__ void apply(size_t i) const {
    Lanes<float, W> xl = load<W>(x + i);
#pragma unroll
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
      err = launch(InterpolateAndVote<G, int8_t>{gp, divisor, momentum, v, k}, count, packed && packAligned(v, 1),
                   stream, skip);
    } else {
      auto* v = static_cast<float*>(votes);
      err = launch(InterpolateAndVote<G, float>{gp, divisor, momentum, v, k}, count, packed && packAligned(v, 4),
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
    auto run = [&](auto* u) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(u)>>;
      const bool packed = packAligned(pp, sizeof(*pp)) && packAligned(master, 4) && packAligned(u, sizeof(U));
      if (master != nullptr)
        err = launch(ApplyUpdate<P, U, true>{pp, master, u, lr, weightDecay}, count, packed, stream, skip, skipped);
      else
        err = launch(ApplyUpdate<P, U, false>{pp, nullptr, u, lr, weightDecay}, count, packed, stream, skip, skipped);
    };
    if (updateType == ncclInt8)
      run(static_cast<const int8_t*>(update));
    else
      run(static_cast<const float*>(update));
  });
  return err;
}

cudaError_t lionFlagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag, cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(flag, 0, sizeof(float), stream);
  if (err != cudaSuccess) return err;
  lion::dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    err = launch(FlagNonFinite<T>{xp, flag}, count, packAligned(xp, sizeof(*xp)), stream);
  });
  return err;
}

cudaError_t lionToFloat(ncclDataType_t type, const void* x, float* dst, size_t count, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  lion::dispatchFloatType(type, [&](auto t) {
    using T = decltype(t);
    const auto* xp = static_cast<const typename T::T*>(x);
    err = launch(ToFloat<T>{xp, dst}, count, packAligned(xp, sizeof(*xp)) && packAligned(dst, 4), stream);
  });
  return err;
}

cudaError_t lionDivide(float* x, float divisor, size_t count, cudaStream_t stream) {
  return launch(Divide{x, divisor}, count, packAligned(x, 4), stream);
}

}  // namespace kernels
}  // namespace signlion
