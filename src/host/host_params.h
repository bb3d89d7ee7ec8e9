// The host communicator's tunables, declared once (docs/PARAMETERS.md).
#pragma once

#include "common/param.h"

// Payload bytes per message when a transfer is cut into chunks: a received
// chunk is reduced while the next ones are on the wire.
SIGNLION_PARAM(HostChunkBytes, "HOST_CHUNK_BYTES", 1 << 20)
// Elements per segment: longer messages run as several whole all-reduces, so
// scratch memory stays bounded whatever the count.
SIGNLION_PARAM(HostSegment, "HOST_SEGMENT", 16 << 20)
