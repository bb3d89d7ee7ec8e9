// signlion::DistributedLion: the C++ face of the Distributed Lion optimizer of
// nccl_sign.h, header-only over the C ABI (link signlion::nccl-sign).
//
//   ncclSignComm_t comm = ...;                          // the host communicator
//   signlion::LionOptions opt;
//   opt.lr = 3e-4f; opt.weightDecay = 0.1f;
//   opt.aggregation = signlion::Aggregation::kMajority;  // "mavo"
//   signlion::DistributedLion lion(nparams, ncclBfloat16, opt, comm);
//   lion.step(params, grads);                            // collective
//
// On device buffers, with the framework's NCCL communicator (ncclComm_t):
//
//   auto lion = signlion::DistributedLion::onNccl(nparams, ncclBfloat16, opt, ncclComm);
//   lion.stepAsync(d_params, d_grads, stream);           // enqueued, no host sync
//
// Errors throw signlion::Error, which carries the ncclResult_t; the library's
// WARN line names the cause.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nccl_sign.h"

namespace signlion {

class Error : public std::runtime_error {
 public:
  Error(ncclResult_t result, const std::string& what)
      : std::runtime_error(what + ": " + ncclSignGetErrorString(result)), result_(result) {}
  ncclResult_t result() const { return result_; }

 private:
  ncclResult_t result_;
};

inline void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw Error(result, what);
}

enum class Aggregation {
  kMajority = ncclSignLionMajority,  // "mavo"
  kAverage = ncclSignLionAverage,
  kGlobal = ncclSignLionGlobal,  // plain Lion on the sum-all-reduced gradient (the baseline)
  kLocal = ncclSignLionLocal,    // no communication
};

struct LionOptions {
  float lr = 1e-4f;
  std::pair<float, float> betas{0.9f, 0.99f};
  float weightDecay = 0.0f;  // decoupled, local, times lr, outside the sign
  Aggregation aggregation = Aggregation::kMajority;
  bool masterWeights = false;    // fp16/bf16 parameters through an fp32 master copy
  int momentumAverageEvery = 0;  // Lion Cub: average momenta every K steps; 0 = never
  bool skipNonFinite = false;    // all ranks skip a step where any gradient is inf/NaN

  ncclSignLionConfig_t toConfig() const {
    ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
    c.lr = lr;
    c.beta1 = betas.first;
    c.beta2 = betas.second;
    c.weightDecay = weightDecay;
    c.aggregation = static_cast<int>(aggregation);
    c.masterWeights = masterWeights ? 1 : 0;
    c.momentumAverageEvery = momentumAverageEvery;
    c.skipNonFinite = skipNonFinite ? 1 : 0;
    return c;
  }
};

// One rank's optimizer over a flat buffer of `count` parameters of datatype
// (fp32, fp16, bf16). comm (the caller's, outliving this object) may be null
// only for Aggregation::kLocal.
class DistributedLion {
 public:
  DistributedLion(size_t count, ncclDataType_t datatype, const LionOptions& options, ncclSignComm_t comm)
      : options_(options) {
    ncclSignLionConfig_t c = options.toConfig();
    check(ncclSignLionCreate(&lion_, count, datatype, &c, comm), "ncclSignLionCreate");
  }
#ifdef NCCL_SIGN_HAVE_NCCL
  // An optimizer on device buffers of comm's GPU (ncclSignLionCreateNccl):
  // comm is the framework's NCCL communicator (outliving the optimizer),
  // null only for Aggregation::kLocal (the current device then).
  static DistributedLion onNccl(size_t count, ncclDataType_t datatype, const LionOptions& options, ncclComm_t comm) {
    ncclSignLionConfig_t c = options.toConfig();
    ncclSignLion_t h = nullptr;
    check(ncclSignLionCreateNccl(&h, count, datatype, &c, comm), "ncclSignLionCreateNccl");
    return DistributedLion(h, options);
  }
#endif
  ~DistributedLion() { ncclSignLionDestroy(lion_); }
  DistributedLion(const DistributedLion&) = delete;
  DistributedLion& operator=(const DistributedLion&) = delete;
  DistributedLion(DistributedLion&& o) noexcept : lion_(o.lion_), options_(o.options_) { o.lion_ = nullptr; }
  DistributedLion& operator=(DistributedLion&& o) noexcept {
    std::swap(lion_, o.lion_);
    std::swap(options_, o.options_);
    return *this;
  }

  // Updates params in place from grads (same datatype; host buffers).
  // Collective. Returns false when the step was skipped for a non-finite
  // gradient.
  bool step(void* params, const void* grads) {
    int applied = 0;
    check(ncclSignLionStep(lion_, params, grads, &applied), "ncclSignLionStep");
    return applied != 0;
  }
#ifdef NCCL_SIGN_HAVE_NCCL
  // The same on device buffers (an optimizer made by onNccl): enqueued on
  // stream, returns at once. Collective. Skipped steps are counted on the
  // device (skippedSteps() waits for the steps enqueued).
  void stepAsync(void* params, const void* grads, cudaStream_t stream) {
    check(ncclSignLionStepAsync(lion_, params, grads, stream), "ncclSignLionStepAsync");
  }
#endif

  // Learning-rate schedules: takes effect at the next step. A rejected value
  // throws and changes nothing (options() stays what the optimizer uses).
  void setLr(float lr) {
    LionOptions o = options_;
    o.lr = lr;
    applyHyperparameters(o);
  }
  void setWeightDecay(float weightDecay) {
    LionOptions o = options_;
    o.weightDecay = weightDecay;
    applyHyperparameters(o);
  }
  const LionOptions& options() const { return options_; }

  // On a device optimizer these wait for the steps enqueued so far, and the
  // state moves through host memory.
  uint64_t appliedSteps() const { return counts().first; }
  uint64_t skippedSteps() const { return counts().second; }

  // This rank's state; loading it into an optimizer of the same shape
  // continues training bit for bit.
  std::vector<uint8_t> saveState() const {
    size_t bytes = 0;
    check(ncclSignLionGetStateSize(lion_, &bytes), "ncclSignLionGetStateSize");
    std::vector<uint8_t> state(bytes);
    check(ncclSignLionSaveState(lion_, state.data(), state.size()), "ncclSignLionSaveState");
    return state;
  }
  void loadState(const std::vector<uint8_t>& state) {
    check(ncclSignLionLoadState(lion_, state.data(), state.size()), "ncclSignLionLoadState");
  }

  // The step timeline (host optimizers; nccl_sign.h, ncclSignLionRecordPhases):
  // on, every later step records when its passes and all-reduces ran, per
  // chunk; phases() is the last recorded step's. Off (the default), a step
  // reads no clock.
  void recordPhases(bool on) { check(ncclSignLionRecordPhases(lion_, on ? 1 : 0), "ncclSignLionRecordPhases"); }
  std::vector<ncclSignLionPhaseTime_t> phases() const {
    int n = 0;
    check(ncclSignLionGetPhases(lion_, nullptr, 0, &n), "ncclSignLionGetPhases");
    std::vector<ncclSignLionPhaseTime_t> out((size_t)n);
    check(ncclSignLionGetPhases(lion_, out.data(), n, &n), "ncclSignLionGetPhases");
    return out;
  }

  ncclSignLion_t handle() const { return lion_; }

 private:
  DistributedLion(ncclSignLion_t handle, const LionOptions& options) : lion_(handle), options_(options) {}
  void applyHyperparameters(const LionOptions& o) {
    check(ncclSignLionSetHyperparameters(lion_, o.lr, o.betas.first, o.betas.second, o.weightDecay),
          "ncclSignLionSetHyperparameters");
    options_ = o;  // only once the library took them
  }
  std::pair<uint64_t, uint64_t> counts() const {
    uint64_t a = 0, s = 0;
    check(ncclSignLionGetStepCount(lion_, &a, &s), "ncclSignLionGetStepCount");
    return {a, s};
  }

  ncclSignLion_t lion_ = nullptr;
  LionOptions options_;
};

}  // namespace signlion
