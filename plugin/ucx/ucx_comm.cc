// Comm lifetime (ucx_comm.h): what a comm's close waits for, when it is
// parked rather than freed, the orderly close (flush before the bye, sends
// discarded after the receiver's), peer liveness, abort and close.
#include "ucx/ucx_comm.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/checks.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace ucx {

Comm* asComm(void* p, CommKind kind) {
  Comm* c = static_cast<Comm*>(static_cast<CommHeader*>(p));
  if (c == nullptr || c->magic != kCommMagic || c->kind != (uint32_t)kind) return nullptr;
  return c;
}

// Sends that completed locally (eager) reach the receiver before our bye
// does: it fails a receive still waiting when the bye comes. Over TCP that
// takes a round trip through the receiver's worker: UCX 1.13 marks a TCP
// endpoint that sent anything as needing a flush, and ucp_ep_flush_nbx then
// sends a zero-length PUT and completes on the PUT ACK (uct_tcp_ep_flush,
// tcp_ep.c), which the receiver writes only inside its worker's progress.
// A receiver that closed its recv comm (its bye) progresses that worker no
// more: a survivor of an abort replaces it (taintWorker) and never calls it
// again. So the wait ends at the receiver's bye or death as well as at the
// flush: a closed receiver wants nothing we sent, and waiting out the bound
// there made an abort take 2 s (the killed-rank test's survivors then missed
// their new communicator's bootstrap timeout). The caller holds workerLock().
void flushBeforeBye(SendComm* c) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  void* req = ucp_ep_flush_nbx(c->ep, &p);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  int64_t start = monotonicMs(), limit = std::min<int64_t>(socketTimeoutMs(), 2000);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && monotonicMs() - start < limit &&
         checkPeer(c, false) == OobWatch::kAlive)
    progress(c);
  ucp_request_free(req);  // released now, or by UCX once it completes (the force close in destroyComm)
}

namespace {

// Setup messages (confirmEndpoint) whose UCX requests are still in flight.
int setupInFlight(Comm* c) {
  int n = 0;
  for (int i = 0; i < 3; i++) n += c->setupPosted[i] && !c->setup[i].done ? 1 : 0;
  return n;
}

bool slotsPending(Comm* c) {
  if (setupInFlight(c) > 0) return true;
  for (Request& r : c->reqs)
    for (int i = 0; r.used && i < r.n; i++)
      if (!r.slots[i].done) return true;
  return false;
}

// How many of c's requests (setup messages included) are in flight.
int slotsInFlight(Comm* c) {
  int n = setupInFlight(c);
  for (Request& r : c->reqs)
    for (int i = 0; r.used && i < r.n; i++) n += r.slots[i].done ? 0 : 1;
  return n;
}

// Progresses the worker until none of c's requests is in flight, limitMs at
// most, or idleMs without one finishing. The caller holds workerLock().
bool drainSlots(Comm* c, int64_t limitMs, int64_t idleMs) {
  int64_t start = monotonicMs(), lastMove = start;
  int left = slotsInFlight(c);
  while (left > 0) {
    int64_t now = monotonicMs();
    if (now - start >= limitMs || now - lastMove >= idleMs) break;
    progress(c);
    int n = slotsInFlight(c);
    if (n < left) lastMove = monotonicMs();
    left = n;
  }
  return left == 0;
}

// Closes a send comm's endpoint with UCP_EP_CLOSE_FLAG_FORCE, which cancels
// every send on it (their callbacks run with UCS_ERR_CANCELED once the lanes
// are discarded, a few progress calls later), waiting limitMs at most.
// Needs peer error handling: UCX refuses the force close without it.
void forceCloseEndpoint(SendComm* sc, int64_t limitMs) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (void)waitUcx(sc, ucp_ep_close_nbx(sc->ep, &p), limitMs);
  sc->ep = nullptr;
}

// Comms whose requests UCX still holds after their close: their slots must
// outlive those requests (a late callback writes into them). That happens
// when
//   - a send comm's endpoint has no peer error handling (shared memory):
//     rendezvous sends the receiver never took cannot be closed by force
//     (ucp_ep_close_nbx refuses), and their endpoint stays open;
//   - a recv comm closes while a receive is inside its rendezvous (matched,
//     fetching the data) with a sender that stopped or died: no cancel
//     reaches the fetch.
// Such a comm is kept (unusable: its magic is cleared) until exit: at most
// one per comm closed that way, with a WARN, instead of an abort. The shared
// worker itself is never destroyed, so UCX 1.13's aborts on destroying a
// worker that still tracks requests or a queued wireup reply (ucp_ep.c:437,
// ucp_request.c:684) cannot happen.
struct Parked {
  std::mutex mu;
  std::vector<Comm*> comms;
};
void parkComm(Comm* c) {
  static Parked* p = new Parked();
  const char* what =
      c->isSend ? "sends its peer never took" : "receives in their rendezvous with a sender that stopped";
  const char* tls = getenv("UCX_TLS") ? getenv("UCX_TLS") : "";
  // After the peer's bye this is the ordinary end of an in-order close on
  // shared memory (the receiver went first): no warning, only the log.
  if (c->oob.state() == OobWatch::kClosed)
    INFO(kSubsysNet, "NET/signlion-ucx: %s comm %p closed with %s (UCX_TLS=%s); it is kept until exit",
         c->isSend ? "send" : "recv", (void*)c, what, tls);
  else
    WARN("NET/signlion-ucx: %s comm %p closed with %s UCX could not cancel (UCX_TLS=%s); it is kept until exit",
         c->isSend ? "send" : "recv", (void*)c, what, tls);
  c->magic = 0;
  std::lock_guard<std::mutex> lk(p->mu);
  p->comms.push_back(c);
}

}  // namespace

// Send comms whose connect is in progress (connect_registry.h).
ConnectRegistry& connectsInProgress() {
  static ConnectRegistry r;
  return r;
}

void destroyComm(Comm* c) {
  SendComm* sc = c->isSend ? static_cast<SendComm*>(c) : nullptr;
  connectsInProgress().remove(c);
  if (c->fd >= 0 && (sc == nullptr || sc->connState >= 2)) heartbeatRemove(c->fd);
  if (c->worker != nullptr && !c->isSend) {
    // Setup receives of a connection accept refused (posted once its reply
    // was out: the connector timed out or closed, or a stranger held the
    // secret). One no message matched is still in the worker's expected
    // queue: UCX 1.13's ucp_request_cancel takes it out and completes it
    // with UCS_ERR_CANCELED at once (its callback runs inside the cancel),
    // so it is done here and leaves nothing of ours in the worker. Only one
    // that matched could stay in flight, and only that one taints the
    // worker below: cancelling first keeps a refusal from replacing the
    // process's shared worker and from draining in accept().
    for (Slot& s : c->setup)
      if (s.ureq != nullptr) ucp_request_cancel(c->worker, s.ureq);
  }
  if (c->worker != nullptr &&
      (slotsPending(c) || c->warned || (sc != nullptr && (sc->epStatus != UCS_OK || sc->epForced || sc->orphans > 0))))
    taintWorker(c);
  bool park = false;
  if (c->worker != nullptr && !c->isSend) {
    // Receives already matched finish first (their senders' rendezvous
    // completes with them); those no message came for are cancelled, which
    // completes them at once (their callbacks run inside ucp_request_cancel).
    if (slotsPending(c) && checkPeer(c, true) == OobWatch::kAlive) (void)drainSlots(c, 1000, 100);
    for (Request& r : c->reqs)
      for (int i = 0; r.used && i < r.n; i++)
        if (r.slots[i].ureq != nullptr) ucp_request_cancel(c->worker, r.slots[i].ureq);
    // One still pending was matched and is in its rendezvous with a sender
    // that stopped: UCX tracks its fetch of the data.
    park = slotsPending(c);
  }
  if (c->worker != nullptr && sc != nullptr && sc->ep != nullptr) {
    int64_t limit = std::min<int64_t>(socketTimeoutMs(), 2000);
    bool peerMode = !sc->epNoErrHandling;
    if (!peerMode && slotsPending(c) && checkPeer(c, true) == OobWatch::kAlive)
      (void)drainSlots(c, limit, 200);  // no force close here: let the receiver take them
    if (peerMode) {
      forceCloseEndpoint(sc, limit);  // cancels every send
      if (checkPeer(c, true) == OobWatch::kAlive) (void)drainSlots(c, limit, limit);
    } else if (!slotsPending(c) && sc->orphans == 0) {
      ucp_request_param_t p;
      memset(&p, 0, sizeof(p));
      (void)waitUcx(c, ucp_ep_close_nbx(sc->ep, &p), limit);  // flush: nothing of ours left in it
      sc->ep = nullptr;
    }
  }
  if (c->worker != nullptr && sc != nullptr) park = slotsPending(c) || sc->orphans > 0;
  if (!c->byeSent) OobWatch::sayBye(c->fd);
  closeFd(&c->fd);
  {
    std::lock_guard<std::mutex> lk(c->mrMu);
    for (MemRegion* mr : c->mrs) {
      if (mr->memh != nullptr) ucp_mem_unmap(global().context, mr->memh);
      mr->magic = 0;
      delete mr;
    }
    c->mrs.clear();
  }
  if (park) {
    parkComm(c);
    return;
  }
  c->magic = 0;
  if (sc != nullptr)
    delete sc;  // no virtual destructor: a vtable would move the CommHeader off the start of the object
  else
    delete c;
}

// A comm closed with requests in flight: UCX may still write into the
// caller's receive buffers (a receive matched, its rendezvous under way) or
// read its send buffers (shared memory: sends the receiver has not taken,
// which no force close can cut short), and the caller frees them once close
// returns: a late write corrupted the heap, a late read delivered garbage
// reported as received. So close waits until UCX is done with them:
//   - recv comm: its unmatched receives are cancelled (done at once), the
//     bye goes out first, so the sender cuts its sends short or completes
//     them; a matched receive whose sender closed (said bye) first gets
//     kSettleIdleMs without finishing: the sender's close force-closed its
//     endpoint before its bye (TCP: nothing more comes) or its data is in
//     shared memory (the copy is ours and finishes inside that time);
//   - send comm without peer error handling (shared memory): until the
//     receiver took the sends, or closed (its comm id is then never posted
//     again: nothing will fetch them) or died;
// and in both until the peer died, at most SIGNLION_SOCKET_TIMEOUT. The
// process lock is taken for one progress step at a time, so the other
// comms' calls go on meanwhile (this comm's own calls are over: the caller
// is closing it). Only a comm still busy after that is parked (destroyComm).
void waitForCallerBuffers(Comm* c) {
  {
    std::lock_guard<std::mutex> lk(workerLock());
    if (c->worker == nullptr || !slotsPending(c)) return;
    if (c->isSend && !static_cast<SendComm*>(c)->epNoErrHandling)
      return;  // the force close in destroyComm cancels them
    if (!c->isSend) {
      for (Request& r : c->reqs)
        for (int i = 0; r.used && i < r.n; i++)
          if (!r.slots[i].done && r.slots[i].ureq != nullptr) ucp_request_cancel(c->worker, r.slots[i].ureq);
      if (!slotsPending(c)) return;
      OobWatch::sayBye(c->fd);
      c->byeSent = true;
    }
  }
  constexpr int64_t kSettleIdleMs = 200;
  int64_t start = monotonicMs(), lastMove = start;
  int left = -1;
  while (monotonicMs() - start < socketTimeoutMs()) {
    {
      std::lock_guard<std::mutex> lk(workerLock());
      for (int i = 0; i < 16 && progress(c) != 0; i++) {
      }
      int n = slotsInFlight(c);
      if (n == 0) return;
      int64_t now = monotonicMs();
      if (n != left) lastMove = now;
      left = n;
      OobWatch::State st = checkPeer(c, false);
      if (st == OobWatch::kDead || (c->isSend && st == OobWatch::kClosed)) return;
      if (st == OobWatch::kClosed && now - lastMove > kSettleIdleMs) return;
    }
    std::this_thread::yield();
  }
}

void destroyCommLocked(Comm* c) {
  std::lock_guard<std::mutex> lk(workerLock());
  destroyComm(c);
}

// Reads the out-of-band socket, at most every few ms (a syscall otherwise on
// every test()).
OobWatch::State checkPeer(Comm* c, bool force) {
  int64_t now = monotonicMs();
  if (!force && now - c->lastOobMs < 5) return c->oob.state();
  c->lastOobMs = now;
  return c->oob.poll(now);
}

ncclResult_t peerLost(Comm* c, const char* why) {
  if (!c->warned) {
    c->warned = true;
    WARN("NET/signlion-ucx: %s comm %p: %s", c->isSend ? "send" : "recv", (void*)c, why);
  }
  return ncclRemoteError;
}

// The receiver closed in order: its comm is gone, our sends will never be
// matched. Complete them (their data is discarded) by forcing the endpoint shut.
// Without peer error handling UCX refuses the force close: the sends are
// reported done (discarded) here, their UCX requests orphaned in the worker,
// so close then keeps the comm (parkComm) for their callbacks.
void discardSends(SendComm* c) {
  if (c->epForced || c->ep == nullptr) return;
  c->epForced = true;
  if (c->epNoErrHandling) {
    for (Request& r : c->reqs)
      for (int i = 0; r.used && i < r.n; i++)
        if (!r.slots[i].done) {
          c->orphans++;
          finishSlot(&r.slots[i], UCS_ERR_CANCELED, r.slots[i].length);
        }
    return;
  }
  forceCloseEndpoint(c, std::min<int64_t>(socketTimeoutMs(), 2000));
}

ncclResult_t cancelForDeregistration(Comm* c, int requests) {
  SendComm* sc = c->isSend ? static_cast<SendComm*>(c) : nullptr;
  WARN("NET/signlion-ucx: %s comm %p: memory deregistered with %d transfer(s) in flight on it: cancelling them%s",
       c->isSend ? "send" : "recv", (void*)c, requests, c->cancelled ? "" : "; the comm fails");
  c->cancelled = true;
  if (sc == nullptr) {
    // Unmatched receives complete at once (callbacks inside the cancel);
    // a matched one finishes its rendezvous in the wait below.
    for (Request& r : c->reqs)
      for (int i = 0; r.used && i < r.n; i++)
        if (!r.slots[i].done && r.slots[i].ureq != nullptr) ucp_request_cancel(c->worker, r.slots[i].ureq);
  } else if (sc->ep != nullptr && !sc->epNoErrHandling) {
    // UCX cancels no single send: the force close cuts them all short
    // (their callbacks run with UCS_ERR_CANCELED a few progress calls
    // later), before the peer hears of it below: once it does, nothing more
    // comes from this endpoint.
    taintWorker(c);  // as after any force close: the next comms get a fresh worker
    forceCloseEndpoint(sc, std::min<int64_t>(socketTimeoutMs(), 2000));
  }
  // The peer learns at once, as from an abort (its waits fail, it posts no
  // receive that would fetch from the region); only our direction ends, so
  // that its own close or death stays visible here.
  c->byeSent = true;
  if (c->fd >= 0) shutdown(c->fd, SHUT_WR);
  // What UCX could not cancel: a receive in its rendezvous, a send without
  // peer error handling (shared memory). Either ends once the peer finishes
  // it; once the peer closed or died, one that moved no further for
  // kSettleIdleMs never will (close's rule, waitForCallerBuffers: a closing
  // sender force-closes its endpoint before its bye, a dead one sends
  // nothing; a receiver that is gone fetches nothing).
  constexpr int64_t kSettleIdleMs = 200;
  int64_t start = monotonicMs(), lastMove = start;
  int left = slotsInFlight(c);
  while (left > 0) {
    progress(c);
    int n = slotsInFlight(c);
    int64_t now = monotonicMs();
    if (n < left) lastMove = now;
    left = n;
    if (left == 0) break;
    if (checkPeer(c, false) != OobWatch::kAlive && now - lastMove > kSettleIdleMs) {
      INFO(kSubsysNet, "NET/signlion-ucx: %s comm %p: %d transfer(s) UCX could not cancel end with the peer gone",
           c->isSend ? "send" : "recv", (void*)c, left);
      return ncclSuccess;  // close parks the comm for their callbacks (destroyComm)
    }
    if (now - start > socketTimeoutMs()) break;
  }
  if (left == 0) return ncclSuccess;
  WARN("NET/signlion-ucx: %s comm %p: %d transfer(s) UCX could not cancel still in flight after deregMr with the peer "
       "alive for SIGNLION_SOCKET_TIMEOUT (%lld ms, UCX_TLS=%s): the deregistered memory may still be accessed",
       c->isSend ? "send" : "recv", (void*)c, left, (long long)socketTimeoutMs(),
       getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
  return ncclSystemError;
}

}  // namespace ucx

using namespace ucx;

// ---- Close ---------------------------------------------------------------------------

ncclResult_t ucxAbortComm(void* comm) {
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "abortComm", "comm", "%p is not a send or recv comm", comm);
  std::lock_guard<std::mutex> lk(workerLock());
  // The out-of-band socket ends with no bye before it: the peer reads the
  // end of file of a process that died (OobWatch::kDead), so its pending and
  // later operations on this link fail at once. After a bye its sends would
  // complete undelivered instead, which a peer waiting in a collective counts
  // as progress: it then waited out a whole timeout more. Our own reads of
  // the socket now see the end too, so the close below waits on nothing the
  // peer would have to do (no flush, no drain: a frozen peer never answers).
  c->byeSent = true;
  if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
  (void)checkPeer(c, true);
  return ncclSuccess;
}

ncclResult_t ucxCloseSend(void* sendComm) {
  SendComm* c = static_cast<SendComm*>(asComm(sendComm, kCommSend));
  ARGCHECK(c != nullptr, "closeSend", "sendComm", "%p is not a send comm", sendComm);
  waitForCallerBuffers(c);
  std::lock_guard<std::mutex> lk(workerLock());
  bool busy = false;
  for (Request& r : c->reqs)
    for (int i = 0; r.used && i < r.n; i++) busy |= !r.slots[i].done;
  // A comm that never sent has nothing of the caller's to flush (connect
  // returned it once its setup messages were through: confirmEndpoint).
  if (!busy && c->everSent && c->ep != nullptr && c->epStatus == UCS_OK && checkPeer(c, true) == OobWatch::kAlive)
    flushBeforeBye(c);
  destroyComm(c);
  return ncclSuccess;
}

ncclResult_t ucxCloseRecv(void* recvComm) {
  Comm* c = asComm(recvComm, kCommRecv);
  ARGCHECK(c != nullptr, "closeRecv", "recvComm", "%p is not a recv comm", recvComm);
  {
    std::lock_guard<std::mutex> lk(workerLock());
    ucp_tag_recv_info_t info;
    ucp_tag_message_h m = ucp_tag_probe_nb(c->worker, ucpTag(c->commId, 0), kCommIdMask, 0, &info);
    if (m != nullptr)
      WARN("NET/signlion-ucx: recv comm %p closed with a message of %zu bytes for tag %d that no receive claimed",
           (void*)c, info.length, (int)(uint32_t)info.sender_tag);
  }
  waitForCallerBuffers(c);
  std::lock_guard<std::mutex> lk(workerLock());
  destroyComm(c);
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
