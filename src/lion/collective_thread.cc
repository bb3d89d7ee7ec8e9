#include "lion/collective_thread.h"

#include <pthread.h>

#include <atomic>
#include <exception>
#include <map>

#include "common/clock.h"
#include "common/debug.h"

namespace signlion {
namespace lion {

std::shared_ptr<CollectiveThread> CollectiveThread::of(ncclSignComm_t comm) {
  static std::mutex registryMutex;
  // Weak: a communicator's thread ends with its last optimizer. Entries of
  // threads that ended are dropped here, so the map holds live ones only.
  static std::map<ncclSignComm_t, std::weak_ptr<CollectiveThread>> registry;
  static std::atomic<bool> warned{false};
  std::lock_guard<std::mutex> lock(registryMutex);
  for (auto it = registry.begin(); it != registry.end();) it = it->second.expired() ? registry.erase(it) : ++it;
  std::weak_ptr<CollectiveThread>& slot = registry[comm];
  std::shared_ptr<CollectiveThread> t = slot.lock();
  if (t != nullptr) return t;
  try {
    t.reset(new CollectiveThread(comm));
    t->thread_ = std::thread(&CollectiveThread::loop, t.get());
  } catch (const std::exception& e) {
    registry.erase(comm);
    if (!warned.exchange(true))
      WARN("Lion: cannot start a thread for the pipelined step's collectives (%s); the steps run them on the "
           "calling thread, not overlapped",
           e.what());
    return nullptr;
  }
  pthread_setname_np(t->thread_.native_handle(), "signlion-lion");
  slot = t;
  return t;
}

CollectiveThread::~CollectiveThread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

ncclResult_t CollectiveThread::start(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                                     const ncclSignCallConfig_t& rules, bool timed) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_) {
      WARN("Lion: a collective was started while the one before was in flight");
      return ncclInternalError;
    }
    votes_ = votes;
    count_ = count;
    type_ = type;
    op_ = op;
    rules_ = rules;
    timed_ = timed;
    result_ = ncclSuccess;
    pending_ = true;
  }
  changed_.notify_all();
  return ncclSuccess;
}

ncclResult_t CollectiveThread::wait(int64_t* beginUs, int64_t* endUs) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_; });
  if (timed_ && beginUs != nullptr && endUs != nullptr) {
    *beginUs = beginUs_;
    *endUs = endUs_;
  }
  const ncclResult_t r = result_;
  result_ = ncclSuccess;
  return r;
}

void CollectiveThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return pending_ || stopping_; });
    if (!pending_) return;  // stopping, nothing in flight
    void* votes = votes_;
    const size_t count = count_;
    const ncclDataType_t type = type_;
    const ncclSignOp_t op = op_;
    const ncclSignCallConfig_t rules = rules_;
    const bool timed = timed_;
    lock.unlock();
    const int64_t begin = timed ? nowUs() : 0;
    const ncclResult_t r = ncclSignHostAllReduceWithConfig(votes, votes, count, type, op, &rules, comm_);
    const int64_t end = timed ? nowUs() : 0;
    lock.lock();
    beginUs_ = begin;
    endUs_ = end;
    result_ = r;
    pending_ = false;
    changed_.notify_all();
  }
}

}  // namespace lion
}  // namespace signlion
