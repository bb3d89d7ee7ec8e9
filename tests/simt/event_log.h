// What the emulated NCCL path and optimizer ask of CUDA events and graph
// capture (nccl_runtime.cc serves the calls). The emulator runs every launch
// at once, so an event orders nothing that is not already done: what a test
// can check is which waits and records are asked for, on which stream and
// event, with which flags. A thread's calls are logged while its eventLog()
// is set, and its streams count as being captured while its capturing() is
// (cudaStreamIsCapturing says so, and the external flags, which CUDA accepts
// in a capture only, are refused otherwise with cudaErrorInvalidValue).
//
// Functions, not extern thread_local variables: under UBSan, GCC checks the
// address of an extern thread_local for null with the flags of the `add`
// that computes it, and the linker relaxes that `add` into a `lea`, which
// sets no flags, so the check reads stale flags and may report a store to a
// null pointer that is not one.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

namespace signlion {
namespace simt {

struct EventOp {
  char kind;  // 'r' record, 'w' wait
  cudaStream_t stream;
  cudaEvent_t event;
  unsigned int flags;  // cudaEventRecord* or cudaEventWait*; a plain cudaEventRecord logs cudaEventRecordDefault
};

// The calling thread's log (null: not logged) and capture switch.
std::vector<EventOp>*& eventLog();
bool& capturing();

}  // namespace simt
}  // namespace signlion
