// The two fused per-element passes of a Distributed Lion step on host
// buffers (docs/LION.md). They know nothing of ranks: the optimizer calls the
// collective between them. The element arithmetic is lion_element.h's, shared
// with the CUDA passes (kernels/lion_kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lion/lion_element.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

// What pass 1 writes for each element's c = beta1*m + (1-beta1)*g.
enum class VoteEncoding {
  kSignInt8,  // int8 sign(c): +1, -1, and 0 for +-0 and NaN (the sign all-reduce's zero rule applies to 0)
  kFloat32,   // c itself, fp32 (for ncclSignAverage, whose result is fp32)
};

// Pass 1. For each i: g = grads[i] / divisor (in fp32), c as above into
// votes[i], then momentum[i] = beta2*m + (1-beta2)*g. grads are fp32, fp16 or
// bf16.
void interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                        VoteEncoding encoding, void* votes, size_t count, const Coefficients& k);

// Pass 2. For each i: p = master ? master[i] : params[i] (in fp32);
// p = p - lr*(u + weightDecay*p) with u = update[i] (int8 or fp32); the result
// goes to master[i] (when given) and, rounded to the parameter type, params[i].
void applyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                 const void* update, size_t count, float lr, float weightDecay);

// True when every element of x is finite (not inf, not NaN).
bool allFinite(ncclDataType_t type, const void* x, size_t count);

// dst[i] = x[i] as fp32 (exact for fp16 and bf16).
void toFloat(ncclDataType_t type, const void* x, float* dst, size_t count);

// x[i] = x[i] / divisor (the mean of a sum all-reduce).
void divide(float* x, float divisor, size_t count);

}  // namespace lion
}  // namespace signlion
