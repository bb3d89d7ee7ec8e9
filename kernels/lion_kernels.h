// The two fused passes of a Distributed Lion step on device buffers: the
// CUDA counterparts of src/lion/lion_passes.h, for the optimizer on an NCCL
// communicator (src/lion/nccl_lion_comm.cc). Each element is computed by the
// same SIGNLION_HD functions as on the CPU (src/lion/lion_element.h), so the
// results are identical bit for bit.
//
// Every launcher enqueues its work on `stream` and returns cudaSuccess or the
// launch error (cudaGetLastError after the launch); none synchronizes or
// allocates, so all of them may be captured in a CUDA graph. Zero elements
// launch nothing. Pointers may have any alignment their datatype allows:
// when every buffer of a call is aligned to 4 elements the kernels move 4
// elements per access, otherwise one.
//
// `skip` (device memory, may be null) gates a pass without a host sync: when
// *skip != 0 at the time the kernel runs it changes nothing. `skipped`
// (device memory, may be null) is then incremented once by applyUpdate, so
// the device counts the steps that every rank skipped.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "lion/lion_passes.h"
#include "nccl_sign.h"

namespace signlion {
namespace kernels {

// lion::interpolateAndVote: g = grads[i] / divisor, votes[i] = encoding of
// beta1*m + (1-beta1)*g, momentum[i] = beta2*m + (1-beta2)*g.
cudaError_t lionInterpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                                   lion::VoteEncoding encoding, void* votes, size_t count,
                                   const lion::Coefficients& k, const float* skip, cudaStream_t stream);

// lion::applyUpdate: p = p - lr*(u + weightDecay*p) through master (when not
// null), stored rounded to the parameter type. updateType is int8 or fp32.
cudaError_t lionApplyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                            const void* update, size_t count, float lr, float weightDecay, const float* skip,
                            uint64_t* skipped, cudaStream_t stream);

// *flag = 0.0f, then 1.0f if any of the count elements of x is inf or NaN
// (the device form of lion::allFinite, ready for a sum all-reduce).
cudaError_t lionFlagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag, cudaStream_t stream);

// lion::toFloat: dst[i] = x[i] as fp32.
cudaError_t lionToFloat(ncclDataType_t type, const void* x, float* dst, size_t count, cudaStream_t stream);

// lion::divide: x[i] = x[i] / divisor.
cudaError_t lionDivide(float* x, float divisor, size_t count, cudaStream_t stream);

}  // namespace kernels
}  // namespace signlion
