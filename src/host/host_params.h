// The host communicator's tunables, declared once (docs/PARAMETERS.md).
#pragma once

#include <cstddef>

#include "common/param.h"

// Payload bytes per message when a transfer is cut into chunks: a received
// chunk is reduced while the next ones are on the wire, and forwarded by the
// next step while the rest of its step is. 0 (the default): sized to the
// link, see hostChunkBytes.
SIGNLION_PARAM(HostChunkBytes, "HOST_CHUNK_BYTES", 0, 0, int64_t{1} << 30)
namespace signlion {
namespace host {
// The chunk size the executors use: SIGNLION_HOST_CHUNK_BYTES within
// [64 B, 1 GiB] (ncclNet reports sizes as int; the plugins cap messages
// there), a WARN naming the variable when it had to be clamped. Unset (0):
// about a millisecond of the link, SIGNLION_COST_BETA_MBPS x 1000 bytes, as a
// power of two in [128K, 512K]: 512K at the default 1250 MB/s (10 Gbit/s),
// 128K at 1 Gbit/s. A chunk is what the next step waits for: on a slow link
// 512K chunks left halving-doubling's steps of a 16 MiB message in one
// piece each, run one after the other; on a fast one the ranks are CPU-bound
// and smaller chunks only add messages (docs/PERFORMANCE.md, "The host executor").
// Ranks compare the result at init (SIGNLION_HOST_CHUNK_BYTES).
int64_t hostChunkBytes();
// The chunk for a link of betaMBps (MB/s) when SIGNLION_HOST_CHUNK_BYTES is
// unset, as above: what a communicator uses once it has learned its link's
// rate (link_rate.h).
int64_t hostChunkBytesForBeta(double betaMBps);
}  // namespace host
}  // namespace signlion

// Elements per segment: longer messages run as several whole all-reduces, so
// scratch memory stays bounded whatever the count.
namespace signlion {
namespace host {
constexpr int64_t kDefaultHostSegment = int64_t{32} << 20;
}  // namespace host
}  // namespace signlion
SIGNLION_PARAM(HostSegment, "HOST_SEGMENT", ::signlion::host::kDefaultHostSegment, 64,
               int64_t{1} << 40)
namespace signlion {
namespace host {
// The segment the sign all-reduce runs: SIGNLION_HOST_SEGMENT rounded down to
// whole blocks of 64 elements, so every segment but the last is a multiple of
// 64. Less than one block (0, negative) is no segment: a WARN naming the
// variable (once per value read), and the default. Ranks compare the result
// at init.
size_t hostSegmentElements();
}  // namespace host
}  // namespace signlion

// 1 (the default): while a segment waits on the wire, the executor packs the
// next segment's votes (ScheduleExecutor, Segments), whose first messages
// then need no pack, only a copy; 0: each segment packs its own. Local:
// ranks may differ (nothing on the wire changes).
SIGNLION_PARAM(HostPackAhead, "HOST_PACK_AHEAD", 1, 0, 1)
