// lion::CollectiveThread: a thread of its own for the sign all-reduce calls
// of the host optimizers on one communicator, so that a pipelined step
// (distributed_lion.cc) runs the Lion passes over its next and previous
// chunks while the chunks in between are on the wire. A communicator runs
// one call at a time anyway, so every optimizer on it shares this thread
// (CollectiveThread::of), which runs the calls started in the order they
// were started; while a call is queued or in flight the communicator belongs
// to this thread. Several calls may be queued (kSlots over all callers):
// the thread goes from one call straight to the next, so the wire does not
// idle while the caller wakes up to start the next chunk.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "nccl_sign.h"

namespace signlion {
namespace lion {

class CollectiveThread {
 public:
  // The thread of comm, shared by every caller holding it (the last holder
  // joins it). Null, after one WARN per process, when no thread can be
  // started: the caller then runs its calls itself.
  static std::shared_ptr<CollectiveThread> of(ncclSignComm_t comm);

  CollectiveThread(const CollectiveThread&) = delete;
  CollectiveThread& operator=(const CollectiveThread&) = delete;
  ~CollectiveThread();

  // Calls queued or in flight at once, over every caller of the thread.
  static constexpr int kSlots = 4;

  // Queues ncclSignHostAllReduceWithConfig in place on votes, with the
  // caller's rules (optimizers sharing the thread may vote by different
  // ones), and returns; *ticket names the call for wait. ncclInternalError
  // (and a WARN) when kSlots calls are already queued or not yet waited for.
  // timed: the thread reads the clock when the call begins and returns
  // (wait hands both over); untimed, it reads no clock.
  ncclResult_t start(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                     const ncclSignCallConfig_t& rules, bool timed, uint64_t* ticket);
  // Returns once the call of `ticket` has, with its result, and frees its
  // slot (each started call is waited for exactly once). A timed call's
  // begin and end (nowUs) go to *beginUs and *endUs where both are given;
  // they are left alone otherwise.
  ncclResult_t wait(uint64_t ticket, int64_t* beginUs = nullptr, int64_t* endUs = nullptr);

 private:
  explicit CollectiveThread(ncclSignComm_t comm) : comm_(comm) {}
  void loop();

  enum class State { kFree, kQueued, kDone };
  struct Call {
    State state = State::kFree;
    uint64_t ticket = 0;
    void* votes = nullptr;
    size_t count = 0;
    ncclDataType_t type = ncclInt8;
    ncclSignOp_t op = ncclSignMajority;
    ncclSignCallConfig_t rules = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
    bool timed = false;
    ncclResult_t result = ncclSuccess;
    int64_t beginUs = 0, endUs = 0;
  };
  Call& slot(uint64_t ticket) { return calls_[ticket % kSlots]; }

  ncclSignComm_t comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  Call calls_[kSlots];
  uint64_t nextTicket_ = 0;  // the next start's
  uint64_t nextRun_ = 0;     // the call the thread runs next: every earlier one has returned
  bool stopping_ = false;    // the destructor asks the thread to end
  std::thread thread_;
};

}  // namespace lion
}  // namespace signlion
