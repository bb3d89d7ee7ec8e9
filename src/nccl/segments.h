// The body of one ncclSignAllReduce between CommContext::beginCall and
// endCall: the message as segments of SIGNLION_NCCL_SEGMENT elements, each a
// whole schedule (the context's cached plan for its size) on the comm's
// scratch, run by the executor through a DeviceBackend on `stream`. Long
// messages so keep the scratch bounded whatever the count.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "algo/schedule.h"
#include "nccl/comm_context.h"
#include "nccl/nccl_symbols.h"

namespace signlion {
namespace nccl {

// count elements of dt from send into recv (send may be recv); the caller
// holds ctx.mu and has checked the arguments.
ncclResult_t runSegments(const NcclApi& api, CommContext& ctx, const algo::OpSpec& spec, const char* send, char* recv,
                         size_t count, ncclDataType_t dt, cudaStream_t stream, bool capturing);

}  // namespace nccl
}  // namespace signlion
