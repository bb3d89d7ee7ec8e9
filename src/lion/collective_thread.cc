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
                                     const ncclSignCallConfig_t& rules, bool timed, uint64_t* ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Call& c = slot(nextTicket_);
    if (c.state != State::kFree) {
      WARN("Lion: a collective was started while %d were queued or not waited for", kSlots);
      return ncclInternalError;
    }
    c.state = State::kQueued;
    c.ticket = nextTicket_;
    c.votes = votes;
    c.count = count;
    c.type = type;
    c.op = op;
    c.rules = rules;
    c.timed = timed;
    c.result = ncclSuccess;
    *ticket = nextTicket_++;
  }
  changed_.notify_all();
  return ncclSuccess;
}

ncclResult_t CollectiveThread::wait(uint64_t ticket, int64_t* beginUs, int64_t* endUs) {
  std::unique_lock<std::mutex> lock(mutex_);
  Call& c = slot(ticket);
  if (c.ticket != ticket || c.state == State::kFree) {
    WARN("Lion: wait for collective %llu, which is not queued", (unsigned long long)ticket);
    return ncclInternalError;
  }
  changed_.wait(lock, [&] { return c.state == State::kDone; });
  if (c.timed && beginUs != nullptr && endUs != nullptr) {
    *beginUs = c.beginUs;
    *endUs = c.endUs;
  }
  c.state = State::kFree;
  return c.result;
}

void CollectiveThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Queued calls run before the thread ends (their holders wait for them).
    changed_.wait(lock, [this] { return slot(nextRun_).state == State::kQueued || stopping_; });
    if (slot(nextRun_).state != State::kQueued) return;
    Call& c = slot(nextRun_);
    const Call call = c;
    lock.unlock();
    const int64_t begin = call.timed ? nowUs() : 0;
    const ncclResult_t r =
        ncclSignHostAllReduceWithConfig(call.votes, call.votes, call.count, call.type, call.op, &call.rules, comm_);
    const int64_t end = call.timed ? nowUs() : 0;
    lock.lock();
    c.beginUs = begin;
    c.endUs = end;
    c.result = r;
    c.state = State::kDone;
    nextRun_++;
    changed_.notify_all();
  }
}

}  // namespace lion
}  // namespace signlion
