// What signlion keeps per NCCL communicator (ncclComm_t): its shape, the
// config of ncclSignCommSetConfig, the schedules and plans of recent calls,
// its node grouping (node_groups.h: the topology and NCCL's node comm), and
// device resources (scratch, a side stream, events). Made by the first
// call that names the communicator; freed by ncclSignCommRelease, since NCCL
// has no destruction hook to tie it to.
//
// Scratch is one allocation that only grows (geometrically, so a warm-up
// over increasing sizes allocates O(log) times, and at most to twice the
// largest need, which segments bound) until release. It never grows while
// the user's stream is being captured: a graph keeps the addresses it was
// captured with. For the same reason scratch that a capture used is not
// freed when it grows, only retired until release.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "algo/cost_model.h"
#include "algo/schedule_cache.h"
#include "common/call_signature.h"
#include "common/config.h"
#include "nccl/nccl_plan.h"
#include "nccl/nccl_symbols.h"
#include "nccl/node_groups.h"

namespace signlion {
namespace nccl {

// What NCCL says of a communicator.
struct CommShape {
  int nranks = 0;
  int rank = 0;
  int cudaDev = -1;
};

// The comm's shape, and that NCCL knows it and it holds no error.
// Errors (each with a WARN naming `caller`): ncclInvalidArgument when NCCL
// rejects comm; the comm's pending asynchronous error; ncclInvalidUsage when
// a nonblocking comm is still being initialized.
ncclResult_t queryComm(const NcclApi& api, ncclComm_t comm, const char* caller, CommShape* out);

class CommContext {
 public:
  CommContext(ncclComm_t comm, const CommShape& shape, const ResolvedConfig& config);
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;

  const ncclComm_t comm;
  const CommShape shape;
  // Calls on the communicator hold it while they enqueue; so do
  // ncclSignCommSetConfig and ncclSignCommRelease.
  std::mutex mu;
  ResolvedConfig config;
  // SIGNLION_CHECK: calls made on the comm (their sequence numbers) and the
  // host side of the signature table (call_agreement.h).
  uint64_t calls = 0;
  std::vector<CallSignature> checkTable;
  // Which ranks share a node (node_groups.h); learned by learnNodes.
  NodeGroups nodes;

  // The schedule and plan of one segment of nblocks blocks: over the node
  // topology and with the node cost model (nccl_params.h) when the comm is
  // grouped into nodes, else flat.
  ncclResult_t planFor(int64_t nblocks, const algo::OpSpec& spec, const algo::ScheduleCache<Plan>::Entry** out);

  // Device side; the comm's device must be current.
  // Opens a call on `stream`: makes the side stream and events on first use,
  // tells whether the stream is being captured, and orders the call after
  // the previous one, whatever stream that ran on: both use the same
  // scratch. In a capture the order holds for each replay (an external
  // event wait node): after whatever call, eager or replayed, ended last
  // when the graph is launched.
  ncclResult_t beginCall(cudaStream_t stream, bool* capturing);
  // Scratch of at least `bytes` (see above).
  // Errors: ncclInvalidUsage when it would grow during capture.
  ncclResult_t scratch(size_t bytes, cudaStream_t stream, bool capturing, uint64_t** out);
  // The first call's node exchange (learnNodeGroups with config.hostId),
  // once per context; later calls return at once. Waits for `stream`.
  // Errors: ncclInvalidUsage (WARN) when it has not run yet and `stream` is
  // being captured; learnNodeGroups's.
  ncclResult_t learnNodes(const NcclApi& api, cudaStream_t stream, bool capturing);
  // Closes the call: marks where its work ends, for the next call to wait
  // for; in a capture, where each replay's ends (an external event record
  // node).
  ncclResult_t endCall(cudaStream_t stream, bool capturing);
  // Where the decode kernels record a malformed coded result (peer + 1), in
  // mapped host memory made with the side stream: the host reads it without
  // waiting for the stream. Sticky: once set, every later call on the comm
  // fails (a call's output that took such a result is not valid, and the
  // call has already returned by the time the kernel runs).
  uint32_t* malformedFlag() const { return malformedDevice_; }
  // ncclSystemError, with a WARN naming `caller` and the peer, when a decode
  // has recorded a malformed coded result: what is visible now (the kernels
  // of earlier calls that have run; under SIGNLION_CHECK, whose check waits
  // for the stream, all of them).
  ncclResult_t malformedResults(const char* caller) const;
  cudaStream_t side() const { return side_; }
  cudaEvent_t forkEvent() const { return fork_; }
  cudaEvent_t joinEvent() const { return join_; }

  // Waits for the work enqueued by calls outside capture, then frees the
  // device resources and destroys the node comm (the first error is
  // returned; everything is freed regardless). Graphs that captured calls
  // on this comm must not be replayed afterwards. Makes the comm's device
  // current itself.
  ncclResult_t release();

 private:
  algo::CostModel costModel_;      // flat
  algo::CostModel nodeCostModel_;  // grouped into nodes
  algo::ScheduleCache<Plan> plans_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  cudaEvent_t join_ = nullptr;
  cudaEvent_t lastUse_ = nullptr;  // recorded at the end of each call and each replay of a captured one
  volatile uint32_t* malformedHost_ = nullptr;  // cudaHostAlloc, mapped
  uint32_t* malformedDevice_ = nullptr;         // the device's address of it
  void* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  bool scratchCaptured_ = false;  // a graph may hold scratch_
  std::vector<void*> retired_;    // earlier scratch that graphs may hold
};

// The context of comm, made on first use; `shape` is what queryComm said
// now. A context whose shape differs belonged to a communicator destroyed
// without ncclSignCommRelease whose address NCCL reused: it is released
// (with a WARN) and a fresh one made.
ncclResult_t commContext(ncclComm_t comm, const CommShape& shape, std::shared_ptr<CommContext>* out);

// Removes comm's context from the table and returns it (null if none).
std::shared_ptr<CommContext> takeCommContext(ncclComm_t comm);

// Makes `dev` the current device for the scope, restoring the previous one.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();
  ncclResult_t set(int dev);

 private:
  int prev_ = -1;
};

}  // namespace nccl
}  // namespace signlion
