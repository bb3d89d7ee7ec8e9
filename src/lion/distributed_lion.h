// signlion::lion::Optimizer: Distributed Lion over one flat parameter buffer
// on one rank (nccl_sign.h, "Distributed Lion"; docs/LION.md). The C entry
// points (lion_api.cc) and include/signlion/lion.hpp wrap it.
//
// One step, one code path for both memory spaces: the Communicator holds the
// state's memory, runs the passes and the collectives (host: synchronous;
// device: enqueued on the step's stream, so a step never waits for the GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "lion/lion_comm.h"
#include "lion/lion_state.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

// The caller's config (NULL: the initializer's) as this header's struct:
// one of an older header, without zeroRule and tieRule, gets them as
// NCCL_SIGN_RULE_OF_COMM. Errors: ncclInvalidArgument for any other size.
ncclResult_t readConfig(const ncclSignLionConfig_t* config, const char* caller, ncclSignLionConfig_t* out);
// Checks a config (WARN naming the field, ncclInvalidArgument).
ncclResult_t checkConfig(const ncclSignLionConfig_t& config, const char* caller);

class Optimizer {
 public:
  // comm null: a host optimizer that never communicates (ncclSignLionLocal
  // only). The state is allocated here, in comm's memory space: check
  // status() before the first step.
  Optimizer(size_t count, ncclDataType_t type, const ncclSignLionConfig_t& config, std::unique_ptr<Communicator> comm);
  ncclResult_t status() const { return status_; }

  size_t count() const { return count_; }
  ncclDataType_t datatype() const { return type_; }
  bool onDevice() const { return comm_->onDevice(); }

  void setHyperparameters(float lr, float beta1, float beta2, float weightDecay);
  // One step over buffers of the communicator's memory space. Host:
  // synchronous; *applied (may be null) = false when a non-finite gradient
  // made every rank skip the step. Device: enqueued on `stream` (a
  // cudaStream_t) and *applied = true: a skip is decided and counted on the
  // device (stepCounts).
  ncclResult_t step(void* params, const void* grads, bool* applied, void* stream = nullptr);

  // Steps applied and skipped; on a device, once the last step has run.
  ncclResult_t stepCounts(uint64_t* applied, uint64_t* skipped) const;
  uint64_t appliedSteps() const;
  uint64_t skippedSteps() const;
  // Copies of the fp32 momentum and master copy (empty without one).
  std::vector<float> momentum() const;
  std::vector<float> master() const;

  // ncclSignLionRecordPhases / ncclSignLionGetPhases: when each phase of
  // the last step ran (recorded only while on; off, no clock is read).
  void recordPhases(bool on);
  const std::vector<ncclSignLionPhaseTime_t>& phases() const { return phases_; }

  size_t stateSize() const;  // lion_state.h
  ncclResult_t saveState(void* buffer, size_t bytes) const;
  ncclResult_t loadState(const void* buffer, size_t bytes);

 private:
  LionStateShape stateShape() const;
  // A buffer in the communicator's memory space, released with the optimizer.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() {
      if (ptr_ != nullptr) space_->release(ptr_);
    }
    ncclResult_t allocate(Communicator* space, size_t bytes) {
      space_ = space;
      return space->allocate(bytes, &ptr_);
    }
    template <class T>
    T* as() const {
      return static_cast<T*>(ptr_);
    }
    bool empty() const { return ptr_ == nullptr; }

   private:
    Communicator* space_ = nullptr;
    void* ptr_ = nullptr;
  };

  ncclResult_t allocateState();
  ncclResult_t runStep(void* params, const void* grads, bool* applied);
  ncclResult_t pipelinedVoteAndApply(void* params, float* master, const void* grads, const Coefficients& k,
                                     const float* skip, size_t chunk);
  bool hasMaster() const;
  std::vector<float> copyOut(const Buffer& b) const;
  // Recording: the clock now (0 when off), and a phase that began at `begin`
  // and ends now.
  int64_t mark() const { return recording_ ? nowUs() : 0; }
  void record(ncclSignLionPhase_t phase, size_t chunk, int64_t begin) {
    if (recording_) phases_.push_back({phase, (int)chunk, begin, nowUs()});
  }

  size_t count_;
  ncclDataType_t type_;
  ncclSignLionConfig_t config_;
  std::unique_ptr<Communicator> comm_;  // declared before the buffers: released after them
  ncclResult_t status_ = ncclSuccess;
  Buffer momentum_;
  Buffer master_;     // masterWeights only; filled at the first step or by a load
  Buffer votes_;      // int8 sign(c) (majority, local, global) or fp32 c (average), then the update
  Buffer meanGrad_;   // global: the summed gradient
  Buffer flag_;       // skipNonFinite: one float, non-zero when some rank's gradient is not finite
  Buffer skipped_;    // uint64: steps skipped, counted where the flag is read
  bool masterReady_ = false;
  uint64_t steps_ = 0;  // steps called: applied + skipped
  // Elements per chunk of the pipelined step (SIGNLION_LION_CHUNK), read once
  // when the optimizer is made: every step of one optimizer cuts alike.
  size_t chunk_;
  bool pipelineLogged_ = false;  // the INFO line of the first pipelined step
  bool recording_ = false;       // ncclSignLionRecordPhases
  std::vector<ncclSignLionPhaseTime_t> phases_;  // the last recorded step's, capacity reserved when turned on
};

}  // namespace lion
}  // namespace signlion
