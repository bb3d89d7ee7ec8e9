// A SIMT emulator for the kernels of kernels/: a launch runs every thread of
// the grid as a fiber on the calling CPU thread, block after block, and the
// 32 lanes of a warp meet at every warp collective (ballot, shuffle) as on a
// GPU. So the kernels' own source, compiled by the host compiler with this
// header in front, runs and is tested bit for bit on machines without a GPU.
//
// It checks what a GPU would not report: a collective that not all 32 lanes
// of a warp reach, or that they reach at different calls (divergence), stops
// the process with a message naming the warp. It does not model memory
// timing or races between threads (the kernels have none to model: threads
// share no written word); compute-sanitizer on a GPU covers those.
//
// Include this first, then a kernel file (tests/simt/CMakeLists.txt generates
// one such translation unit per kernels/*.cu).
#pragma once

#define SIGNLION_SIMT_EMULATION 1

#include <cuda_runtime_api.h>  // types (uint4, cudaError_t, cudaStream_t)

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "bits/float16.h"

namespace signlion {
namespace simt {

// Runs body() once per thread of `blocks` x `threadsPerBlock` (a multiple of
// 32), each thread a fiber. Returns when every thread has returned.
void run(unsigned blocks, unsigned threadsPerBlock, const std::function<void()>& body);

// The calling fiber's coordinates (threadIdx.x, blockIdx.x, blockDim.x,
// gridDim.x).
unsigned threadIndex();
unsigned blockIndex();
unsigned blockSize();
unsigned gridSize();

// Warp collectives over all 32 lanes (the kernels use no other mask).
uint32_t ballot(bool pred);
uint32_t shfl(uint32_t v, int srcLane);
uint32_t shflXor(uint32_t v, int laneMask);

}  // namespace simt

namespace kernels {

// What kernels/launch.cuh declares for the GPU, on the emulator.
inline unsigned laneId() { return simt::threadIndex() % 32; }
inline size_t globalThread() { return (size_t)simt::blockIndex() * simt::blockSize() + simt::threadIndex(); }
inline size_t threadCount() { return (size_t)simt::gridSize() * simt::blockSize(); }
inline size_t globalWarp() { return globalThread() / 32; }
inline size_t warpCount() { return threadCount() / 32; }
inline uint32_t warpBallot(bool pred) { return simt::ballot(pred); }
inline uint32_t warpShfl(uint32_t v, int srcLane) { return simt::shfl(v, srcLane); }
inline uint32_t warpShflXor(uint32_t v, int laneMask) { return simt::shflXor(v, laneMask); }

// The host's IEEE arithmetic and the CPU path's conversions: the same
// rounding (to nearest even) as the CUDA intrinsics on the GPU.
inline float intToFloat(int x) { return (float)x; }
inline float divide(float a, float b) { return a / b; }
inline uint32_t floatRaw(float v) { return bits::floatBits(v); }
inline uint32_t halfRaw(float v) { return bits::floatToHalf(v); }
inline uint32_t bf16Raw(float v) { return bits::floatToBf16(v); }

}  // namespace kernels
}  // namespace signlion
