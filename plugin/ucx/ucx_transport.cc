#include "ucx/ucx_transport.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/checks.h"
#include "net/comm_header.h"  // byte counters readable by commBytes()
#include "net/socket_devices.h"
#include "net/socket_params.h"
#include "net/socket_stream.h"
#include "net_common.h"
#include "transport/connect_registry.h"
#include "transport/request_table.h"
#include "ucx/ucx_liveness.h"
#include "ucx/ucx_wire.h"

namespace signlion {
namespace net {
namespace {

constexpr uint32_t kHandleMagic = kUcxHandleMagic;
constexpr uint16_t kWireVersion = kUcxWireVersion;
constexpr uint32_t kMrMagic = 0x534c554d;        // "SLUM"
constexpr size_t kMaxPendingAccepts = 256;
constexpr uint64_t kFullTagMask = ~0ull;
constexpr uint64_t kCommIdMask = ~0ull << 32;  // a UCP tag: recv comm id (high 32 bits), ncclNet tag (low)
constexpr uint32_t kSetupIdBit = kUcxSetupIdBit;  // the setup messages' tags (confirmEndpoint)
// How long accept waits, after a connector's bye or death, for its last setup
// message, which travels on another connection than the bye (ucxAccept).
constexpr int64_t kSetupGraceMs = 1000;

int64_t timeoutMs() {
  int64_t t = signlionParamSocketTimeoutMs();
  return t > 0 ? t : 30000;
}

// ---- Wire formats (the setup connection): ucx_wire.h ----------------------------

using ListenHandle = UcxListenHandle;
using Hello = UcxHello;
using Reply = UcxReply;

// ---- Process-wide state ------------------------------------------------------

struct Global {
  std::mutex mu;
  bool ready = false;
  pid_t pid = 0;  // the process that made the context (a forked child inherits a copy it cannot use)
  ucp_context_h context = nullptr;
  // Two UCP workers shared by every comm of the process, made at init and
  // kept until exit (as the context): workers[kSendSide] holds every send
  // comm's endpoint, workers[kRecvSide] every recv comm's receives and is
  // the worker whose address accept() hands out. A worker per comm cost
  // 1.5x of plain UCP's 8-byte latency (perf/ucp_layout_perf); a single
  // worker for both sides is not safe: UCX pairs an endpoint a worker
  // creates from a worker address with the endpoint the remote worker
  // creates towards it with the same sequence number (its "endpoint
  // matching", ucp_ep_match), making them one connection, and between two
  // processes that both connect to each other that merged a send comm of
  // one direction with an unrelated send comm of the other: closing one
  // (the force close of an abort) failed the other's sends ("Endpoint
  // timeout") and cancelled receives matched from it ("Request canceled"),
  // in other threads' comms. The receiving worker never creates an
  // endpoint itself, so no endpoint of ours is ever matched with another.
  // Recv comms are told apart by the high 32 bits of the UCP tag (their
  // id, sent in the reply).
  ucp_worker_h workers[2] = {nullptr, nullptr};
  std::mutex workerMu;  // held by whoever calls into a worker
  uint32_t nextCommId = 1;
  // Set when a comm ends uncleanly (closed with requests in flight, its
  // peer lost, an endpoint failed): comms of that side made later get a
  // fresh worker. UCX 1.13 carries the failure of a force-closed or failed
  // endpoint over to new endpoints between the same two workers (a new
  // comm between two survivors of an abort failed with "Endpoint
  // timeout"). The old worker stays with the comms that hold it, and is
  // kept until exit.
  bool workerTainted[2] = {false, false};
  std::vector<ucp_worker_h> retired;  // replaced workers, reachable until exit
  std::vector<SocketDevice> devs;
};
Global& global() {
  static Global* g = new Global();  // kept until exit, as the UCP context
  return *g;
}

const char* ucsStr(ucs_status_t s) { return ucs_status_string(s); }

constexpr int kRecvSide = 0, kSendSide = 1;

ucs_status_t newWorker(ucp_worker_h* w) {
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Serialized: every call into the worker holds Global::workerMu (one
  // mutex is cheaper than UCS_THREAD_MODE_MULTI's locks inside each call,
  // and it also guards the slots the callbacks write).
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  return ucp_worker_create(global().context, &wp, w);
}
std::mutex& workerLock() { return global().workerMu; }

ucp_tag_t ucpTag(uint32_t commId, int tag) { return ((ucp_tag_t)commId << 32) | (uint32_t)tag; }
// Setup message i (0 or 1) of the recv comm commId (confirmEndpoint).
ucp_tag_t setupTag(uint32_t commId, int i) { return ucpTag(commId | kSetupIdBit, i); }

// ---- Comms and requests ------------------------------------------------------

struct Comm;

struct Slot {
  void* ureq;  // UCX request while in flight, else nullptr
  bool done;
  ucs_status_t status;
  size_t length;  // bytes moved (a receive: the message's size)
  int tag;
};

struct Request {
  bool used;
  Comm* comm;
  int n;
  int pending;       // slots not done yet
  int64_t postedMs;  // a receive still waiting after the timeout looks for unclaimed messages
  size_t bytes;
  Slot slots[kUcxMaxRecvs];
};

struct MemRegion {
  uint32_t magic;
  Comm* comm;
  ucp_mem_h memh;  // nullptr for an empty region
  const char* base;
  size_t size;
};

struct Comm : CommHeader {
  bool isSend = false;
  int fd = -1;  // the setup connection, kept as the out-of-band liveness channel
  OobWatch oob;
  int64_t lastOobMs = 0;
  ucp_worker_h worker = nullptr;  // the process's shared worker
  uint32_t commId = 0;            // recv comm: its own id; send comm: its receiver's
  ucp_ep_h ep = nullptr;          // send comm only
  ucs_status_t epStatus = UCS_OK;
  bool epForced = false;         // after the peer's bye: outstanding sends were cut short
  bool epNoErrHandling = false;  // shared memory: UCX refuses peer error handling (and force close)
  bool everSent = false;         // an isend was called: closeSend flushes what it left
  int orphans = 0;               // sends discardSends reported done while UCX still holds them
  bool warned = false;
  bool byeSent = false;  // closeRecv says bye before it waits for its matched receives
  RequestTable<Request, NCCL_NET_MAX_REQUESTS> reqs;
  std::mutex mrMu;
  std::unordered_set<MemRegion*> mrs;
  // Connector state (send comm before connect returns it).
  // 0 TCP connecting, 1 sending hello, 2 reading reply, 3 reading address,
  // 4 confirming the endpoint (confirmEndpoint), 5 ready (connect returns it).
  int connState = 0;
  size_t off = 0;
  Hello hello{};
  Reply reply{};
  std::vector<char> peerAddr;
  SocketAddress listener{};  // where the handle points: refused connects are retried there
  int trafficClass = -1;
  int64_t startMs = 0;
  UcxPendingConnects* pending = nullptr;
  // The two setup messages (confirmEndpoint): the sender's sync send and
  // plain send, the receiver's receives for them. Their UCX requests write
  // here, so a comm with one in flight is kept as one with transfers in flight.
  // (Sender: sync send, flush, plain send; receiver: the two receives.)
  Slot setup[3] = {};
  bool setupPosted[3] = {false, false, false};
  char setupBuf[2] = {0, 0};
};

// An accepted TCP connection still in its handshake.
struct Incoming {
  int fd = -1;
  int64_t startMs = 0;
  size_t off = 0;
  Hello hello{};
  Comm* comm = nullptr;   // made once the hello checked out; sending the reply
  std::vector<char> out;  // reply + worker address
  bool replied = false;   // the reply is out: waiting for the connector's setup messages
  int64_t goneMs = -1;    // when its socket first said closed or dead, setup message 1 still missing
};

struct ListenComm : CommHeader {
  int fd = -1;
  SocketAddress addr{};
  uint64_t secret = 0;
  std::vector<Incoming> incoming;
};

// Replaces a side's tainted worker (Global::workerTainted) by a fresh one;
// false when none can be made. The caller holds workerLock().
bool replaceTaintedWorker(int side) {
  Global& g = global();
  if (!g.workerTainted[side]) return true;
  ucp_worker_h w = nullptr;
  ucs_status_t s = newWorker(&w);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_worker_create: %s", ucsStr(s));
    return false;
  }
  INFO(kSubsysNet, "NET/signlion-ucx: a %s comm ended uncleanly: new ones use a new UCX worker",
       side == kSendSide ? "send" : "recv");
  g.retired.push_back(g.workers[side]);  // it stays with its comms until exit
  g.workers[side] = w;
  g.workerTainted[side] = false;
  return true;
}

// A new comm's share of its side's worker; a recv comm gets its id (never
// 0, the id of no comm). The caller holds workerLock().
bool attachWorker(Comm* c) {
  Global& g = global();
  int side = c->isSend ? kSendSide : kRecvSide;
  if (!replaceTaintedWorker(side)) return false;
  c->worker = g.workers[side];
  if (!c->isSend) {
    c->commId = g.nextCommId++;
    if (g.nextCommId & kSetupIdBit) g.nextCommId = 1;  // 31 bits (kSetupIdBit), never 0
  }
  return true;
}

// Comms made from now on get a fresh worker, made now rather than at the
// next connect or accept: its descriptors then open at the failure, not
// inside a later call that the caller may expect to leave none behind (a
// connect abandoned by finalize). The caller holds workerLock().
void taintWorker(Comm* c) {
  int side = c->isSend ? kSendSide : kRecvSide;
  if (c->worker != global().workers[side]) return;
  global().workerTainted[side] = true;
  (void)replaceTaintedWorker(side);  // retried at the next attach if it failed
}

// One progress call on the comm's worker and on the other side's current
// worker: a peer in this process holds its end there (a flush waits for
// its acknowledgement, a receive for its rendezvous reply), and a caller
// that waits on one comm moves every other comm of the process, as with
// one worker. Returns the events processed. The caller holds workerLock().
unsigned progress(Comm* c) {
  const Global& g = global();
  ucp_worker_h other = g.workers[c->isSend ? kRecvSide : kSendSide];
  unsigned n = ucp_worker_progress(c->worker);
  if (other != nullptr && other != c->worker) n += ucp_worker_progress(other);
  return n;
}

Comm* asComm(void* p, CommKind kind) {
  Comm* c = static_cast<Comm*>(static_cast<CommHeader*>(p));
  if (c == nullptr || c->magic != kCommMagic || c->kind != (uint32_t)kind) return nullptr;
  return c;
}

void epError(void* arg, ucp_ep_h, ucs_status_t status) {
  Comm* c = static_cast<Comm*>(arg);
  if (c->epStatus == UCS_OK) c->epStatus = status;
}

// Progress-bound wait for a UCX request of our own (ep close, flush); the
// caller holds workerLock(). A peer in this process shares the worker, so
// this progress moves its side too.
ucs_status_t waitUcx(Comm* c, void* req, int64_t limitMs) {
  if (req == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  int64_t start = monotonicMs();
  ucs_status_t s;
  while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS && monotonicMs() - start < limitMs)
    progress(c);
  ucp_request_free(req);  // released now, or by UCX once it completes (worker destroy at the latest)
  return s;
}

OobWatch::State checkPeer(Comm* c, bool force);

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
void flushBeforeBye(Comm* c) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  void* req = ucp_ep_flush_nbx(c->ep, &p);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  int64_t start = monotonicMs(), limit = std::min<int64_t>(timeoutMs(), 2000);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && monotonicMs() - start < limit &&
         checkPeer(c, false) == OobWatch::kAlive)
    progress(c);
  ucp_request_free(req);  // released now, or by UCX once it completes (the force close in destroyComm)
}

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

// Every UCX resource of a comm; the caller holds workerLock(). The comm's
// memory goes only once no request of ours is in flight in the worker
// (after that no callback may touch our slots), else it is parked.
// Send comms whose connect is in progress (connect_registry.h).
ConnectRegistry& connectsInProgress() {
  static ConnectRegistry r;
  return r;
}

void destroyComm(Comm* c) {
  connectsInProgress().remove(c);
  if (c->fd >= 0 && (!c->isSend || c->connState >= 2)) heartbeatRemove(c->fd);
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
  if (c->worker != nullptr && (slotsPending(c) || c->warned || c->epStatus != UCS_OK || c->epForced || c->orphans > 0))
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
  if (c->worker != nullptr && c->isSend && c->ep != nullptr) {
    int64_t limit = std::min<int64_t>(timeoutMs(), 2000);
    bool peerMode = !c->epNoErrHandling;
    if (!peerMode && slotsPending(c) && checkPeer(c, true) == OobWatch::kAlive)
      (void)drainSlots(c, limit, 200);  // no force close here: let the receiver take them
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    if (peerMode) {
      // Cancels every send (their callbacks run with UCS_ERR_CANCELED once
      // the lanes are discarded, a few progress calls later).
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      (void)waitUcx(c, ucp_ep_close_nbx(c->ep, &p), limit);
      c->ep = nullptr;
      if (checkPeer(c, true) == OobWatch::kAlive) (void)drainSlots(c, limit, limit);
    } else if (!slotsPending(c) && c->orphans == 0) {
      (void)waitUcx(c, ucp_ep_close_nbx(c->ep, &p), limit);  // flush: nothing of ours left in it
      c->ep = nullptr;
    }
  }
  if (c->worker != nullptr && c->isSend) park = slotsPending(c) || c->orphans > 0;
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
    if (c->isSend && !c->epNoErrHandling) return;  // the force close in destroyComm cancels them
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
  while (monotonicMs() - start < timeoutMs()) {
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

void finishSlot(Slot* s, ucs_status_t status, size_t length) {
  s->ureq = nullptr;
  s->done = true;
  s->status = status;
  s->length = length;
}

void sendDone(void* ureq, ucs_status_t status, void* user) {
  Slot* s = static_cast<Slot*>(user);
  ucp_request_free(ureq);
  if (s->ureq != ureq) return;  // orphaned by discardSends: its slot may serve another request now
  finishSlot(s, status, s->length);
}

void recvDone(void* ureq, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Slot* s = static_cast<Slot*>(user);
  ucp_request_free(ureq);
  // The full tag mask makes the sender's tag ours; UCX 1.13 leaves
  // info->sender_tag unset on some paths, so only its length is read.
  if (status == UCS_OK && info == nullptr) status = UCS_ERR_NO_MESSAGE;
  finishSlot(s, status, status == UCS_OK ? info->length : 0);
}

// What a returned UCX pointer means for a slot just posted (the caller
// zeroed it before the call). With UCP_OP_ATTR_FLAG_NO_IMM_CMPL (irecv) a
// receive whose message is already here completes inside the call: its
// callback runs, frees the request and marks the slot done, and the call
// still returns the request's pointer. That pointer is not ours any more
// (UCX hands the memory to the next request, possibly another comm's): a
// slot keeps a UCX request only while it is not done, or a later cancel
// (close with requests in flight) would cancel someone else's request.
void startSlot(Slot* s, ucs_status_ptr_t p, size_t immediateLength) {
  if (s->done) return;
  if (p == nullptr)
    finishSlot(s, UCS_OK, immediateLength);
  else if (UCS_PTR_IS_ERR(p))
    finishSlot(s, UCS_PTR_STATUS(p), 0);
  else
    s->ureq = p;
}

ucp_request_param_t opParams(void* slot, void* mhandle) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = slot;
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  if (mr != nullptr && mr->magic == kMrMagic && mr->memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = mr->memh;
  }
  return p;
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
void discardSends(Comm* c) {
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
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (void)waitUcx(c, ucp_ep_close_nbx(c->ep, &p), std::min<int64_t>(timeoutMs(), 2000));
  c->ep = nullptr;
}

bool makeWorkerReply(Comm* c, std::vector<char>* out) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucs_status_t s = ucp_worker_get_address(c->worker, &addr, &len);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_worker_get_address: %s", ucsStr(s));
    return false;
  }
  Reply r{};
  r.magic = kHandleMagic;
  r.version = kWireVersion;
  r.addrLen = (uint32_t)len;
  r.commId = c->commId;
  out->resize(sizeof(r) + len);
  memcpy(out->data(), &r, sizeof(r));
  memcpy(out->data() + sizeof(r), addr, len);
  ucp_worker_release_address(c->worker, addr);
  return true;
}

// Non-blocking read/write of a fixed span; returns -1 on error or EOF, else
// whether the span is complete.
int moveBytes(int fd, bool write, char* buf, size_t len, size_t* off) {
  while (*off < len) {
    ssize_t n = write ? send(fd, buf + *off, len - *off, MSG_DONTWAIT | MSG_NOSIGNAL)
                      : recv(fd, buf + *off, len - *off, MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n == 0) return -1;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
  return 1;
}

// ---- Confirming an endpoint before the comm is handed out ----------------------
//
// ucp_ep_create only starts UCX's wireup: the first messages on the new
// endpoint, the receiver's worker making its own endpoint back and answering
// (wireup REQUEST/REPLY, wireup.c), TCP connections being opened (tcp_ep.c)
// all go on inside later ucp_worker_progress calls. UCX 1.13 aborts the
// process when a peer dies while that is still under way:
//   - ucp_request_send_state_ff asserts ("got REP message",
//     ucp_request.c:684) when the failed endpoint's pending queue still
//     holds the REPLY to the dead peer's REQUEST (queued because the TCP
//     connection that carries it was not up yet);
//   - uct_tcp_ep_destroy_progress asserts (tcp_ep.c:478) on a TCP
//     endpoint that failed while still connecting to the dead peer.
// Connection setup is the only time either is queued. So a comm is handed
// out only once its endpoint is complete on both sides, and the last step
// of each side needs the other side's last step done:
//   1. the sender's synchronous send (tag setupTag(id, 0)) completes once
//      the receiver's worker matched it and its acknowledgement came back
//      over the receiver's endpoint, queued behind that worker's REPLY: the
//      receiver's part of the wireup is out, and ours is answered;
//   2. the sender flushes its endpoint: UCT's TCP flush is refused until
//      each lane's connection is up (uct_tcp_ep_check_tx_res), so every lane
//      is connected, not only the one that carried step 1;
//   3. the sender's plain send (tag setupTag(id, 1)): the receiver's accept()
//      returns the comm once it has both messages, the sender's connect()
//      once this send is out.
// Either side returns its comm only after the other one's wireup is done: a
// peer that dies after connect/accept (the killed-rank case) finds nothing
// of UCX's setup in flight. A peer that dies during connect/accept still
// can (no caller can then prevent UCX's assertions; docs/PLUGIN.md).

// The sender's steps 1-3; *ready once all are done. The caller holds
// workerLock().
ncclResult_t confirmEndpoint(Comm* c, bool* ready) {
  *ready = false;
  if (c->ep == nullptr) {  // the receiver closed before we reached it (connectSteps)
    c->connState = 5;
    *ready = true;
    return ncclSuccess;
  }
  progress(c);
  for (int i = 0; i < 3; i++) {
    Slot* s = &c->setup[i];
    if (!c->setupPosted[i]) {
      c->setupPosted[i] = true;
      ucp_request_param_t p = opParams(s, nullptr);
      p.cb.send = sendDone;
      ucs_status_ptr_t r;
      if (i == 0)
        r = ucp_tag_send_sync_nbx(c->ep, &c->setupBuf[0], 1, setupTag(c->commId, 0), &p);
      else if (i == 1)
        r = ucp_ep_flush_nbx(c->ep, &p);
      else
        r = ucp_tag_send_nbx(c->ep, &c->setupBuf[1], 1, setupTag(c->commId, 1), &p);
      startSlot(s, r, 1);
    }
    if (s->done && s->status != UCS_OK) {
      WARN("NET/signlion-ucx: connect: setup step %d of the endpoint failed: %s", i + 1, ucsStr(s->status));
      return peerLost(c, "the endpoint failed before the listener confirmed it");
    }
    if (!s->done) {
      if (c->epStatus != UCS_OK) return peerLost(c, "the endpoint failed before the listener confirmed it");
      if (checkPeer(c, false) != OobWatch::kAlive)
        return peerLost(c, "the listener closed the connection before it confirmed the endpoint");
      return ncclSuccess;  // timed out by progressConnect
    }
  }
  c->connState = 5;
  *ready = true;
  return ncclSuccess;
}

// The receiver's side: its receives for the two setup messages, posted once
// the reply with our worker address is out. The caller holds workerLock().
void postSetupReceives(Comm* c) {
  for (int i = 0; i < 2; i++) {
    ucp_request_param_t p = opParams(&c->setup[i], nullptr);
    p.cb.recv = recvDone;
    c->setupPosted[i] = true;
    startSlot(&c->setup[i], ucp_tag_recv_nbx(c->worker, &c->setupBuf[i], 1, setupTag(c->commId, i), kFullTagMask, &p),
              1);
  }
}

// Whether both setup messages came (1), not yet (0), or a receive failed
// (-1). drain: progress until they came or the worker has nothing left to
// do (bounded), for a connector already gone, whose messages are all in the
// worker's reach. The caller holds workerLock().
int setupReceived(Comm* c, bool drain) {
  for (int i = 0; i < (drain ? 64 : 1) && !(c->setup[0].done && c->setup[1].done); i++)
    if (progress(c) == 0 && drain) break;
  for (int i = 0; i < 2; i++)
    if (c->setup[i].done && c->setup[i].status != UCS_OK) return -1;
  return c->setup[0].done && c->setup[1].done ? 1 : 0;
}

ncclResult_t connectSteps(Comm* c, bool* ready);

// Connect-side handshake; returns ncclSuccess with *ready set once connect()
// may return the comm: its endpoint made and confirmed (state 5). Timed out
// when the listener's part is still missing after the timeout.
ncclResult_t progressConnect(Comm* c, bool* ready) {
  bool late = monotonicMs() - c->startMs > timeoutMs();
  NCCLCHECK(connectSteps(c, ready));
  if (late && !*ready) {
    WARN("NET/signlion-ucx: connect: no answer from the listener within %lld ms", (long long)timeoutMs());
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t connectSteps(Comm* c, bool* ready) {
  *ready = false;
  if (c->connState == 0) {
    pollfd p{c->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return ncclSuccess;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET) {
      // Nobody listens yet (or any more): retry until the timeout, as the
      // socket transport does; the caller sees no comm meanwhile.
      closeFd(&c->fd);
      if (!startConnect(c->listener, c->trafficClass, &c->fd)) {
        WARN("NET/signlion-ucx: connect to %s failed: %s", addressString(c->listener).c_str(), strerror(errno));
        return ncclSystemError;
      }
      return ncclSuccess;
    }
    if (err != 0) {
      WARN("NET/signlion-ucx: connect: %s", strerror(err));
      return ncclRemoteError;
    }
    c->connState = 1;
    c->off = 0;
  }
  if (c->connState == 1) {
    int r = moveBytes(c->fd, true, (char*)&c->hello, sizeof(c->hello), &c->off);
    if (r < 0) return peerLost(c, "the listener closed the connection during the hello");
    if (r == 0) return ncclSuccess;
    c->connState = 2;
    c->off = 0;
    // From here on the receiver may hold this comm and watch its socket for
    // silence: heartbeats start now, not at the first isend (a sender may
    // connect long before it sends; removed in destroyComm).
    heartbeatAdd(c->fd);
  }
  if (c->connState == 4) return confirmEndpoint(c, ready);
  if (c->connState == 2) {
    int r = moveBytes(c->fd, false, (char*)&c->reply, sizeof(c->reply), &c->off);
    if (r < 0) return peerLost(c, "the listener refused the connection (wrong handle or secret?)");
    if (r == 0) return ncclSuccess;
    if (const char* why = ucxReplyProblem(c->reply)) {
      WARN("NET/signlion-ucx: connect: malformed reply: %s (magic 0x%x, version %u, address of %u bytes)", why,
           c->reply.magic, c->reply.version, c->reply.addrLen);
      return ncclRemoteError;
    }
    c->peerAddr.resize(c->reply.addrLen);
    c->commId = c->reply.commId;
    c->connState = 3;
    c->off = 0;
  }
  int r = moveBytes(c->fd, false, c->peerAddr.data(), c->peerAddr.size(), &c->off);
  if (r < 0) return peerLost(c, "the listener closed the connection during the reply");
  if (r == 0) return ncclSuccess;
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof(ep));
  ep.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(c->peerAddr.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // a vanished peer fails our requests instead of hanging them
  ep.err_handler.cb = epError;
  ep.err_handler.arg = c;
  ucs_status_t s = ucp_ep_create(c->worker, &ep, &c->ep);
  if (s == UCS_ERR_UNREACHABLE) {
    // Shared-memory transports (UCX_TLS=sm) cannot report peer failures;
    // the out-of-band socket still does (ucx_liveness.h).
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    c->epNoErrHandling = true;
    s = ucp_ep_create(c->worker, &ep, &c->ep);
  }
  c->oob.start(c->fd, monotonicMs());  // only heartbeats and the bye follow on the socket
  if (s != UCS_OK && c->oob.settle(std::min<int64_t>(timeoutMs(), 1000)) == OobWatch::kClosed) {
    // The receiver closed (its comm is gone) before we reached it: a
    // comm without an endpoint whose sends complete discarded.
    c->ep = nullptr;
    s = UCS_OK;
  }
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_ep_create: %s", ucsStr(s));
    return ncclSystemError;
  }
  std::vector<char>().swap(c->peerAddr);
  c->connState = 4;
  return confirmEndpoint(c, ready);
}

}  // namespace

// ---- Init and devices ------------------------------------------------------------

ncclResult_t ucxInit(LogSink logger) {
  if (logger != nullptr) logSetSink(logger);
  // SIGNLION_* are read as they are at init: this library is never unloaded
  // (-z nodelete), so without this a process that finalizes and inits again
  // (NCCL after a communicator abort, the test suites) would keep the values
  // its first init saw.
  paramResetCache();
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.ready && g.pid != getpid()) {
    // UCX does not survive fork: the child's copy of the context has no
    // progress thread and shares endpoints' state with the parent; using it
    // hangs or corrupts the parent's connections. A clear error instead.
    WARN(
        "NET/signlion-ucx: init in process %d, forked from %d after that one's init: UCX cannot be used across "
        "fork; initialize the transport only in the child (or exec)",
        (int)getpid(), (int)g.pid);
    return ncclSystemError;
  }
  if (g.ready) return ncclSuccess;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);  // UCX_TLS, UCX_NET_DEVICES, ... pass through
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_config_read: %s", ucsStr(s));
    return ncclSystemError;
  }
  ucp_params_t p;
  memset(&p, 0, sizeof(p));
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  p.features = UCP_FEATURE_TAG;
  p.mt_workers_shared = 1;  // regMr maps memory on any thread while another progresses the worker
  s = ucp_init(&p, config, &g.context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_init: %s (UCX_TLS=%s)", ucsStr(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
    return ncclSystemError;
  }
  for (ucp_worker_h& w : g.workers) {
    s = newWorker(&w);
    if (s != UCS_OK) {
      WARN("NET/signlion-ucx: ucp_worker_create: %s", ucsStr(s));
      if (g.workers[kRecvSide] != nullptr) ucp_worker_destroy(g.workers[kRecvSide]);
      ucp_cleanup(g.context);
      g.context = nullptr;
      g.workers[kRecvSide] = g.workers[kSendSide] = nullptr;
      return ncclSystemError;
    }
  }
  g.devs = findSocketDevices(kUcxMaxDevs);
  if (g.devs.empty()) {
    IfnameSpec spec = socketIfnameSpec();
    WARN("NET/signlion-ucx: no usable interface for the setup connection (%s=%s)",
         spec.source[0] ? spec.source : "SIGNLION_SOCKET_IFNAME", spec.spec.c_str());
    return ncclSystemError;
  }
  g.ready = true;
  g.pid = getpid();
  INFO(kSubsysInit | kSubsysNet, "NET/signlion-ucx: UCX %s, %zu devices", ucp_get_version_string(), g.devs.size());
  return ncclSuccess;
}

int ucxPtrSupport() {
  // Debian's UCX has no cuda transports; a build with them would list
  // UCS_MEMORY_TYPE_CUDA in the context's memory types.
  Global& g = global();
  int bits = NCCL_PTR_HOST;
  if (g.context != nullptr) {
    ucp_context_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(g.context, &a) == UCS_OK && (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
      bits |= NCCL_PTR_CUDA;
  }
  return bits;
}

ncclResult_t ucxDevices(int* ndev) {
  ARGCHECK(ndev != nullptr, "devices", "ndev", "NULL");
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  *ndev = (int)g.devs.size();
  return ncclSuccess;
}

static bool deviceAddress(int dev, SocketAddress* a) {
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  if (dev < 0 || dev >= (int)g.devs.size()) return false;
  *a = g.devs[dev].addr;
  return true;
}

ncclResult_t ucxGetProperties(int dev, UcxProps* props) {
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  ARGCHECK(dev >= 0 && dev < (int)g.devs.size(), "getProperties", "dev", "%d not in [0, %zu)", dev, g.devs.size());
  const SocketDevice& d = g.devs[dev];
  props->name = d.name.c_str();
  props->pciPath = d.pciPath.empty() ? nullptr : d.pciPath.c_str();
  props->guid = (uint64_t)dev;
  props->speedMbps = d.speedMbps;
  props->maxComms = 1024;  // an endpoint per send comm: UCX's resources, not descriptors, are the limit
  return ncclSuccess;
}

// ---- Connection setup ----------------------------------------------------------

ncclResult_t ucxListen(int dev, void* handle, void** listenComm) {
  ARGCHECK(handle != nullptr, "listen", "handle", "NULL");
  ARGCHECK(listenComm != nullptr, "listen", "listenComm", "NULL");
  *listenComm = nullptr;
  SocketAddress addr;
  ARGCHECK(deviceAddress(dev, &addr), "listen", "dev", "%d is not a device", dev);
  std::unique_ptr<ListenComm> l(new ListenComm());
  l->magic = kCommMagic;
  l->kind = kCommListen;
  if (!listenOnFreePort(addr, 1024, &l->fd, &l->addr)) return ncclSystemError;
  if (getrandom(&l->secret, sizeof(l->secret), 0) != (ssize_t)sizeof(l->secret)) {
    WARN("NET/signlion-ucx: getrandom failed: %s", strerror(errno));
    closeFd(&l->fd);
    return ncclSystemError;
  }
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.secret = l->secret;
  h.addr = l->addr;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  INFO(kSubsysNet, "NET/signlion-ucx: listening on %s", addressString(l->addr).c_str());
  *listenComm = static_cast<CommHeader*>(l.release());
  return ncclSuccess;
}

ncclResult_t ucxConnect(int dev, int trafficClass, void* handle, void** sendComm, UcxPendingConnects* pending) {
  ARGCHECK(handle != nullptr, "connect", "handle", "NULL");
  ARGCHECK(sendComm != nullptr, "connect", "sendComm", "NULL");
  *sendComm = nullptr;
  ListenHandle h;
  NCCLCHECK(ucxParseHandle(handle, &h));
  SocketAddress unused;
  ARGCHECK(deviceAddress(dev, &unused), "connect", "dev", "%d is not a device", dev);
  auto setConnecting = [handle](Comm* comm) {
    void* p = comm;
    memcpy(static_cast<char*>(handle) + offsetof(ListenHandle, connecting), &p, sizeof(p));
  };
  Comm* c = static_cast<Comm*>(h.connecting);
  ARGCHECK(c == nullptr || connectsInProgress().contains(c), "connect", "handle",
           "its connector-private bytes hold %p, no connect of this process in progress (a handle whose connection "
           "finished, or one from a peer that did not come unchanged from its listen)",
           h.connecting);
  if (c == nullptr) {
    c = new Comm();
    c->magic = kCommMagic;
    c->kind = kCommSend;
    c->isSend = true;
    c->startMs = monotonicMs();
    c->hello.magic = kHandleMagic;
    c->hello.version = kWireVersion;
    c->hello.secret = h.secret;
    bool attached;
    {
      std::lock_guard<std::mutex> lk(workerLock());
      attached = attachWorker(c);
    }
    if (!attached) {
      c->magic = 0;
      delete c;
      return ncclSystemError;
    }
    c->listener = h.addr;
    c->trafficClass = trafficClass;
    if (!startConnect(h.addr, trafficClass, &c->fd)) {
      WARN("NET/signlion-ucx: connect to %s failed: %s", addressString(h.addr).c_str(), strerror(errno));
      destroyCommLocked(c);
      return ncclSystemError;
    }
    if (pending != nullptr) {
      std::lock_guard<std::mutex> lk(pending->mu);
      pending->comms.insert(c);
      c->pending = pending;
    }
    setConnecting(c);
    connectsInProgress().add(c);
  }
  ARGCHECK(c->magic == kCommMagic && c->kind == kCommSend && c->connState < 5, "connect", "handle",
           "its connection already finished (reuse of a handle)");
  bool ready = false;
  ncclResult_t res;
  {
    std::lock_guard<std::mutex> lk(workerLock());  // the last step makes the endpoint
    res = progressConnect(c, &ready);
  }
  if (res != ncclSuccess || ready) {
    setConnecting(nullptr);
    connectsInProgress().remove(c);
    if (c->pending != nullptr) {
      std::lock_guard<std::mutex> lk(c->pending->mu);
      c->pending->comms.erase(c);
      c->pending = nullptr;
    }
  }
  if (res != ncclSuccess) {
    destroyCommLocked(c);
    return res;
  }
  if (ready) *sendComm = static_cast<CommHeader*>(c);
  return ncclSuccess;
}

void ucxAbandonConnects(UcxPendingConnects* pending) {
  std::lock_guard<std::mutex> lk(pending->mu);
  for (void* p : pending->comms) {
    Comm* c = static_cast<Comm*>(p);
    c->pending = nullptr;
    destroyCommLocked(c);
  }
  pending->comms.clear();
}

ncclResult_t ucxAccept(void* listenComm, void** recvComm) {
  ARGCHECK(recvComm != nullptr, "accept", "recvComm", "NULL");
  *recvComm = nullptr;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "accept", "listenComm",
           "%p is not a listen comm", listenComm);
  while (l->incoming.size() < kMaxPendingAccepts) {
    int fd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    tuneStream(fd, -1, l->addr.sa.sa_family);
    Incoming in;
    in.fd = fd;
    in.startMs = monotonicMs();
    l->incoming.push_back(std::move(in));
  }
  int64_t now = monotonicMs();
  for (size_t i = 0; i < l->incoming.size();) {
    Incoming& in = l->incoming[i];
    const char* why = nullptr;
    bool ready = false;
    if (in.comm == nullptr) {
      int r = moveBytes(in.fd, false, (char*)&in.hello, sizeof(in.hello), &in.off);
      if (r < 0)
        why = "closed before its hello";
      else if (r == 0 && now - in.startMs > timeoutMs())
        why = "sent no hello in time";
      else if (r > 0) {
        why = ucxHelloProblem(in.hello, l->secret);
        if (why == nullptr) {
          Comm* c = new Comm();
          c->magic = kCommMagic;
          c->kind = kCommRecv;
          bool made;
          {
            std::lock_guard<std::mutex> lk(workerLock());
            made = attachWorker(c) && makeWorkerReply(c, &in.out);
          }
          if (!made) {
            destroyCommLocked(c);
            return ncclSystemError;
          }
          in.comm = c;
          in.off = 0;
        }
      }
    }
    if (why == nullptr && in.comm != nullptr && !in.replied) {
      int r = moveBytes(in.fd, true, in.out.data(), in.out.size(), &in.off);
      if (r < 0)
        why = "closed during our reply";
      else if (r == 0 && now - in.startMs > timeoutMs())
        why = "took no reply in time";
      else if (r > 0) {
        // The connector makes its endpoint now; the comm is handed out once
        // it is confirmed (confirmEndpoint says why).
        in.replied = true;
        in.comm->oob.start(in.fd, now);
        std::lock_guard<std::mutex> lk(workerLock());
        postSetupReceives(in.comm);
      }
    }
    if (why == nullptr && in.replied) {
      // The connector's connect() returns once its last setup message
      // (step 3) is out locally, and its bye or death shows on this socket
      // only after that: it may close at once, and its comm then exists.
      // So the socket is read first and the worker progressed after, and a
      // connector found gone gets its setup messages drained rather than
      // refused on sight: over shared memory the message is in our FIFO
      // before the bye is written; over TCP it was in the connector's
      // kernel before, but travels on another connection than the bye, so
      // it may still be on the way (loopback's backlog, a retransmission):
      // it gets kSetupGraceMs after the bye. Without step 1 matched (our
      // receive 0) its connect() cannot have returned: refused at once.
      OobWatch::State st = in.comm->oob.poll(now);
      int got;
      {
        std::lock_guard<std::mutex> lk(workerLock());
        got = setupReceived(in.comm, st != OobWatch::kAlive);
      }
      bool gone = got == 0 && st != OobWatch::kAlive;
      if (gone && in.goneMs < 0) in.goneMs = now;
      if (got < 0)
        why = "its endpoint's setup messages failed";
      else if (gone && !in.comm->setup[0].done)
        why = "closed before it confirmed its endpoint";
      else if (gone) {
        if (now - in.goneMs > std::min<int64_t>(timeoutMs(), kSetupGraceMs))
          why = "closed, and its last setup message never came";  // else drained again at the next call
      } else if (got == 0 && now - in.startMs > timeoutMs())
        why = "did not confirm its endpoint in time";
      ready = got > 0;
    }
    if (why != nullptr) {
      WARN("NET/signlion-ucx: accept: refused a connection on %s: %s", addressString(l->addr).c_str(), why);
      if (in.comm != nullptr) destroyCommLocked(in.comm);
      closeFd(&in.fd);
      l->incoming.erase(l->incoming.begin() + i);
      continue;
    }
    if (ready) {
      Comm* c = in.comm;
      c->fd = in.fd;  // its OobWatch reads it since the reply
      heartbeatAdd(c->fd);
      l->incoming.erase(l->incoming.begin() + i);
      *recvComm = static_cast<CommHeader*>(c);
      return ncclSuccess;
    }
    i++;
  }
  return ncclSuccess;
}

// ---- Memory registration -------------------------------------------------------

ncclResult_t ucxRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  ARGCHECK(mhandle != nullptr, "regMr", "mhandle", "NULL");
  *mhandle = nullptr;
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "regMr", "comm", "%p is not a send or recv comm", comm);
  ARGCHECK((type & ucxPtrSupport()) == type && type != 0, "regMr", "type",
           "%d: this UCX supports memory types 0x%x only", type, ucxPtrSupport());
  ARGCHECK(data != nullptr || size == 0, "regMr", "data", "NULL with size %zu", size);
  ucp_mem_h memh = nullptr;
  if (size > 0) {
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = data;
    mp.length = size;
    ucs_status_t s = ucp_mem_map(global().context, &mp, &memh);
    if (s != UCS_OK) {
      WARN("NET/signlion-ucx: ucp_mem_map of %zu bytes at %p: %s", size, data, ucsStr(s));
      return ncclSystemError;
    }
  }
  MemRegion* mr = new MemRegion{kMrMagic, c, memh, static_cast<const char*>(data), size};
  std::lock_guard<std::mutex> lk(c->mrMu);
  c->mrs.insert(mr);
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t ucxRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle) {
  return ucxRegMr(comm, data, size, type, mhandle);  // NCCL_PTR_DMABUF is not advertised
}

ncclResult_t ucxDeregMr(void* comm, void* mhandle) {
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "deregMr", "comm", "%p is not a send or recv comm", comm);
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::lock_guard<std::mutex> lk(c->mrMu);
  ARGCHECK(mr != nullptr && c->mrs.count(mr) == 1, "deregMr", "mhandle", "%p is not registered on comm %p", mhandle,
           comm);
  c->mrs.erase(mr);
  if (mr->memh != nullptr) ucp_mem_unmap(global().context, mr->memh);
  mr->magic = 0;
  delete mr;
  return ncclSuccess;
}

// ---- Transfers --------------------------------------------------------------------

// An mhandle passed to isend/irecv: nullptr, or a region registered on c
// that holds [data, data + size).
static bool regionHolds(Comm* c, void* mhandle, const void* data, size_t size) {
  if (mhandle == nullptr) return true;
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::lock_guard<std::mutex> lk(c->mrMu);
  if (c->mrs.count(mr) == 0) return false;
  const char* p = static_cast<const char*>(data);
  return size == 0 || (p >= mr->base && size <= mr->size && (size_t)(p - mr->base) <= mr->size - size);
}

ncclResult_t ucxIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  ARGCHECK(request != nullptr, "isend", "request", "NULL");
  *request = nullptr;
  Comm* c = asComm(sendComm, kCommSend);
  ARGCHECK(c != nullptr, "isend", "sendComm", "%p is not a send comm", sendComm);
  ARGCHECK(data != nullptr || size == 0, "isend", "data", "NULL with size %zu", size);
  ARGCHECK(size <= kUcxMaxMessage, "isend", "size", "%zu exceeds maxP2pBytes %zu", size, kUcxMaxMessage);
  ARGCHECK(regionHolds(c, mhandle, data, size), "isend", "mhandle",
           "%p is not a region registered on comm %p holding %zu bytes at %p", mhandle, sendComm, size, data);
  std::lock_guard<std::mutex> lk(workerLock());
  c->everSent = true;  // connect() returned c with its endpoint confirmed (confirmEndpoint)
  OobWatch::State st = checkPeer(c, false);
  if (st == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
  Request* r = c->reqs.acquire();
  if (r == nullptr) return ncclSuccess;  // NCCL retries
  r->comm = c;
  r->n = 1;
  r->bytes = size;
  Slot* s = &r->slots[0];
  *s = Slot{};
  s->tag = tag;
  s->length = size;
  if (st == OobWatch::kClosed || c->ep == nullptr) {
    finishSlot(s, UCS_OK, size);  // the receiver closed in order: the data is discarded
  } else {
    ucp_request_param_t p = opParams(s, mhandle);
    p.cb.send = sendDone;
    startSlot(s, ucp_tag_send_nbx(c->ep, data, size, ucpTag(c->commId, tag), &p), size);
  }
  r->pending = s->done ? 0 : 1;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ucxIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                      void** request) {
  ARGCHECK(request != nullptr, "irecv", "request", "NULL");
  *request = nullptr;
  Comm* c = asComm(recvComm, kCommRecv);
  ARGCHECK(c != nullptr, "irecv", "recvComm", "%p is not a recv comm", recvComm);
  ARGCHECK(n >= 1 && n <= kUcxMaxRecvs, "irecv", "n", "%d not in [1, %d]", n, kUcxMaxRecvs);
  ARGCHECK(data != nullptr && sizes != nullptr && tags != nullptr, "irecv", "data/sizes/tags", "NULL");
  for (int i = 0; i < n; i++) {
    ARGCHECK(data[i] != nullptr || sizes[i] == 0, "irecv", "data", "data[%d] NULL with size %zu", i, sizes[i]);
    ARGCHECK(mhandles == nullptr || regionHolds(c, mhandles[i], data[i], sizes[i]), "irecv", "mhandles",
             "mhandles[%d] = %p is not a region registered on comm %p holding %zu bytes at %p", i, mhandles[i],
             recvComm, sizes[i], data[i]);
  }
  std::lock_guard<std::mutex> lk(workerLock());
  if (checkPeer(c, false) == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
  Request* r = c->reqs.acquire();
  if (r == nullptr) return ncclSuccess;
  r->comm = c;
  r->n = n;
  r->postedMs = monotonicMs();
  r->pending = 0;
  r->bytes = 0;
  for (int i = 0; i < n; i++) {
    Slot* s = &r->slots[i];
    *s = Slot{};
    s->tag = tags[i];
    ucp_request_param_t p = opParams(s, mhandles ? mhandles[i] : nullptr);
    // No immediate completion: UCX 1.13 may complete a receive at once (a
    // message already here) without filling recv_info, and a size of 0
    // would then be reported for a message that had bytes. The callback
    // always carries the message's facts.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = recvDone;
    ucs_status_ptr_t up = ucp_tag_recv_nbx(c->worker, data[i], sizes[i], ucpTag(c->commId, tags[i]), kFullTagMask, &p);
    if (up == nullptr) up = UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);  // not allowed above: never report unknown sizes
    startSlot(s, up, 0);
    if (!s->done) r->pending++;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t ucxIflush(void* recvComm, int, void**, int*, void**, void** request) {
  ARGCHECK(request != nullptr, "iflush", "request", "NULL");
  ARGCHECK(asComm(recvComm, kCommRecv) != nullptr, "iflush", "recvComm", "%p is not a recv comm", recvComm);
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t ucxTest(void* request, int* done, int* sizes) {
  ARGCHECK(done != nullptr, "test", "done", "NULL");
  *done = 0;
  Request* r = static_cast<Request*>(request);
  ARGCHECK(
      r != nullptr && r->used && r->comm != nullptr && r->comm->magic == kCommMagic && r->comm->reqs.outstanding(r),
      "test", "request", "%p is not an outstanding request", request);
  Comm* c = r->comm;
  std::lock_guard<std::mutex> lk(workerLock());
  auto pendingNow = [r] {
    int p = 0;
    for (int i = 0; i < r->n; i++) p += r->slots[i].done ? 0 : 1;
    return p;
  };
  if ((r->pending = pendingNow()) > 0) {
    unsigned moved = 0;
    for (int i = 0; i < 4 && (moved = progress(c)) != 0; i++) {
    }
    r->pending = pendingNow();
  }
  if (r->pending > 0) {
    OobWatch::State st = checkPeer(c, false);
    if (st == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
    if (st == OobWatch::kClosed && c->isSend) {
      discardSends(c);  // completes them (cancelled): their data is discarded
      r->pending = pendingNow();
    } else if (st == OobWatch::kClosed) {
      for (int i = 0; i < 64 && progress(c) != 0; i++) {
      }
      if ((r->pending = pendingNow()) > 0)
        return peerLost(c, "peer closed its send comm with our receive still waiting for a message");
    } else if (!c->isSend && monotonicMs() - r->postedMs > timeoutMs()) {
      // A receive waiting past the timeout while a message no receive
      // claims sits in the worker: the sender used a tag we never post.
      ucp_tag_recv_info_t info;
      if (ucp_tag_probe_nb(c->worker, ucpTag(c->commId, 0), kCommIdMask, 0, &info) != nullptr) {
        WARN("NET/signlion-ucx: recv comm %p: message with tag %d (%zu bytes) matches no posted receive within %lld ms",
             (void*)c, (int)(uint32_t)info.sender_tag, info.length, (long long)timeoutMs());
        return ncclInvalidUsage;
      }
    }
    if (r->pending > 0 && c->oob.state() == OobWatch::kAlive && c->oob.silentFor(monotonicMs()) > timeoutMs()) {
      char why[160];
      snprintf(why, sizeof(why), "peer silent for %lld ms (stopped or unreachable; SIGNLION_SOCKET_TIMEOUT=%lld)",
               (long long)c->oob.silentFor(monotonicMs()), (long long)timeoutMs());
      return peerLost(c, why);
    }
    if (r->pending > 0) return ncclSuccess;
  }
  // All slots done: report.
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < r->n; i++) {
    const Slot& s = r->slots[i];
    if (s.status == UCS_OK) continue;
    if (c->isSend) {
      // Failed sends: the receiver closed in order (discarded, fine) or died.
      OobWatch::State st = c->epForced ? OobWatch::kClosed : c->oob.settle(timeoutMs());
      if (st == OobWatch::kClosed) continue;
      char why[160];
      snprintf(why, sizeof(why), "send of tag %d failed: %s", s.tag, ucsStr(s.status));
      res = peerLost(c, why);
    } else if (s.status == UCS_ERR_MESSAGE_TRUNCATED) {
      WARN("NET/signlion-ucx: recv comm %p: message with tag %d is larger than the posted receive", (void*)c, s.tag);
      res = ncclInvalidUsage;
    } else {
      char why[160];
      snprintf(why, sizeof(why), "receive of tag %d failed: %s", s.tag, ucsStr(s.status));
      res = peerLost(c, why);
    }
    break;
  }
  if (res != ncclSuccess) return res;
  uint64_t bytes = 0;
  for (int i = 0; i < r->n; i++) {
    size_t len = c->isSend ? r->bytes : r->slots[i].length;
    if (sizes != nullptr) sizes[i] = (int)len;
    bytes += len;
  }
  (c->isSend ? c->bytesSent : c->bytesRecv).fetch_add(bytes, std::memory_order_relaxed);
  c->reqs.release(r);
  *done = 1;
  return ncclSuccess;
}

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
  Comm* c = asComm(sendComm, kCommSend);
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

ncclResult_t ucxCloseListen(void* listenComm) {
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "closeListen", "listenComm",
           "%p is not a listen comm", listenComm);
  for (Incoming& in : l->incoming) {
    if (in.comm != nullptr) destroyCommLocked(in.comm);
    closeFd(&in.fd);
  }
  closeFd(&l->fd);
  l->magic = 0;
  delete l;
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
