// The plain reference of the sign all-reduce contract, written for clarity,
// element by element, with no bit tricks. Every implementation (CPU kernels,
// every algorithm, the GPU path) is tested bit for bit against it.
#pragma once

#include <cstddef>
#include <vector>

#include "nccl_sign.h"

namespace signlion {
namespace bits {

// The vote of one element: +1, -1, or 0 when the element is zero (or NaN) and
// zeros abstain. Under ZeroPositive / ZeroNegative a zero votes +1 / -1.
int referenceVote(const void* src, ncclDataType_t dt, size_t index, ncclSignZeroRule_t zero);

// The value written for a result element, as the raw bytes of dt:
//  majority: sum > 0 -> +1, sum < 0 -> -1, sum == 0 -> the tie rule's choice;
//  average:  (float)sum / (float)nranks, rounded to dt (round to nearest even).
void referenceResult(long long sum, int nranks, ncclSignOp_t op, ncclSignTieRule_t tie, ncclDataType_t dt, void* dst,
                     size_t index);

// The whole collective: inputs[r] is rank r's buffer of count elements.
void referenceSignAllReduce(const std::vector<const void*>& inputs, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                            ncclSignZeroRule_t zero, ncclSignTieRule_t tie, void* out);

}  // namespace bits
}  // namespace signlion
