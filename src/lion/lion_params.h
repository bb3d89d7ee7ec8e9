// The host optimizer's tunables, declared once (docs/PARAMETERS.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/param.h"

namespace signlion {
namespace lion {
constexpr int64_t kDefaultLionChunk = int64_t{1} << 20;
}  // namespace lion
}  // namespace signlion

// Elements per chunk of a host optimizer's pipelined step (distributed_lion.cc).
SIGNLION_PARAM(LionChunk, "LION_CHUNK", ::signlion::lion::kDefaultLionChunk,
               0, int64_t{1} << 40)

namespace signlion {
namespace lion {
// The chunk of the pipelined step: SIGNLION_LION_CHUNK rounded down to whole
// blocks of 64 elements. 0 turns the pipeline off (one all-reduce per step);
// a negative value or one of 1 to 63 is a WARN naming the variable (once per
// value read) and the default. Every rank must use the same value: the ranks'
// collectives would differ in count otherwise, which the host communicator's
// call check reports as an error on every rank. An optimizer reads it once,
// when it is made (Optimizer::chunk_).
size_t lionChunkElements();
}  // namespace lion
}  // namespace signlion
