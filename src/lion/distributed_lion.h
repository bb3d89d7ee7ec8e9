// signlion::lion::Optimizer: Distributed Lion over one flat parameter buffer
// on one rank (nccl_sign.h, "Distributed Lion"; docs/LION.md). The C entry
// points (lion_api.cc) and include/signlion/lion.hpp wrap it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lion/lion_comm.h"
#include "nccl_sign.h"

namespace signlion {
namespace lion {

// Checks a config (WARN naming the field, ncclInvalidArgument).
ncclResult_t checkConfig(const ncclSignLionConfig_t& config, const char* caller);

class Optimizer {
 public:
  // comm may be null only for ncclSignLionLocal.
  Optimizer(size_t count, ncclDataType_t type, const ncclSignLionConfig_t& config, std::unique_ptr<Communicator> comm);

  void setHyperparameters(float lr, float beta1, float beta2, float weightDecay);
  // *applied = false when a non-finite gradient made every rank skip the step.
  ncclResult_t step(void* params, const void* grads, bool* applied);

  uint64_t appliedSteps() const { return applied_; }
  uint64_t skippedSteps() const { return skipped_; }
  const std::vector<float>& momentum() const { return momentum_; }
  const std::vector<float>& master() const { return master_; }

  size_t stateSize() const;
  ncclResult_t saveState(void* buffer, size_t bytes) const;
  ncclResult_t loadState(const void* buffer, size_t bytes);

 private:
  ncclResult_t agreeAllFinite(const void* grads, bool* finite);
  ncclResult_t averageMomentum();

  size_t count_;
  ncclDataType_t type_;
  ncclSignLionConfig_t config_;
  std::unique_ptr<Communicator> comm_;
  std::vector<float> momentum_;
  std::vector<float> master_;  // masterWeights only; filled at the first step or by a load
  bool masterReady_ = false;
  std::vector<int8_t> signVotes_;  // majority, local, global: sign(c), then the update
  std::vector<float> floatVotes_;  // average: c, then the update
  std::vector<float> meanGrad_;    // global: the summed gradient
  uint64_t applied_ = 0, skipped_ = 0;
};

}  // namespace lion
}  // namespace signlion
