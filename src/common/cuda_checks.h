// CUDACHECK: the CUDA runtime's errors turned into ncclResult_t at the
// boundary, with a WARN quoting CUDA's message. A header of its own, so the
// macro exists in every file that asks for it, whatever it included before
// (checks.h itself stays free of CUDA for host-only builds).
#pragma once

#include <cuda_runtime_api.h>

#include "common/checks.h"

// A CUDA runtime call. cudaGetLastError() clears the sticky error so the next
// call is not blamed for this one.
#define CUDACHECK(call)                                                   \
  do {                                                                    \
    cudaError_t err_ = (call);                                            \
    if (err_ != cudaSuccess) {                                            \
      (void)cudaGetLastError();                                           \
      WARN("Cuda failure %d '%s'", (int)err_, cudaGetErrorString(err_)); \
      return ncclUnhandledCudaError;                                      \
    }                                                                     \
  } while (0)
