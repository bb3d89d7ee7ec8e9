// Test inputs and expected outputs shared by the unit and multirank tests:
// per-rank vote vectors with zeros, NaN, infinities and denormals mixed in,
// and the reference result of the whole collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl_sign.h"

namespace signlion {
namespace test {

using Bytes = std::vector<uint8_t>;

// Element i of a dt buffer set from v (int8: v's sign and rough magnitude).
void setElem(Bytes& buf, ncclDataType_t dt, size_t i, float v);

// nranks buffers of count random elements of dt, reproducible from seed.
std::vector<Bytes> randomVoteInputs(int nranks, size_t count, ncclDataType_t dt, uint32_t seed);

// What every rank must receive (src/bits/vote_reference.h).
Bytes referenceOutput(const std::vector<Bytes>& inputs, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                      ncclSignZeroRule_t zero, ncclSignTieRule_t tie);

// Index of the first differing byte, or std::string::npos when equal.
size_t firstMismatch(const Bytes& a, const Bytes& b);

}  // namespace test
}  // namespace signlion
