// lion::CollectiveThread: a thread of its own for the sign all-reduce calls
// of the host optimizers on one communicator, so that a pipelined step
// (distributed_lion.cc) runs the Lion passes over its next and previous
// chunks while the chunk in between is on the wire. One call in flight at a
// time: a communicator runs one call at a time anyway, so every optimizer on
// it shares this thread (CollectiveThread::of), and while a call is in
// flight the communicator belongs to this thread.
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

  // Starts ncclSignHostAllReduceWithConfig in place on votes, with the
  // caller's rules (optimizers sharing the thread may vote by different
  // ones), and returns. ncclInternalError (and a WARN) when a call is still
  // in flight: every start must have its wait first.
  // timed: the thread reads the clock when the call begins and returns
  // (wait hands both over); untimed, it reads no clock.
  ncclResult_t start(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                     const ncclSignCallConfig_t& rules, bool timed = false);
  // Returns once the call started last has, with its result (ncclSuccess
  // when none was started). A timed call's begin and end (nowUs) go to
  // *beginUs and *endUs where both are given; they are left alone otherwise.
  ncclResult_t wait(int64_t* beginUs = nullptr, int64_t* endUs = nullptr);

 private:
  explicit CollectiveThread(ncclSignComm_t comm) : comm_(comm) {}
  void loop();

  ncclSignComm_t comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool pending_ = false;   // a call was started and has not returned
  bool stopping_ = false;  // the destructor asks the thread to end
  ncclResult_t result_ = ncclSuccess;
  void* votes_ = nullptr;
  size_t count_ = 0;
  ncclDataType_t type_ = ncclInt8;
  ncclSignOp_t op_ = ncclSignMajority;
  ncclSignCallConfig_t rules_ = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
  bool timed_ = false;
  int64_t beginUs_ = 0, endUs_ = 0;  // the last timed call's
  std::thread thread_;
};

}  // namespace lion
}  // namespace signlion
