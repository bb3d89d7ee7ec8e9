// Posting and progressing a batch of ncclNet sends and receives: the one
// place the host communicator drives the network. Keeps each comm's messages
// in the order they were added (ncclNet matches in order), retries a post the
// plugin cannot take yet, hands every completed receive to the caller at once
// (so its reduction overlaps the transfers still in flight), runs the
// caller's CPU work between passes instead of sleeping (packing what is sent
// next, unpacking what has arrived: the sockets' helper threads move the bytes
// meanwhile), and bounds every wait: no progress for timeoutMs is an error,
// never a hang.
#pragma once

#include <algorithm>
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
  void clear() {
    ops_.clear();
    sent_.clear();
  }
  // notify: a cookie that sent() lists once the send completes (kNoNotify: none).
  static constexpr size_t kNoNotify = ~size_t{0};
  void send(void* comm, void* data, size_t bytes, void* mhandle, size_t notify = kNoNotify) {
    ops_.push_back({true, comm, data, bytes, mhandle, notify, true});
  }
  // The notify cookies of the sends completed so far, in completion order;
  // the caller takes them (clearSent), so each is seen once, and an executor
  // frees a send's blocks without looking at every send in flight.
  const std::vector<size_t>& sent() const { return sent_; }
  void clearSent() { sent_.clear(); }
  // Room for n notifications, so that how many sends complete between two
  // takes (timing) never makes a warm call allocate.
  void reserveSent(size_t n) { sent_.reserve(n); }
  // cookie comes back to onRecv when this receive completes. exactSize:
  // a message of another size is an error here; otherwise any size up to
  // `bytes` goes to onRecv, which judges it.
  void recv(void* comm, void* data, size_t bytes, void* mhandle, size_t cookie, bool exactSize = true) {
    ops_.push_back({false, comm, data, bytes, mhandle, cookie, exactSize});
  }
  size_t size() const { return ops_.size(); }
  // Whether operation `index` (its position in the batch: size() before it
  // was added) has completed, as of the last pass.
  bool done(size_t index) const { return ops_[index].done; }
  // Inside run's work: every operation added so far has completed (as of the
  // pass just before this work call).
  bool allDone() const { return unfinished_ == 0; }

  // Runs the batch to completion. onRecv(cookie, bytes) -> ncclResult_t is
  // called once per receive, in completion order; its first error ends the
  // batch. Errors: onRecv's, the plugin's (ncclRemoteError for a dead peer),
  // ncclRemoteError after timeoutMs without progress, ncclInvalidUsage for a
  // message of the wrong size (after the receives posted before it on the
  // same comm have completed and been judged: a call header's verdict, which
  // names the disagreement, comes first).
  template <typename OnRecv>
  ncclResult_t run(OnRecv&& onRecv) {
    return run(onRecv, [](bool* more) {
      *more = false;
      return ncclSuccess;
    });
  }
  // The same, with work(bool* more) -> ncclResult_t called between passes
  // while it reports *more, and again after any pass that made progress: one
  // bounded piece of CPU work per call, which may add operations (send, recv)
  // to the batch. The batch ends when work has nothing more and every
  // operation is done; work's first error ends it.
  template <typename OnRecv, typename Work>
  ncclResult_t run(OnRecv&& onRecv, Work&& work);

 private:
  struct Op {
    bool isSend;
    void* comm;
    void* data;
    size_t bytes;
    void* mhandle;
    size_t cookie;
    bool exactSize;
    void* req = nullptr;
    bool posted = false;
    bool done = false;
  };
  ncclResult_t post(Op& op);
  // completed: done; *size: the bytes that came (receives).
  ncclResult_t test(Op& op, bool* completed, size_t* size);
  // A receive that completed with the wrong size: first complete and judge
  // the receives posted before it on its comm, bounded by the timeout.
  template <typename OnRecv>
  ncclResult_t wrongSize(size_t index, size_t size, OnRecv& onRecv);

  const Net& net_;
  int timeoutMs_;
  std::vector<Op> ops_;
  std::vector<size_t> sent_;     // notify cookies of completed sends, not taken yet
  std::vector<void*> blocked_;  // comms whose next op could not be posted this pass
  std::vector<void*> waitOn_;   // comms with an operation posted and not complete, this pass
  size_t unfinished_ = 0;       // operations not done after the last pass
};

template <typename OnRecv, typename Work>
ncclResult_t Transfers::run(OnRecv&& onRecv, Work&& work) {
  // A reply that comes within this is seen at once; after it the thread sleeps
  // on the network (a VM's wake-up costs tens of us, a spin costs a core).
  constexpr int64_t kSpinUs = 100;
  int64_t lastProgress = nowUs();
  bool moreWork = true;
  for (;;) {
    bool progress = false;
    size_t remaining = 0;
    blocked_.clear();
    // Sized before any wait, so a warm call allocates nothing here (work may
    // append operations: then once more, as ops_ itself grew).
    if (waitOn_.capacity() < ops_.size()) waitOn_.reserve(ops_.size());
    waitOn_.clear();
    // By index: work (below, between passes) may append operations, never here.
    for (size_t i = 0; i < ops_.size(); i++) {
      Op& op = ops_[i];
      if (op.done) continue;
      remaining++;
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
      size_t size = 0;
      NCCLCHECK(test(op, &completed, &size));
      if (completed) {
        op.done = true;
        remaining--;
        progress = true;
        if (op.isSend && op.cookie != kNoNotify) sent_.push_back(op.cookie);
        if (!op.isSend) {
          if (op.exactSize && size != op.bytes) return wrongSize(i, size, onRecv);
          NCCLCHECK(onRecv(op.cookie, size));
        }
      } else if (std::find(waitOn_.begin(), waitOn_.end(), op.comm) == waitOn_.end()) {
        waitOn_.push_back(op.comm);
      }
    }
    unfinished_ = remaining;
    moreWork |= progress;  // a completion may have made work (a range to unpack)
    if (moreWork) {
      // CPU work instead of a sleep: the operations in flight move meanwhile.
      NCCLCHECK(work(&moreWork));
      lastProgress = nowUs();
      continue;
    }
    if (remaining == 0) break;
    int64_t now = nowUs();
    if (progress) {
      lastProgress = now;
    } else if (now - lastProgress > (int64_t)timeoutMs_ * 1000) {
      WARN("host transfers: no progress for %d ms with %zu of %zu operations pending (peer dead or stalled?)",
           timeoutMs_, remaining, ops_.size());
      return ncclRemoteError;
    } else if (now - lastProgress > kSpinUs && !waitOn_.empty()) {
      // Every comm with an operation in flight: the first to have news wakes
      // the thread (sleeping on one comm while another's message has arrived
      // cost up to the whole 1 ms a step).
      net_.waitAny(waitOn_.data(), waitOn_.size(), 1);
    }
  }
  return ncclSuccess;
}

template <typename OnRecv>
ncclResult_t Transfers::wrongSize(size_t index, size_t size, OnRecv& onRecv) {
  const int64_t deadline = nowUs() + (int64_t)timeoutMs_ * 1000;
  for (size_t i = 0; i < index; i++) {
    Op& e = ops_[i];
    if (e.isSend || e.done || !e.posted || e.comm != ops_[index].comm) continue;
    size_t got = 0;
    while (!e.done) {
      bool completed = false;
      NCCLCHECK(test(e, &completed, &got));
      if (completed) break;
      if (nowUs() > deadline) return ncclRemoteError;
      net_.wait(e.comm, 1);
    }
    e.done = true;
    if (e.exactSize && got != e.bytes) continue;  // judged by the first wrong size below
    NCCLCHECK(onRecv(e.cookie, got));
  }
  WARN("host transfers: a receive of %zu bytes completed with %zu bytes: the ranks are not running the same call",
       ops_[index].bytes, size);
  return ncclInvalidUsage;
}

}  // namespace host
}  // namespace signlion
