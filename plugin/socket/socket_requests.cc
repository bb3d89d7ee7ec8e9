// The transport's entry points on requests (socket_transport.h): memory
// registration, isend, irecv, iflush and test, and waiting on comms
// (socketCommWaitAny) for a caller that would rather sleep than spin.
#include "socket/socket_comm.h"

#include <poll.h>
#include <unistd.h>

#include <cstddef>

#include "common/checks.h"
#include "transport/byte_ranges.h"

namespace signlion {
namespace net {
namespace sock {

namespace {

Request* allocRequest(Comm* c) {
  Request* r = c->reqs.acquire();
  if (r == nullptr) return nullptr;
  r->comm = c;
  r->ctrlDone = false;
  r->pending.store(0, std::memory_order_relaxed);
  return r;
}

bool checkMr(Comm* c, void* mhandle, const void* data, size_t size) {
  if (mhandle == nullptr) return true;  // NCCL always registers; in-process users may not
  std::lock_guard<std::mutex> lk(c->mrMutex);
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  if (c->mrs.count(mr) == 0) return false;
  const char* p = static_cast<const char*>(data);
  return size == 0 || (p >= mr->base && p + size <= mr->base + mr->size);
}

// Requests not complete yet with a buffer in [base, base + size): a helper
// or the control path may still move their bytes. The table is the
// caller's (as every request entry point): no lock, no system call.
int requestsUsing(Comm* c, const char* base, size_t size) {
  int n = 0;
  for (Request& r : c->reqs) {
    if (!r.used) continue;
    bool complete = r.pending.load(std::memory_order_acquire) == 0;
    if (r.isSend)
      complete &= r.ctrlDone;
    else
      for (int i = 0; i < r.n; i++) complete &= r.sub[i].matched;
    if (complete) continue;
    for (int i = 0; i < r.n; i++)
      if (rangesOverlap(r.sub[i].data, r.sub[i].posted, base, size)) {
        n++;
        break;
      }
  }
  return n;
}

}  // namespace

}  // namespace sock

using namespace sock;

ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  ARGCHECK(mhandle != nullptr, "regMr", "mhandle", "NULL");
  *mhandle = nullptr;
  Comm* c = asAnyComm(comm);
  ARGCHECK(c != nullptr, "regMr", "comm", "%p is not a send or recv comm", comm);
  ARGCHECK(type == NCCL_PTR_HOST, "regMr", "type", "%d: only host memory (NCCL_PTR_HOST) is supported", type);
  ARGCHECK(data != nullptr || size == 0, "regMr", "data", "NULL with size %zu", size);
  MemRegion* mr = new MemRegion{kMrMagic, c, static_cast<char*>(data), size};
  std::lock_guard<std::mutex> lk(c->mrMutex);
  c->mrs.insert(mr);
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t socketRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle) {
  // We do not advertise NCCL_PTR_DMABUF; host memory needs no file descriptor.
  return socketRegMr(comm, data, size, type, mhandle);
}

ncclResult_t socketDeregMr(void* comm, void* mhandle) {
  Comm* c = asAnyComm(comm);
  ARGCHECK(c != nullptr, "deregMr", "comm", "%p is not a send or recv comm", comm);
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::unique_lock<std::mutex> lk(c->mrMutex);
  ARGCHECK(mr != nullptr && c->mrs.count(mr) == 1, "deregMr", "mhandle", "%p is not registered on comm %p", mhandle,
           comm);
  const char* base = mr->base;
  const size_t size = mr->size;
  c->mrs.erase(mr);
  mr->magic = 0;
  delete mr;
  lk.unlock();
  // NCCL frees the memory once this returns, also on an abort with
  // transfers on it in flight (then it closes the comm): cancel those.
  int busy = requestsUsing(c, base, size);
  return busy == 0 ? ncclSuccess : cancelForDeregistration(c, busy);
}

ncclResult_t socketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  ARGCHECK(request != nullptr, "isend", "request", "NULL");
  *request = nullptr;
  SendComm* c = static_cast<SendComm*>(asComm(sendComm, kCommSend));
  ARGCHECK(c != nullptr, "isend", "sendComm", "%p is not a send comm", sendComm);
  ARGCHECK(data != nullptr || size == 0, "isend", "data", "NULL with size %zu", size);
  ARGCHECK(size <= kSocketMaxMessage, "isend", "size", "%zu exceeds maxP2pBytes %zu", size, kSocketMaxMessage);
  ARGCHECK(checkMr(c, mhandle, data, size), "isend", "mhandle", "%p does not cover [%p, +%zu) on this comm", mhandle,
           data, size);
  int err = c->error.load(std::memory_order_acquire);
  if (err != ncclSuccess) return (ncclResult_t)err;
  Request* r = allocRequest(c);
  if (r == nullptr) return ncclSuccess;  // all slots busy: NCCL retries
  r->isSend = true;
  r->n = 1;
  r->sub[0] = SubRequest{static_cast<char*>(data), size, size, tag, true};
  if (c->peerClosed.load(std::memory_order_acquire)) {  // nobody reads: done, not delivered
    r->ctrlDone = true;
    *request = r;
    return ncclSuccess;
  }
  uint64_t seq = c->seq++;
  // Header first, then the payload: the receiver matches the header and
  // starts reading the data streams while this thread is still copying the
  // payload in (with the header last, a 256 KiB message was copied in whole
  // before the receiver began to copy it out; the plain socket overlaps both).
  if (!c->ctrlQueue.push_back(r)) return ncclInternalError;  // bounded by the request table
  progressSendCtrl(c);
  if (size > c->inlineMax) {
    r->pending.fetch_add(size, std::memory_order_acq_rel);
    enqueueStreams(c, seq, r->sub[0].data, size, r);
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t socketIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                         void** request) {
  ARGCHECK(request != nullptr, "irecv", "request", "NULL");
  *request = nullptr;
  RecvComm* c = static_cast<RecvComm*>(asComm(recvComm, kCommRecv));
  ARGCHECK(c != nullptr, "irecv", "recvComm", "%p is not a recv comm", recvComm);
  ARGCHECK(n >= 1 && n <= kSocketMaxRecvs, "irecv", "n", "%d not in [1, %d]", n, kSocketMaxRecvs);
  ARGCHECK(data != nullptr && sizes != nullptr && tags != nullptr, "irecv",
           data == nullptr    ? "data"
           : sizes == nullptr ? "sizes"
                              : "tags",
           "NULL");
  for (int i = 0; i < n; i++) {
    ARGCHECK(data[i] != nullptr || sizes[i] == 0, "irecv", "data", "data[%d] NULL with size %zu", i, sizes[i]);
    ARGCHECK(checkMr(c, mhandles ? mhandles[i] : nullptr, data[i], sizes[i]), "irecv", "mhandles",
             "mhandles[%d] does not cover data[%d]", i, i);
  }
  int err = c->error.load(std::memory_order_acquire);
  if (err != ncclSuccess) return (ncclResult_t)err;
  Request* r = allocRequest(c);
  if (r == nullptr) return ncclSuccess;
  r->isSend = false;
  r->n = n;
  for (int i = 0; i < n; i++) r->sub[i] = SubRequest{static_cast<char*>(data[i]), sizes[i], 0, tags[i], false};
  bool ok = true;
  bool posted = c->matcher.post(r, n, tags, [&](Matcher::Kept& k) { ok &= fillSlot(c, r, k.slot, k.tag, k.msg.size); });
  if (!posted) return ncclInternalError;  // bounded by the request table
  if (!ok) return (ncclResult_t)c->error.load(std::memory_order_acquire);
  deliverKept(c);
  progressRecvCtrl(c, false);
  *request = r;
  return ncclSuccess;
}

ncclResult_t socketIflush(void* recvComm, int, void**, int*, void**, void** request) {
  ARGCHECK(request != nullptr, "iflush", "request", "NULL");
  ARGCHECK(asComm(recvComm, kCommRecv) != nullptr, "iflush", "recvComm", "%p is not a recv comm", recvComm);
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t socketTest(void* request, int* done, int* sizes) {
  ARGCHECK(done != nullptr, "test", "done", "NULL");
  *done = 0;
  Request* r = static_cast<Request*>(request);
  ARGCHECK(r != nullptr && r->used && r->comm != nullptr && r->comm->magic == kCommMagic, "test", "request",
           "%p is not an outstanding request", request);
  Comm* c = r->comm;
  if (c->isSend)
    progressSendCtrl(static_cast<SendComm*>(c));
  else
    progressRecvCtrl(static_cast<RecvComm*>(c), true);
  callerProgressStreams(c);
  int err = c->error.load(std::memory_order_acquire);
  if (err != ncclSuccess) return (ncclResult_t)err;
  if (c->peerClosed.load(std::memory_order_acquire)) discardSends(static_cast<SendComm*>(c));  // a send comm
  bool complete = r->pending.load(std::memory_order_acquire) == 0;
  if (r->isSend)
    complete &= r->ctrlDone;
  else
    for (int i = 0; i < r->n; i++) complete &= r->sub[i].matched;
  if (!complete) return ncclSuccess;
  if (sizes != nullptr)
    for (int i = 0; i < r->n; i++) sizes[i] = (int)r->sub[i].size;
  c->reqs.release(r);
  *done = 1;
  return ncclSuccess;
}

namespace {

// The most descriptors one commWaitAny call watches: on the stack, so a warm
// caller never allocates. A comm needs its wake-up descriptor, its control
// socket and its busy data streams: 1024 covers an all-gather at N = 16 (30
// comms) with 32 streams each. Comms past it are not watched, and the wait is
// then cut to 1 ms (slower, never a missed wake-up for longer than that).
constexpr size_t kMaxWaitFds = 1024;

struct WaitSet {
  pollfd fds[kMaxWaitFds];
  bool isWake[kMaxWaitFds];
  size_t n = 0;
  bool full = false;  // a comm, or some of its streams, did not fit
};

// Adds what one comm waits on to `w` (its wakeFd first); false when the comm
// has something to do at once, so the caller must not sleep at all.
bool addWaitFds(void* comm, WaitSet* w) {
  Comm* c = asAnyComm(comm);
  if (c == nullptr) return true;
  SendComm* sc = c->isSend ? static_cast<SendComm*>(c) : nullptr;
  RecvComm* rc = c->isSend ? nullptr : static_cast<RecvComm*>(c);
  // Headers and inline payloads arrive on ctrlFd (a send waits for room to
  // write there); helpers signal data-stream completions on wakeFd; a stream
  // with queued tasks wakes the caller directly, so it can move the bytes
  // itself in test() without waiting for a helper's hand-off.
  if (rc != nullptr && rc->matcher.anyPosted() &&
      headerStaged(rc->stage.data() + rc->stageHead, rc->stageTail - rc->stageHead))
    return false;                                                   // parse first
  if (c->peerClosed.load(std::memory_order_acquire)) return false;  // sends complete at once
  auto add = [&](int fd, short events, bool wake) {
    if (w->n == kMaxWaitFds) {
      w->full = true;
      return;
    }
    w->fds[w->n] = {fd, events, 0};
    w->isWake[w->n++] = wake;
  };
  const short dir = c->isSend ? POLLOUT : POLLIN;
  add(c->wakeFd, POLLIN, true);
  // A receiver reads its control socket only while a receive is posted or a
  // message is being taken in (progressRecvCtrl leaves a header that no
  // receive claims in the socket): watching it otherwise would wake the
  // caller at once on every pass, for nothing.
  if (sc != nullptr ? !sc->ctrlQueue.empty() : (rc->matcher.anyPosted() || rc->rxActive)) add(c->ctrlFd, dir, false);
  for (Stream& st : c->streams) {
    if (st.queued.load(std::memory_order_acquire) == 0) continue;
    // A helper in the middle of moving this stream's bytes keeps it readable
    // or writable; test() would only fail its try_lock. Leave the stream to
    // the helper then (its completion signals wakeFd) rather than spin.
    if (!st.ioMu.try_lock()) continue;
    st.ioMu.unlock();
    add(st.fd, dir, false);
  }
  return true;
}

}  // namespace

void socketCommWait(void* comm, int timeoutMs) { socketCommWaitAny(&comm, 1, timeoutMs); }

void socketCommWaitAny(void* const* comms, size_t n, int timeoutMs) {
  WaitSet w;
  for (size_t i = 0; i < n; i++)
    if (!addWaitFds(comms[i], &w)) return;
  if (w.full && timeoutMs > 1) timeoutMs = 1;
  if (w.n == 0 || poll(w.fds, w.n, timeoutMs) <= 0) return;
  for (size_t i = 0; i < w.n; i++) {
    if (!w.isWake[i] || !(w.fds[i].revents & POLLIN)) continue;
    uint64_t drained;
    (void)!read(w.fds[i].fd, &drained, sizeof(drained));
  }
}

int socketCommStreams(void* comm) {
  const CommHeader* h = static_cast<const CommHeader*>(comm);
  if (h == nullptr || h->magic != kCommMagic || (h->kind != kCommSend && h->kind != kCommRecv)) return 0;
  return static_cast<const Comm*>(h)->nsocks;
}

}  // namespace net
}  // namespace signlion
