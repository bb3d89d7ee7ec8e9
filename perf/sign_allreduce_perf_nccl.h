// sign_allreduce_perf --nccl: ncclSignAllReduce on device buffers and NCCL
// communicators, timed next to NCCL's own ncclAllReduce (sum) of the same
// element count in fp32 and in bf16, on the same communicators in the same
// run. Ranks are processes forked by the binary (perf/nccl_ranks.h), rank r
// on GPU r % devices.
#pragma once

#include "sign_allreduce_perf_options.h"

namespace signlion {
namespace perf {

// Runs the GPU mode with o.nThreads ranks and algorithm `algo` (an
// ncclSignAlgo_t); returns the exit code: 0, 1 (a wrong result or a failed
// call), 2 (bad options), 77 (no GPU: the mode cannot run here; a message
// says why).
int runNcclMode(const Options& o, int algo);

}  // namespace perf
}  // namespace signlion
