#include "lion/distributed_lion.h"

#include <cmath>
#include <cstring>

#include "common/checks.h"
#include "common/config.h"
#include "common/debug.h"
#include "lion/lion_passes.h"

namespace signlion {
namespace lion {
namespace {

bool usesMaster(const ncclSignLionConfig_t& c, ncclDataType_t type) {
  return c.masterWeights != 0 && type != ncclFloat32;
}

// The saved state: this header, the momentum, then the master copy (when used).
struct StateHeader {
  static constexpr uint32_t kMagic = 0x54534e4c;  // "LNST"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic, version, datatype, aggregation;
  uint64_t count, applied, skipped;
  uint32_t hasMaster, masterReady;
};

}  // namespace

ncclResult_t checkConfig(const ncclSignLionConfig_t& c, const char* caller) {
  ARGCHECK(c.size == sizeof(ncclSignLionConfig_t) && c.magic == NCCL_SIGN_LION_CONFIG_MAGIC, caller, "config",
           "not made from NCCL_SIGN_LION_CONFIG_INITIALIZER (size %zu, magic 0x%x)", c.size, c.magic);
  ARGCHECK(headerVersionCompatible(c.version), caller, "config.version",
           "%u is from an incompatible header (library %d)", c.version, NCCL_SIGN_VERSION_CODE);
  ARGCHECK(std::isfinite(c.lr) && c.lr > 0.0f, caller, "config.lr", "%g (must be > 0)", (double)c.lr);
  ARGCHECK(c.beta1 >= 0.0f && c.beta1 < 1.0f, caller, "config.beta1", "%g (must be in [0, 1))", (double)c.beta1);
  ARGCHECK(c.beta2 >= 0.0f && c.beta2 < 1.0f, caller, "config.beta2", "%g (must be in [0, 1))", (double)c.beta2);
  ARGCHECK(std::isfinite(c.weightDecay) && c.weightDecay >= 0.0f, caller, "config.weightDecay", "%g (must be >= 0)",
           (double)c.weightDecay);
  ARGCHECK(c.aggregation >= 0 && c.aggregation < ncclSignLionNumAggregations, caller, "config.aggregation", "%d",
           c.aggregation);
  ARGCHECK(c.momentumAverageEvery >= 0, caller, "config.momentumAverageEvery", "%d (must be >= 0)",
           c.momentumAverageEvery);
  return ncclSuccess;
}

Optimizer::Optimizer(size_t count, ncclDataType_t type, const ncclSignLionConfig_t& config,
                     std::unique_ptr<Communicator> comm)
    : count_(count), type_(type), config_(config), comm_(std::move(comm)), momentum_(count, 0.0f) {
  if (usesMaster(config_, type_)) master_.assign(count, 0.0f);
  if (config_.aggregation == ncclSignLionAverage)
    floatVotes_.resize(count);
  else
    signVotes_.resize(count);
  if (config_.aggregation == ncclSignLionGlobal) meanGrad_.resize(count);
}

void Optimizer::setHyperparameters(float lr, float beta1, float beta2, float weightDecay) {
  config_.lr = lr;
  config_.beta1 = beta1;
  config_.beta2 = beta2;
  config_.weightDecay = weightDecay;
}

// Every rank learns whether any rank's gradient holds an inf or a NaN: one
// fp32 sum all-reduce of a flag.
ncclResult_t Optimizer::agreeAllFinite(const void* grads, bool* finite) {
  float bad = allFinite(type_, grads, count_) ? 0.0f : 1.0f;
  NCCLCHECK(comm_->sumAllReduce(&bad, 1));
  *finite = bad == 0.0f;
  return ncclSuccess;
}

// Lion Cub's periodic momentum synchronization: every rank gets the mean.
ncclResult_t Optimizer::averageMomentum() {
  NCCLCHECK(comm_->sumAllReduce(momentum_.data(), count_));
  const float n = (float)comm_->nranks();
  for (float& m : momentum_) m = m / n;
  return ncclSuccess;
}

ncclResult_t Optimizer::step(void* params, const void* grads, bool* applied) {
  const int agg = config_.aggregation;
  *applied = false;
  // Global: the mean gradient first; it is identical on every rank, so each
  // checks it alone (a sum that overflows counts as non-finite too).
  if (agg == ncclSignLionGlobal) {
    toFloat(type_, grads, meanGrad_.data(), count_);
    NCCLCHECK(comm_->sumAllReduce(meanGrad_.data(), count_));
  }
  if (config_.skipNonFinite) {
    bool finite = true;
    if (agg == ncclSignLionGlobal)
      finite = allFinite(ncclFloat32, meanGrad_.data(), count_);
    else if (agg == ncclSignLionLocal)
      finite = allFinite(type_, grads, count_);
    else
      NCCLCHECK(agreeAllFinite(grads, &finite));
    if (!finite) {
      skipped_++;
      INFO(kSubsysLion, "Lion step %llu skipped: non-finite gradient", (unsigned long long)(applied_ + skipped_));
      return ncclSuccess;
    }
  }
  if (!master_.empty() && !masterReady_) {
    toFloat(type_, params, master_.data(), count_);
    masterReady_ = true;
  }
  const Coefficients k = Coefficients::of(config_.beta1, config_.beta2);
  float* master = master_.empty() ? nullptr : master_.data();
  if (agg == ncclSignLionAverage) {
    interpolateAndVote(type_, grads, 1.0f, momentum_.data(), VoteEncoding::kFloat32, floatVotes_.data(), count_, k);
    NCCLCHECK(comm_->signAllReduce(floatVotes_.data(), count_, ncclFloat32, ncclSignAverage));
    applyUpdate(type_, params, master, ncclFloat32, floatVotes_.data(), count_, config_.lr, config_.weightDecay);
  } else {
    const bool global = agg == ncclSignLionGlobal;
    interpolateAndVote(global ? ncclFloat32 : type_, global ? (const void*)meanGrad_.data() : grads,
                       global ? (float)comm_->nranks() : 1.0f, momentum_.data(), VoteEncoding::kSignInt8,
                       signVotes_.data(), count_, k);
    if (agg == ncclSignLionMajority)
      NCCLCHECK(comm_->signAllReduce(signVotes_.data(), count_, ncclInt8, ncclSignMajority));
    applyUpdate(type_, params, master, ncclInt8, signVotes_.data(), count_, config_.lr, config_.weightDecay);
  }
  applied_++;
  *applied = true;
  const bool voted = agg == ncclSignLionMajority || agg == ncclSignLionAverage;
  if (voted && config_.momentumAverageEvery > 0 && applied_ % (uint64_t)config_.momentumAverageEvery == 0 &&
      comm_->nranks() > 1)
    NCCLCHECK(averageMomentum());
  return ncclSuccess;
}

size_t Optimizer::stateSize() const {
  return sizeof(StateHeader) + count_ * sizeof(float) * (master_.empty() ? 1 : 2);
}

ncclResult_t Optimizer::saveState(void* buffer, size_t bytes) const {
  ARGCHECK(buffer != nullptr && bytes >= stateSize(), "ncclSignLionSaveState", "bytes", "%zu, the state is %zu",
           bytes, stateSize());
  StateHeader h{StateHeader::kMagic, StateHeader::kVersion, (uint32_t)type_, (uint32_t)config_.aggregation,
                count_,  applied_,  skipped_, master_.empty() ? 0u : 1u, masterReady_ ? 1u : 0u};
  char* out = static_cast<char*>(buffer);
  memcpy(out, &h, sizeof(h));
  memcpy(out + sizeof(h), momentum_.data(), count_ * sizeof(float));
  if (!master_.empty()) memcpy(out + sizeof(h) + count_ * sizeof(float), master_.data(), count_ * sizeof(float));
  return ncclSuccess;
}

ncclResult_t Optimizer::loadState(const void* buffer, size_t bytes) {
  const char* fn = "ncclSignLionLoadState";
  StateHeader h;
  ARGCHECK(buffer != nullptr && bytes >= sizeof(h), fn, "bytes", "%zu: shorter than a state header", bytes);
  memcpy(&h, buffer, sizeof(h));
  ARGCHECK(h.magic == StateHeader::kMagic && h.version == StateHeader::kVersion, fn, "buffer",
           "not a Lion state (magic 0x%x, version %u)", h.magic, h.version);
  ARGCHECK(h.count == count_ && h.datatype == (uint32_t)type_, fn, "buffer",
           "a state of %llu elements of datatype %u, the optimizer has %zu of %d", (unsigned long long)h.count,
           h.datatype, count_, (int)type_);
  ARGCHECK(h.aggregation == (uint32_t)config_.aggregation && h.hasMaster == (master_.empty() ? 0u : 1u), fn,
           "buffer", "saved with aggregation %u and master copy %u, the optimizer has %d and %d", h.aggregation,
           h.hasMaster, config_.aggregation, master_.empty() ? 0 : 1);
  ARGCHECK(bytes == stateSize(), fn, "bytes", "%zu, a state of this optimizer is %zu", bytes, stateSize());
  const char* in = static_cast<const char*>(buffer) + sizeof(h);
  memcpy(momentum_.data(), in, count_ * sizeof(float));
  if (!master_.empty()) memcpy(master_.data(), in + count_ * sizeof(float), count_ * sizeof(float));
  masterReady_ = h.masterReady != 0;
  applied_ = h.applied;
  skipped_ = h.skipped;
  return ncclSuccess;
}

}  // namespace lion
}  // namespace signlion
