// An event that marks the end of the last work to use a resource shared by
// calls on several streams (a communicator's scratch, an optimizer's state):
// each call waits for it before its work and records it after, so the calls
// run one after another whatever streams they are made on.
//
// A call made while its stream is being captured into a CUDA graph makes the
// wait and the record external event nodes (cudaEventWaitExternal,
// cudaEventRecordExternal): each launch of the graph then waits for whatever
// the event holds (an eager call's work, another graph's launch), and records
// it, so the calls after the launch, on any stream, wait for it. Without the
// flags, a record in a capture only marks a point of the capture for its
// other streams to join, and a wait may only name such a point: a replay
// would neither wait nor be waited for. The flags are invalid outside capture.
#pragma once

#include <cuda_runtime_api.h>

namespace signlion {
namespace nccl {

// Before a call's work on `stream`.
inline cudaError_t waitForLastUse(cudaStream_t stream, cudaEvent_t lastUse, bool capturing) {
  return cudaStreamWaitEvent(stream, lastUse, capturing ? cudaEventWaitExternal : cudaEventWaitDefault);
}

// After a call's work on `stream`.
inline cudaError_t markLastUse(cudaEvent_t lastUse, cudaStream_t stream, bool capturing) {
  return cudaEventRecordWithFlags(lastUse, stream, capturing ? cudaEventRecordExternal : cudaEventRecordDefault);
}

}  // namespace nccl
}  // namespace signlion
