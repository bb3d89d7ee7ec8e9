// Inputs of sign_allreduce_perf whose expected outputs are cheap to know.
//
// Element i of rank r for seed s is 0, +m(i) or -m(i), where m(i) in {1,2,3,4}
// depends only on i and s, and the sign and zero masks of each 64-element
// block come from a counter-based hash of (s, r, block). So any rank can
// regenerate every other rank's votes one block at a time (a few hashes per
// block, no buffers), and:
//  - the sign all-reduce (zero votes +1, the communicator's default rule) of
//    element i depends only on how many ranks hold a negative there: its
//    output is one of nranks + 1 values, tabulated once from the library's
//    own reference (signlion::bits::referenceResult);
//  - the sum all-reduce of element i is m(i) * (#positive - #negative): a small
//    integer, exact in fp32 and bf16 whatever the order of additions (up to
//    64 ranks: |sum| <= 256).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"

namespace signlion {
namespace perf {

enum class Reduction { kMajority, kAverage, kSum };

// Writes rank `rank`'s `count` elements of datatype dt for seed `seed`.
void fillInput(void* buf, size_t count, ncclDataType_t dt, int rank, uint64_t seed);

// Elements of `out` (count of dt) that differ, bit for bit, from what the
// reduction of all nranks ranks' fillInput(seed) must give.
// kMajority / kAverage: ncclSignZeroPositive and the tie rule `tie` (ncclSignTieZero,
// the default, keeps exact ties). kSum: dt is ncclFloat32 or ncclBfloat16.
size_t countWrong(const void* out, size_t count, ncclDataType_t dt, Reduction red, int nranks, uint64_t seed,
                  ncclSignTieRule_t tie = ncclSignTieZero);

}  // namespace perf
}  // namespace signlion
