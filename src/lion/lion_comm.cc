#include "lion/lion_comm.h"

#include <cstdlib>
#include <cstring>

#include "common/checks.h"

namespace signlion {
namespace lion {

HostCommunicator::HostCommunicator(ncclSignComm_t comm, const ncclSignCallConfig_t& rules)
    : comm_(comm), rules_(rules) {
  if (comm_ == nullptr) return;
  ncclSignCommCount(comm, &nranks_);
  ncclSignCommUserRank(comm, &rank_);
}

HostCommunicator::~HostCommunicator() {
  while (startedCount_ > 0) (void)signAllReduceWait(nullptr, nullptr);
}

ncclResult_t HostCommunicator::signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) {
  return ncclSignHostAllReduceWithConfig(votes, votes, count, type, op, &rules_, comm_);
}

ncclResult_t HostCommunicator::signAllReduceStart(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                                                  bool timed) {
  if (thread_ == nullptr && !noThread_ && overlapsCollectives()) {
    thread_ = CollectiveThread::of(comm_);
    noThread_ = thread_ == nullptr;
  }
  if (thread_ == nullptr) return signAllReduce(votes, count, type, op);
  if (startedCount_ == kMaxStarted) {
    WARN("Lion: a collective was started while %d were not waited for", kMaxStarted);
    return ncclInternalError;
  }
  uint64_t ticket = 0;
  NCCLCHECK(thread_->start(votes, count, type, op, rules_, timed, &ticket));
  started_[startedCount_++] = ticket;
  return ncclSuccess;
}
ncclResult_t HostCommunicator::signAllReduceWait(int64_t* beginUs, int64_t* endUs) {
  if (thread_ == nullptr || startedCount_ == 0) return ncclSuccess;
  const uint64_t oldest = started_[0];
  for (int i = 1; i < startedCount_; i++) started_[i - 1] = started_[i];
  startedCount_--;
  return thread_->wait(oldest, beginUs, endUs);
}
ncclResult_t HostCommunicator::sumAllReduce(float* x, size_t count) {
  return ncclSignHostSumAllReduce(x, x, count, ncclFloat32, comm_);
}

ncclResult_t HostCommunicator::allocate(size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return ncclSuccess;
  *ptr = calloc(1, bytes);
  if (*ptr == nullptr) {
    WARN("Lion: cannot allocate %zu bytes of optimizer state", bytes);
    return ncclSystemError;
  }
  return ncclSuccess;
}

void HostCommunicator::release(void* ptr) { free(ptr); }

ncclResult_t HostCommunicator::copyToHost(void* host, const void* src, size_t bytes) {
  if (bytes > 0) memcpy(host, src, bytes);
  return ncclSuccess;
}

ncclResult_t HostCommunicator::copyFromHost(void* dst, const void* host, size_t bytes) {
  if (bytes > 0) memcpy(dst, host, bytes);
  return ncclSuccess;
}

ncclResult_t HostCommunicator::interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor,
                                                  float* momentum, VoteEncoding encoding, void* votes, size_t count,
                                                  const Coefficients& k, const float* skip) {
  if (skip == nullptr || *skip == 0.0f)
    lion::interpolateAndVote(gradType, grads, divisor, momentum, encoding, votes, count, k);
  return ncclSuccess;
}

ncclResult_t HostCommunicator::applyUpdate(ncclDataType_t paramType, void* params, float* master,
                                           ncclDataType_t updateType, const void* update, size_t count, float lr,
                                           float weightDecay, const float* skip, uint64_t* skipped) {
  if (skip != nullptr && *skip != 0.0f) {
    if (skipped != nullptr) ++*skipped;
    return ncclSuccess;
  }
  lion::applyUpdate(paramType, params, master, updateType, update, count, lr, weightDecay);
  return ncclSuccess;
}

ncclResult_t HostCommunicator::flagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag) {
  *flag = allFinite(type, x, count) ? 0.0f : 1.0f;
  return ncclSuccess;
}

ncclResult_t HostCommunicator::toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) {
  lion::toFloat(type, x, dst, count);
  return ncclSuccess;
}

ncclResult_t HostCommunicator::divide(float* x, float divisor, size_t count) {
  lion::divide(x, divisor, count);
  return ncclSuccess;
}

}  // namespace lion
}  // namespace signlion
