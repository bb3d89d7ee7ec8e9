// What every kernel file shares: the block size, grid sizing (once per device),
// grid-stride indices, the warp collectives and numeric conversions the
// kernels use, and the launch itself (error returned, nothing synchronized).
//
// The kernels use only what this file provides for threads, warps and
// launches. Compiled with SIGNLION_SIMT_EMULATION (tests/simt/), the same
// names come from the SIMT emulator instead, and the kernels run on the CPU
// under a host compiler.
#pragma once

#include <cuda_runtime_api.h>
#if defined(__CUDACC__) && !defined(SIGNLION_SIMT_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"
#include "kernels/elem_traits.h"

namespace signlion {
namespace kernels {

constexpr unsigned kBlockThreads = 256;
constexpr unsigned kFullWarp = 0xffffffffu;

// Blocks for a grid-stride kernel that has work for `threads` threads: enough
// to fill every SM of the current device once (the SM count and the resident
// threads per SM are read once per device and cached), fewer when there is
// less work, at least one.
cudaError_t gridFor(size_t threads, unsigned* blocks);

// Whether p can be read or written as 16-byte vectors.
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// Calls f(Traits{}) with the ElemTraits of dt (kernels/elem_traits.h);
// cudaErrorInvalidValue when dt is not a vote type.
template <typename F>
cudaError_t withElemTraits(ncclDataType_t dt, F f) {
  switch (dt) {
    case ncclFloat32: return f(F32Traits{});
    case ncclFloat16: return f(F16Traits{});
    case ncclBfloat16: return f(Bf16Traits{});
    case ncclInt8: return f(I8Traits{});
    default: return cudaErrorInvalidValue;
  }
}

// The same for the datatypes an average can be written as (not int8, which
// cannot hold a fraction: bits::checkVoteArgs refuses it).
template <typename F>
cudaError_t withFloatTraits(ncclDataType_t dt, F f) {
  switch (dt) {
    case ncclFloat32: return f(F32Traits{});
    case ncclFloat16: return f(F16Traits{});
    case ncclBfloat16: return f(Bf16Traits{});
    default: return cudaErrorInvalidValue;
  }
}

#if defined(SIGNLION_SIMT_EMULATION)  // tests/simt/emulator.h provides the same names.

#define SIGNLION_KERNEL void
#define SIGNLION_DEVICE inline

template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), unsigned grid, cudaStream_t, Args... args) {
  simt::run(grid, kBlockThreads, [&] { kernel(args...); });
  return cudaSuccess;
}

#elif defined(__CUDACC__)

#define SIGNLION_KERNEL __global__ void __launch_bounds__(::signlion::kernels::kBlockThreads)
#define SIGNLION_DEVICE __device__ __forceinline__

__device__ __forceinline__ unsigned laneId() { return threadIdx.x % 32; }
__device__ __forceinline__ size_t globalThread() { return (size_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t threadCount() { return (size_t)gridDim.x * blockDim.x; }
__device__ __forceinline__ size_t globalWarp() { return globalThread() / 32; }
__device__ __forceinline__ size_t warpCount() { return threadCount() / 32; }

// Warp collectives over the whole warp: every kernel calls them in
// warp-uniform control flow.
__device__ __forceinline__ uint32_t warpBallot(bool pred) { return __ballot_sync(kFullWarp, pred); }
__device__ __forceinline__ uint32_t warpShfl(uint32_t v, int srcLane) { return __shfl_sync(kFullWarp, v, srcLane); }
__device__ __forceinline__ uint32_t warpShflXor(uint32_t v, int laneMask) {
  return __shfl_xor_sync(kFullWarp, v, laneMask);
}

// Conversions of average(), each rounded once to nearest even (IEEE), as the
// CPU's (float)s / (float)n and bits::floatToHalf / floatToBf16 round.
__device__ __forceinline__ float intToFloat(int x) { return __int2float_rn(x); }
__device__ __forceinline__ float divide(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ uint32_t floatRaw(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t halfRaw(float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint32_t bf16Raw(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// kernel<<<grid, kBlockThreads, 0, stream>>>(args...), and the launch error.
template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), unsigned grid, cudaStream_t stream, Args... args) {
  kernel<<<grid, kBlockThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

#endif  // host-only translation units (launch.cc) see the declarations above

#if defined(SIGNLION_SIMT_EMULATION) || defined(__CUDACC__)
// launch() on a grid sized by gridFor(threads).
template <typename... Params, typename... Args>
cudaError_t launchFor(size_t threads, void (*kernel)(Params...), cudaStream_t stream, Args... args) {
  unsigned grid = 0;
  cudaError_t err = gridFor(threads, &grid);
  if (err != cudaSuccess) return err;
  return launch(kernel, grid, stream, args...);
}
#endif

}  // namespace kernels
}  // namespace signlion
