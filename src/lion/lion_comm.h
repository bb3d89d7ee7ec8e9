// What the optimizer runs on: the collectives (the sign all-reduce and an
// fp32 sum all-reduce), the memory its state lives in, and the two passes
// over that memory. Two implementations:
//  - HostCommunicator (here): CPU buffers, the host communicator
//    (ncclSignComm_t), the CPU passes of lion_passes.h; synchronous.
//  - NcclCommunicator (nccl_lion_comm.h): device buffers, the user's
//    ncclComm_t, the CUDA passes of kernels/lion_kernels.h, everything
//    enqueued on the stream of the step; nothing waits for the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lion/collective_thread.h"
#include "lion/lion_passes.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int nranks() const = 0;
  virtual int rank() const = 0;
  // Device memory, and operations ordered on the stream of the step (their
  // results exist once the stream has run them); else host memory and
  // synchronous operations.
  virtual bool onDevice() const = 0;
  // Bracket the operations of one step. beginStep: they go to `stream` (a
  // cudaStream_t; device only). endStep: what they leave is what the copies
  // below wait for.
  virtual ncclResult_t beginStep(void* stream) {
    (void)stream;
    return ncclSuccess;
  }
  virtual ncclResult_t endStep() { return ncclSuccess; }

  // In place: votes (int8 or fp32) become the majority / average of all ranks'.
  virtual ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) = 0;
  // The same, split in two: start returns at once when overlapsCollectives()
  // (the votes are the collective's until wait returns, and only the passes
  // below may run meanwhile); else it runs the call and wait has nothing to
  // wait for. Up to kMaxStarted calls may be started before the first is
  // waited for; they run in the order started, and each wait returns the
  // oldest one not waited for yet. Every successful start is followed by its
  // wait. timed: wait sets *beginUs and *endUs (nowUs) to when the call began
  // and returned on the thread that ran it, if it ran on another thread; the
  // caller times a call that start ran itself.
  static constexpr int kMaxStarted = 2;
  virtual bool overlapsCollectives() const { return false; }
  virtual ncclResult_t signAllReduceStart(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                                          bool timed) {
    (void)timed;
    return signAllReduce(votes, count, type, op);
  }
  virtual ncclResult_t signAllReduceWait(int64_t* beginUs, int64_t* endUs) {
    (void)beginUs;
    (void)endUs;
    return ncclSuccess;
  }
  // In place: x becomes the sum over all ranks, identical on every rank.
  virtual ncclResult_t sumAllReduce(float* x, size_t count) = 0;

  // State memory: allocate() returns zero-filled memory of this space (null
  // for 0 bytes). The copies move bytes between it and host memory once the
  // operations enqueued so far are done, and return when the copy is.
  virtual ncclResult_t allocate(size_t bytes, void** ptr) = 0;
  virtual void release(void* ptr) = 0;
  virtual ncclResult_t copyToHost(void* host, const void* src, size_t bytes) = 0;
  virtual ncclResult_t copyFromHost(void* dst, const void* host, size_t bytes) = 0;

  // The passes of lion_passes.h on buffers of this space. skip (this space,
  // may be null) is read when the pass runs: non-zero makes it change nothing,
  // and applyUpdate then adds 1 to *skipped instead.
  virtual ncclResult_t interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                                          VoteEncoding encoding, void* votes, size_t count, const Coefficients& k,
                                          const float* skip) = 0;
  virtual ncclResult_t applyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                                   const void* update, size_t count, float lr, float weightDecay, const float* skip,
                                   uint64_t* skipped) = 0;
  // *flag = 1.0f when any element of x is inf or NaN, else 0.0f.
  virtual ncclResult_t flagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag) = 0;
  virtual ncclResult_t toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) = 0;
  virtual ncclResult_t divide(float* x, float divisor, size_t count) = 0;
};

// CPU buffers; the collectives on a host communicator the caller owns (null
// for an optimizer that never communicates: aggregation "local").
class HostCommunicator final : public Communicator {
 public:
  // rules: what every sign all-reduce of the optimizer passes (by default
  // the communicator's).
  explicit HostCommunicator(ncclSignComm_t comm,
                            const ncclSignCallConfig_t& rules = ncclSignCallConfig_t NCCL_SIGN_CALL_CONFIG_INITIALIZER);
  // Waits for the calls it started and did not wait for: their votes may be
  // freed next, and their slots of the shared thread must be given back.
  ~HostCommunicator() override;
  int nranks() const override { return nranks_; }
  int rank() const override { return rank_; }
  bool onDevice() const override { return false; }
  ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) override;
  // On the communicator's CollectiveThread, taken at the first start (the
  // calling thread runs the call where no thread could be started).
  bool overlapsCollectives() const override { return comm_ != nullptr && nranks_ > 1; }
  ncclResult_t signAllReduceStart(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                                  bool timed) override;
  ncclResult_t signAllReduceWait(int64_t* beginUs, int64_t* endUs) override;
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
  ncclSignComm_t comm_;
  ncclSignCallConfig_t rules_;
  int nranks_ = 1, rank_ = 0;
  std::shared_ptr<CollectiveThread> thread_;
  bool noThread_ = false;  // CollectiveThread::of failed: calls run on the caller's thread
  // The tickets of the calls started on thread_ and not waited for, oldest first.
  uint64_t started_[kMaxStarted] = {};
  int startedCount_ = 0;
};

}  // namespace lion
}  // namespace signlion
