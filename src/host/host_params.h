// The host communicator's tunables, declared once (docs/PARAMETERS.md).
#pragma once

#include <algorithm>
#include <cstddef>

#include "common/param.h"

// Payload bytes per message when a transfer is cut into chunks: a received
// chunk is reduced while the next ones are on the wire, and forwarded by the
// next step while the rest of its step is. 512K, not 1M: with 16M-element
// segments halving-doubling's steps are 1-2 MiB, so 1M chunks left nothing
// to overlap (docs/PERFORMANCE_ethernet.md, "Halving-doubling's idle link").
SIGNLION_PARAM(HostChunkBytes, "HOST_CHUNK_BYTES", 512 << 10)
namespace signlion {
namespace host {
// The chunk size the executors use: SIGNLION_HOST_CHUNK_BYTES within
// [64 B, 1 GiB] (ncclNet reports sizes as int; the plugins cap messages
// there), a WARN naming the variable when it had to be clamped.
int64_t hostChunkBytes();
}  // namespace host
}  // namespace signlion

// Elements per segment: longer messages run as several whole all-reduces, so
// scratch memory stays bounded whatever the count.
SIGNLION_PARAM(HostSegment, "HOST_SEGMENT", 32 << 20)
namespace signlion {
namespace host {
// The segment the sign all-reduce runs: SIGNLION_HOST_SEGMENT in whole blocks
// of 64 elements, at least one, so every segment but the last is a multiple of 64.
inline size_t hostSegmentElements() { return (size_t)std::max<int64_t>(64, signlionParamHostSegment()) / 64 * 64; }
}  // namespace host
}  // namespace signlion
