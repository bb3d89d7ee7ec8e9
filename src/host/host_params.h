// The host communicator's tunables, declared once (docs/PARAMETERS.md).
#pragma once

#include "common/param.h"

// Payload bytes per message when a transfer is cut into chunks: a received
// chunk is reduced while the next ones are on the wire.
SIGNLION_PARAM(HostChunkBytes, "HOST_CHUNK_BYTES", 1 << 20)
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
SIGNLION_PARAM(HostSegment, "HOST_SEGMENT", 16 << 20)
