// Combining N packed vote vectors held in one place: the last step of the
// all-gather algorithm, and the building block of the self-check.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"

namespace signlion {
namespace bits {

// Words of scratch voteLocally needs for nvotes votes over count elements.
size_t localVoteScratchWords(int nvotes, size_t count, ncclSignZeroRule_t zero);

// votes[r] holds rank r's votePlanes(zero) planes (stride numWords(count));
// sums them into bit-sliced counters in `scratch` and writes the majority or
// average of the nvotes voters as count elements of dt into dst.
void voteLocally(const Kernels& k, const uint64_t* const* votes, int nvotes, size_t count, ncclDataType_t dt,
                 ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* scratch, void* dst);

}  // namespace bits
}  // namespace signlion
