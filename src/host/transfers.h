// Posting and progressing a batch of ncclNet sends and receives: the one
// place the host communicator drives the network. Keeps each comm's messages
// in the order they were added (ncclNet matches in order), retries a post the
// plugin cannot take yet, hands every completed receive to the caller at once
// (so its reduction overlaps the transfers still in flight), and bounds every
// wait: no progress for timeoutMs is an error, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/checks.h"
#include "common/clock.h"
#include "host/net.h"

namespace signlion {
namespace host {

class Transfers {
 public:
  Transfers(const Net& net, int timeoutMs) : net_(net), timeoutMs_(timeoutMs) {}

  // Forgets the last batch; capacity is kept, so a warm communicator does not
  // allocate here.
  void clear() { ops_.clear(); }
  void send(void* comm, void* data, size_t bytes, void* mhandle) { ops_.push_back({true, comm, data, bytes, mhandle, 0}); }
  // cookie comes back to onRecv when this receive completes.
  void recv(void* comm, void* data, size_t bytes, void* mhandle, size_t cookie) {
    ops_.push_back({false, comm, data, bytes, mhandle, cookie});
  }
  size_t size() const { return ops_.size(); }

  // Runs the batch to completion. onRecv(cookie) is called once per receive,
  // in completion order. Errors: the plugin's (ncclRemoteError for a dead
  // peer), ncclRemoteError after timeoutMs without progress, ncclInternalError
  // for a message of the wrong size.
  template <typename OnRecv>
  ncclResult_t run(OnRecv&& onRecv);

 private:
  struct Op {
    bool isSend;
    void* comm;
    void* data;
    size_t bytes;
    void* mhandle;
    size_t cookie;
    void* req = nullptr;
    bool posted = false;
    bool done = false;
  };
  ncclResult_t post(Op& op);
  ncclResult_t test(Op& op, bool* completed);

  const Net& net_;
  int timeoutMs_;
  std::vector<Op> ops_;
  std::vector<void*> blocked_;  // comms whose next op could not be posted this pass
};

template <typename OnRecv>
ncclResult_t Transfers::run(OnRecv&& onRecv) {
  // A reply that comes within this is seen at once; after it the thread sleeps
  // on the network (a VM's wake-up costs tens of us, a spin costs a core).
  constexpr int64_t kSpinUs = 100;
  size_t remaining = ops_.size();
  int64_t lastProgress = nowUs();
  while (remaining > 0) {
    bool progress = false;
    blocked_.clear();
    void* waitOn = nullptr;
    for (Op& op : ops_) {
      if (op.done) continue;
      if (!op.posted) {
        bool isBlocked = false;
        for (void* c : blocked_) isBlocked |= c == op.comm;
        if (isBlocked) continue;  // keep this comm's order
        NCCLCHECK(post(op));
        if (!op.posted) {
          blocked_.push_back(op.comm);
          continue;
        }
        progress = true;
      }
      bool completed = false;
      NCCLCHECK(test(op, &completed));
      if (completed) {
        op.done = true;
        remaining--;
        progress = true;
        if (!op.isSend) onRecv(op.cookie);
      } else if (waitOn == nullptr) {
        waitOn = op.comm;
      }
    }
    int64_t now = nowUs();
    if (progress) {
      lastProgress = now;
    } else if (now - lastProgress > (int64_t)timeoutMs_ * 1000) {
      WARN("host transfers: no progress for %d ms with %zu of %zu operations pending (peer dead or stalled?)",
           timeoutMs_, remaining, ops_.size());
      return ncclRemoteError;
    } else if (now - lastProgress > kSpinUs && waitOn != nullptr) {
      net_.wait(waitOn, 1);
    }
  }
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
