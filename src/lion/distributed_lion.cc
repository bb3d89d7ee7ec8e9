#include "lion/distributed_lion.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "bits/bits.h"
#include "common/checks.h"
#include "common/config.h"
#include "common/debug.h"
#include "lion/lion_params.h"
#include "lion/lion_passes.h"
#include "lion/lion_state.h"

namespace signlion {
namespace lion {
namespace {

bool usesMaster(const ncclSignLionConfig_t& c, ncclDataType_t type) {
  return c.masterWeights != 0 && type != ncclFloat32;
}

// sizeof of the struct of a header before zeroRule and tieRule: the fields
// up to them, padded as the compiler pads the struct.
constexpr size_t kConfigSizeWithoutRules =
    (offsetof(ncclSignLionConfig_t, zeroRule) + alignof(ncclSignLionConfig_t) - 1) / alignof(ncclSignLionConfig_t) *
    alignof(ncclSignLionConfig_t);
static_assert(kConfigSizeWithoutRules < sizeof(ncclSignLionConfig_t), "the rules must lie past the older struct");

}  // namespace

ncclResult_t readConfig(const ncclSignLionConfig_t* config, const char* caller, ncclSignLionConfig_t* out) {
  *out = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  if (config == nullptr) return ncclSuccess;
  // Only as many bytes as the caller's struct has: one of an older header
  // ends before the rules, which then stay the communicator's.
  ARGCHECK(config->size == sizeof(ncclSignLionConfig_t) || config->size == kConfigSizeWithoutRules, caller,
           "config->size", "%zu is neither sizeof(ncclSignLionConfig_t)=%zu nor %zu (a header without the rules); "
           "start from NCCL_SIGN_LION_CONFIG_INITIALIZER", config->size, sizeof(ncclSignLionConfig_t),
           kConfigSizeWithoutRules);
  memcpy(out, config, config->size);
  out->size = sizeof(ncclSignLionConfig_t);
  return ncclSuccess;
}

ncclResult_t checkConfig(const ncclSignLionConfig_t& c, const char* caller) {
  ARGCHECK(c.size == sizeof(ncclSignLionConfig_t) && c.magic == NCCL_SIGN_LION_CONFIG_MAGIC, caller, "config",
           "not made from NCCL_SIGN_LION_CONFIG_INITIALIZER (size %zu, magic 0x%x)", c.size, c.magic);
  ARGCHECK(headerVersionCompatible(c.version), caller, "config.version",
           "%u is from an incompatible header (library %d)", c.version, NCCL_SIGN_VERSION_CODE);
  // lr = 0 is valid (a warmup from 0, a schedule ending at 0): pass 2 then leaves
  // every parameter as it is while the momentum still moves.
  ARGCHECK(std::isfinite(c.lr) && c.lr >= 0.0f, caller, "config.lr", "%g (must be finite and >= 0)", (double)c.lr);
  ARGCHECK(c.beta1 >= 0.0f && c.beta1 < 1.0f, caller, "config.beta1", "%g (must be in [0, 1))", (double)c.beta1);
  ARGCHECK(c.beta2 >= 0.0f && c.beta2 < 1.0f, caller, "config.beta2", "%g (must be in [0, 1))", (double)c.beta2);
  ARGCHECK(std::isfinite(c.weightDecay) && c.weightDecay >= 0.0f, caller, "config.weightDecay", "%g (must be >= 0)",
           (double)c.weightDecay);
  ARGCHECK(c.aggregation >= 0 && c.aggregation < ncclSignLionNumAggregations, caller, "config.aggregation", "%d",
           c.aggregation);
  ARGCHECK(c.momentumAverageEvery >= 0, caller, "config.momentumAverageEvery", "%d (must be >= 0)",
           c.momentumAverageEvery);
  CallRules rules;
  NCCLCHECK(checkRules(c.zeroRule, c.tieRule, caller, "config", &rules));
  return ncclSuccess;
}

Optimizer::Optimizer(size_t count, ncclDataType_t type, const ncclSignLionConfig_t& config,
                     std::unique_ptr<Communicator> comm)
    : count_(count), type_(type), config_(config), comm_(std::move(comm)), chunk_(lionChunkElements()) {
  if (comm_ == nullptr) comm_ = std::make_unique<HostCommunicator>(nullptr);
  status_ = allocateState();
}

// Everything a step touches besides the caller's buffers, allocated once.
ncclResult_t Optimizer::allocateState() {
  Communicator* c = comm_.get();
  NCCLCHECK(momentum_.allocate(c, count_ * sizeof(float)));
  if (usesMaster(config_, type_)) NCCLCHECK(master_.allocate(c, count_ * sizeof(float)));
  NCCLCHECK(votes_.allocate(c, count_ * (config_.aggregation == ncclSignLionAverage ? sizeof(float) : 1)));
  if (config_.aggregation == ncclSignLionGlobal) NCCLCHECK(meanGrad_.allocate(c, count_ * sizeof(float)));
  NCCLCHECK(flag_.allocate(c, sizeof(float)));
  NCCLCHECK(skipped_.allocate(c, sizeof(uint64_t)));
  return ncclSuccess;
}

void Optimizer::setHyperparameters(float lr, float beta1, float beta2, float weightDecay) {
  config_.lr = lr;
  config_.beta1 = beta1;
  config_.beta2 = beta2;
  config_.weightDecay = weightDecay;
}

ncclResult_t Optimizer::step(void* params, const void* grads, bool* applied, void* stream) {
  NCCLCHECK(status_);
  NCCLCHECK(comm_->beginStep(stream));
  const ncclResult_t res = runStep(params, grads, applied);
  const ncclResult_t end = comm_->endStep();
  return res != ncclSuccess ? res : end;
}

void Optimizer::recordPhases(bool on) {
  recording_ = on;
  phases_.clear();
  if (on) {  // a chunk's three phases per chunk: no allocation during the steps
    const size_t chunk = chunk_;
    phases_.reserve(3 * (chunk > 0 && count_ > chunk ? (count_ + chunk - 1) / chunk : 1));
  }
}

ncclResult_t Optimizer::runStep(void* params, const void* grads, bool* applied) {
  const int agg = config_.aggregation;
  if (recording_) phases_.clear();
  const bool voted = agg == ncclSignLionMajority || agg == ncclSignLionAverage;
  float* momentum = momentum_.as<float>();
  float* master = master_.as<float>();
  // The master copy is the parameters as they are at the first step.
  if (master != nullptr && !masterReady_) {
    NCCLCHECK(comm_->toFloat(type_, params, master, count_));
    masterReady_ = true;
  }
  // Global: the mean gradient first. It is identical on every rank, so each
  // checks it alone (a sum that overflows counts as non-finite too).
  if (agg == ncclSignLionGlobal) {
    NCCLCHECK(comm_->toFloat(type_, grads, meanGrad_.as<float>(), count_));
    const int64_t t = mark();
    NCCLCHECK(comm_->sumAllReduce(meanGrad_.as<float>(), count_));
    record(ncclSignLionPhaseAllReduce, 0, t);
  }
  const float* skip = nullptr;
  if (config_.skipNonFinite) {
    if (agg == ncclSignLionGlobal)
      NCCLCHECK(comm_->flagNonFinite(ncclFloat32, meanGrad_.as<float>(), count_, flag_.as<float>()));
    else
      NCCLCHECK(comm_->flagNonFinite(type_, grads, count_, flag_.as<float>()));
    // Every rank learns whether any rank's gradient holds an inf or a NaN.
    if (voted) NCCLCHECK(comm_->sumAllReduce(flag_.as<float>(), 1));
    skip = flag_.as<float>();
  }
  steps_++;
  // The host knows now and leaves out the collective; a device finds out
  // when its kernels read the flag.
  const bool skipKnown = !comm_->onDevice() && skip != nullptr && *skip != 0.0f;
  if (applied != nullptr) *applied = !skipKnown;
  const Coefficients k = Coefficients::of(config_.beta1, config_.beta2);
  const bool average = agg == ncclSignLionAverage;
  const ncclDataType_t voteType = average ? ncclFloat32 : ncclInt8;
  const size_t chunk = chunk_;
  if (!skipKnown && voted && chunk > 0 && count_ > chunk && comm_->overlapsCollectives()) {
    if (!pipelineLogged_)
      INFO(kSubsysLion, "Lion: %zu elements, pipelined in chunks of %zu (SIGNLION_LION_CHUNK)", count_, chunk);
    pipelineLogged_ = true;
    NCCLCHECK(pipelinedVoteAndApply(params, master, grads, k, skip, chunk));
  } else {
    if (!skipKnown) {
      const bool global = agg == ncclSignLionGlobal;
      int64_t t = mark();
      NCCLCHECK(comm_->interpolateAndVote(global ? ncclFloat32 : type_,
                                          global ? (const void*)meanGrad_.as<float>() : grads,
                                          global ? (float)comm_->nranks() : 1.0f, momentum,
                                          average ? VoteEncoding::kFloat32 : VoteEncoding::kSignInt8,
                                          votes_.as<void>(), count_, k, skip));
      record(ncclSignLionPhaseVote, 0, t);
      if (voted) {
        t = mark();
        NCCLCHECK(comm_->signAllReduce(votes_.as<void>(), count_, voteType,
                                       average ? ncclSignAverage : ncclSignMajority));
        record(ncclSignLionPhaseAllReduce, 0, t);
      }
    }
    const int64_t t = mark();
    NCCLCHECK(comm_->applyUpdate(type_, params, master, voteType, votes_.as<void>(), count_, config_.lr,
                                 config_.weightDecay, skip, skipped_.as<uint64_t>()));
    record(ncclSignLionPhaseApply, 0, t);
  }
  if (skipKnown) INFO(kSubsysLion, "Lion step %llu skipped: non-finite gradient", (unsigned long long)steps_);
  // Lion Cub's periodic momentum synchronization: every rank gets the mean.
  // K counts steps called, skipped or not, so that no rank (and no host)
  // needs to know which were skipped.
  if (voted && config_.momentumAverageEvery > 0 && steps_ % (uint64_t)config_.momentumAverageEvery == 0 &&
      comm_->nranks() > 1) {
    NCCLCHECK(comm_->sumAllReduce(momentum, count_));
    NCCLCHECK(comm_->divide(momentum, (float)comm_->nranks(), count_));
  }
  return ncclSuccess;
}

// Pass 1, the sign all-reduce and pass 2 of a voted step, chunk by chunk,
// two chunks' all-reduces started ahead (Communicator::kMaxStarted): once
// chunk i's has returned, chunk i + 1's is already on the wire, and this
// thread votes and starts chunk i + 2 and applies chunk i meanwhile. So the
// passes run while the wire is busy instead of before and after it, and the
// communicator's thread goes from one chunk straight to the next, with no
// wait for this thread to wake up and start it. Bit for bit the one-piece
// step: every pass and both vote rules are per element.
ncclResult_t Optimizer::pipelinedVoteAndApply(void* params, float* master, const void* grads, const Coefficients& k,
                                              const float* skip, size_t chunk) {
  const bool average = config_.aggregation == ncclSignLionAverage;
  const VoteEncoding encoding = average ? VoteEncoding::kFloat32 : VoteEncoding::kSignInt8;
  const ncclDataType_t voteType = average ? ncclFloat32 : ncclInt8;
  const ncclSignOp_t op = average ? ncclSignAverage : ncclSignMajority;
  const size_t elementSize = bits::typeSize(type_), voteSize = bits::typeSize(voteType);
  char* votes = votes_.as<char>();
  float* momentum = momentum_.as<float>();
  const size_t chunks = (count_ + chunk - 1) / chunk;
  auto length = [&](size_t i) { return std::min(chunk, count_ - i * chunk); };
  auto vote = [&](size_t i) {
    const size_t first = i * chunk;
    const int64_t t = mark();
    const ncclResult_t r =
        comm_->interpolateAndVote(type_, static_cast<const char*>(grads) + first * elementSize, 1.0f,
                                  momentum + first, encoding, votes + first * voteSize, length(i), k, skip);
    record(ncclSignLionPhaseVote, i, t);
    return r;
  };
  auto apply = [&](size_t i) {
    const size_t first = i * chunk;
    const int64_t t = mark();
    const ncclResult_t r =
        comm_->applyUpdate(type_, static_cast<char*>(params) + first * elementSize,
                           master != nullptr ? master + first : nullptr, voteType, votes + first * voteSize,
                           length(i), config_.lr, config_.weightDecay, skip, skipped_.as<uint64_t>());
    record(ncclSignLionPhaseApply, i, t);
    return r;
  };
  // A call that start runs itself (no thread) is timed around start; one on
  // the thread, by the thread (its wait hands the times over).
  int64_t begins[Communicator::kMaxStarted] = {}, ends[Communicator::kMaxStarted] = {};
  size_t started = 0;  // chunks whose all-reduce was started
  auto voteAndStart = [&](size_t i) {
    NCCLCHECK(vote(i));
    begins[i % Communicator::kMaxStarted] = mark();
    NCCLCHECK(comm_->signAllReduceStart(votes + i * chunk * voteSize, length(i), voteType, op, recording_));
    ends[i % Communicator::kMaxStarted] = mark();
    started = i + 1;
    return ncclSuccess;
  };
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < std::min<size_t>(chunks, Communicator::kMaxStarted) && r == ncclSuccess; i++)
    r = voteAndStart(i);
  for (size_t i = 0; i < started; i++) {
    // Every started chunk is waited for, also after a failure: the votes are
    // the thread's until then. Nothing more is started or applied after one.
    int64_t& begin = begins[i % Communicator::kMaxStarted];
    int64_t& end = ends[i % Communicator::kMaxStarted];
    const ncclResult_t collective = comm_->signAllReduceWait(&begin, &end);
    if (r == ncclSuccess) r = collective;
    if (r != ncclSuccess) continue;
    if (recording_) phases_.push_back({ncclSignLionPhaseAllReduce, (int)i, begin, end});
    if (i + Communicator::kMaxStarted < chunks) r = voteAndStart(i + Communicator::kMaxStarted);
    if (r == ncclSuccess) r = apply(i);
  }
  return r;
}

ncclResult_t Optimizer::stepCounts(uint64_t* applied, uint64_t* skipped) const {
  NCCLCHECK(status_);
  uint64_t s = 0;
  NCCLCHECK(comm_->copyToHost(&s, skipped_.as<uint64_t>(), sizeof(s)));
  if (applied != nullptr) *applied = steps_ - s;
  if (skipped != nullptr) *skipped = s;
  return ncclSuccess;
}

uint64_t Optimizer::appliedSteps() const {
  uint64_t a = 0;
  return stepCounts(&a, nullptr) == ncclSuccess ? a : 0;
}

uint64_t Optimizer::skippedSteps() const {
  uint64_t s = 0;
  return stepCounts(nullptr, &s) == ncclSuccess ? s : 0;
}

std::vector<float> Optimizer::copyOut(const Buffer& b) const {
  std::vector<float> v(b.empty() ? 0 : count_);
  if (!v.empty() && comm_->copyToHost(v.data(), b.as<float>(), count_ * sizeof(float)) != ncclSuccess) v.clear();
  return v;
}

std::vector<float> Optimizer::momentum() const { return copyOut(momentum_); }
std::vector<float> Optimizer::master() const { return copyOut(master_); }

bool Optimizer::hasMaster() const { return usesMaster(config_, type_); }

LionStateShape Optimizer::stateShape() const {
  LionStateShape s;
  s.datatype = (uint32_t)type_;
  s.aggregation = (uint32_t)config_.aggregation;
  s.count = count_;
  s.hasMaster = hasMaster();
  return s;
}

size_t Optimizer::stateSize() const { return lionStateBytes(stateShape()); }

// On a device the copies wait for the steps enqueued so far (the state is
// theirs) and go through the caller's host buffer.
ncclResult_t Optimizer::saveState(void* buffer, size_t bytes) const {
  ARGCHECK(buffer != nullptr && bytes >= stateSize(), "ncclSignLionSaveState", "bytes", "%zu, the state is %zu",
           bytes, stateSize());
  uint64_t applied = 0, skipped = 0;
  NCCLCHECK(stepCounts(&applied, &skipped));
  LionStateHeader h{LionStateHeader::kMagic, LionStateHeader::kVersion, (uint32_t)type_,
                    (uint32_t)config_.aggregation, count_, applied, skipped, hasMaster() ? 1u : 0u,
                    masterReady_ ? 1u : 0u};
  char* out = static_cast<char*>(buffer);
  memcpy(out, &h, sizeof(h));
  NCCLCHECK(comm_->copyToHost(out + sizeof(h), momentum_.as<float>(), count_ * sizeof(float)));
  if (hasMaster())
    NCCLCHECK(comm_->copyToHost(out + sizeof(h) + count_ * sizeof(float), master_.as<float>(), count_ * sizeof(float)));
  return ncclSuccess;
}

ncclResult_t Optimizer::loadState(const void* buffer, size_t bytes) {
  NCCLCHECK(status_);
  LionStateHeader h;
  NCCLCHECK(lionParseState(buffer, bytes, stateShape(), &h));
  const char* in = static_cast<const char*>(buffer) + sizeof(h);
  NCCLCHECK(comm_->copyFromHost(momentum_.as<float>(), in, count_ * sizeof(float)));
  if (hasMaster()) NCCLCHECK(comm_->copyFromHost(master_.as<float>(), in + count_ * sizeof(float), count_ * sizeof(float)));
  NCCLCHECK(comm_->copyFromHost(skipped_.as<uint64_t>(), &h.skipped, sizeof(h.skipped)));
  masterReady_ = h.masterReady != 0;
  steps_ = h.applied + h.skipped;
  return ncclSuccess;
}

}  // namespace lion
}  // namespace signlion
