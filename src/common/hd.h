// SIGNLION_HD marks a function compiled for both the CPU and the GPU: the
// element code the CPU paths run is the code the CUDA kernels run, so the CPU
// tests exercise it (bits/bitslice.h, bits/float16.h, lion/lion_element.h).
#pragma once

#if defined(__CUDACC__)
#define SIGNLION_HD __host__ __device__ __forceinline__
#else
#define SIGNLION_HD inline
#endif
