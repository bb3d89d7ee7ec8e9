// lion::NcclCommunicator: the optimizer on the user's NCCL communicator.
// Device buffers on the communicator's GPU; pass 1 and pass 2 are the CUDA
// kernels of kernels/lion_kernels.h; the votes go through ncclSignAllReduce,
// the fp32 sums (aggregation "global", momentum averaging, the non-finite
// flag) through the process's own ncclAllReduce (src/nccl/nccl_symbols.h).
// Everything of a step is enqueued on the step's stream: no host sync.
//
// Steps wait for an event recorded at the end of every step (and by every
// launch of a graph that captured one), so they run one after another
// whatever streams they are enqueued on. Copies of the state to and from the
// host (save, load, the step counters) go through a private stream after
// that event, so they see every step enqueued, and every such graph launched,
// before them.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "lion/lion_comm.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

class NcclCommunicator final : public Communicator {
 public:
  // comm may be null (aggregation "local": no collective is ever called);
  // the device is then the current one. `caller` names the entry point in
  // the WARN lines.
  // rules: what every sign all-reduce of the optimizer passes.
  static ncclResult_t create(ncclComm_t comm, const ncclSignCallConfig_t& rules, const char* caller,
                             std::unique_ptr<NcclCommunicator>* out);
  ~NcclCommunicator() override;

  int nranks() const override { return nranks_; }
  int rank() const override { return rank_; }
  int device() const { return device_; }
  bool onDevice() const override { return true; }
  ncclResult_t beginStep(void* stream) override;
  ncclResult_t endStep() override;

  // ncclInvalidArgument with a WARN naming `name` unless p is device (or
  // managed) memory of this communicator's GPU.
  ncclResult_t checkBuffer(const void* p, const char* caller, const char* name) const;

  ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) override;
  ncclResult_t sumAllReduce(float* x, size_t count) override;

  ncclResult_t allocate(size_t bytes, void** ptr) override;
  void release(void* ptr) override;
  ncclResult_t copyToHost(void* host, const void* src, size_t bytes) override;
  ncclResult_t copyFromHost(void* dst, const void* host, size_t bytes) override;

  ncclResult_t interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                                  VoteEncoding encoding, void* votes, size_t count, const Coefficients& k,
                                  const float* skip) override;
  ncclResult_t applyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                           const void* update, size_t count, float lr, float weightDecay, const float* skip,
                           uint64_t* skipped) override;
  ncclResult_t flagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag) override;
  ncclResult_t toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) override;
  ncclResult_t divide(float* x, float divisor, size_t count) override;

 private:
  NcclCommunicator() = default;
  ncclResult_t init(ncclComm_t comm, const char* caller);
  ncclResult_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);

  ncclComm_t comm_ = nullptr;
  ncclSignCallConfig_t rules_ = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
  decltype(&::ncclAllReduce) allReduce_ = nullptr;  // the process's NCCL
  int nranks_ = 1, rank_ = 0, device_ = -1;
  int callerDevice_ = -1;           // restored by endStep
  bool capturing_ = false;          // this step's stream is being captured into a graph
  cudaStream_t stream_ = nullptr;   // the step's (the caller's)
  cudaStream_t copies_ = nullptr;   // ours: state to and from the host
  cudaEvent_t stepped_ = nullptr;   // recorded at the end of every step and every replay of a captured one
};

}  // namespace lion
}  // namespace signlion
