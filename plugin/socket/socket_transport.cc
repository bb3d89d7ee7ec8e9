#include "socket/socket_transport.h"

#include <fcntl.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_device_table.h"
#include "net/socket_devices.h"
#include "net/socket_params.h"
#include "net/socket_stream.h"
#include "net_common.h"
#include "socket/socket_pairing.h"
#include "socket/socket_wire.h"
#include "transport/connect_registry.h"
#include "transport/fixed_queue.h"
#include "transport/request_table.h"
#include "transport/tag_matcher.h"

namespace signlion {
namespace net {
namespace {

constexpr uint32_t kMrMagic = 0x534c4d52;      // "SLMR"
constexpr int kPollMs = 50;                    // helper wake-up period, bounds close latency
constexpr size_t kCallerOnlyMax = 512 * 1024;  // payloads up to this are moved by the caller (enqueueStreams)
constexpr size_t kMaxPendingAccepts = 256;
constexpr size_t kStageBytes = 64 * 1024;  // recv comm staging buffer for the control stream
constexpr size_t kDirectRead = 4096;  // inline remainder read straight into the user buffer
constexpr int kCtrlRounds = 1024;     // parse/read steps per progress call (fairness bound)
// Messages a recv comm keeps after reading their header: arrived before any
// receive held their tag, or spread ones waiting for an older unclaimed
// spread message (data streams carry payloads in message order). Past it the
// comm stops reading its control stream until receives claim some.
constexpr size_t kMaxKept = 256;
// Inline payloads kept for receives not posted yet, in bytes (at least one
// message is always taken).
constexpr size_t kEarlyBudget = 8u << 20;
// Written by a closing recv comm on each data stream, against the data's
// direction: the peer's sender reads it to tell an orderly close from a
// vanished peer.
constexpr char kByeMagic[8] = {'S', 'L', 'N', 'C', 'B', 'Y', 'E', '!'};

int64_t timeoutMs() {
  int64_t t = signlionParamSocketTimeoutMs();
  return t > 0 ? t : 30000;
}

// Wire formats: socket_wire.h.
using Hello = SocketHello;
using ListenHandle = SocketListenHandle;
using MsgHeader = SocketMsgHeader;
constexpr uint32_t kHandleMagic = kSocketHandleMagic;
constexpr uint16_t kWireVersion = kSocketWireVersion;
constexpr size_t kMaxInline = kSocketMaxInline;

// Whether a whole header is staged at `in` (avail bytes).
bool headerStaged(const char* in, size_t avail) {
  SocketMsgHeader h;
  size_t len;
  const char* why;
  return parseCtrlHeader(in, avail, &h, &len, &why) != CtrlHeader::kNeedMore;
}

// ---- Comms ------------------------------------------------------------------

struct Comm;

struct MemRegion {
  uint32_t magic;
  Comm* comm;
  char* base;
  size_t size;
};

struct SubRequest {
  char* data;
  size_t posted;  // capacity (recv) or message size (send)
  size_t size;    // bytes actually received / sent
  int tag;
  bool matched;  // recv: header seen
};

struct Request {
  Comm* comm;
  bool used;  // owned by the RequestTable
  bool isSend;
  bool ctrlDone;  // send: header (+ inline payload) written
  int n;
  SubRequest sub[kSocketMaxRecvs];
  std::atomic<size_t> pending{0};  // payload bytes still owned by helper threads
};

// The part of one message carried by one data stream: chunks first, first+step, ...
struct StreamTask {
  char* buf;
  size_t size;  // whole message
  size_t chunk;
  size_t nextChunk;
  size_t step;
  size_t off;    // progress inside chunk nextChunk
  size_t share;  // bytes of the message this task carries
  Request* req;
};

// What a recv comm keeps about a message whose header it read (TagMatcher's Msg).
struct RxMsg {
  uint64_t seq;  // message number: picks the data streams of a spread payload
  uint64_t size;
  bool isInline;
  bool payloadIn;  // inline: the payload is complete in early[earlyIdx]
  int earlyIdx;    // inline with a payload: its early buffer, else -1
};
using Matcher = TagMatcher<Request, RxMsg, kSocketMaxRequests, kMaxKept, kSocketMaxRecvs>;

struct Helper {
  std::thread thread;
  std::mutex mu;  // with cv: sleep and wake-up only, guards stop
  std::condition_variable cv;
  std::vector<int> streams;
  bool stop = false;
};

// One data stream. Whoever holds ioMu (the caller's thread inside
// isend/irecv/test, or the stream's helper) moves bytes of the front task;
// only that thread advances or pops it, so tasks stay FIFO and one thread at a
// time touches fd. The caller only try_locks ioMu: it never waits for a helper.
struct Stream {
  int fd = -1;
  std::mutex ioMu;
  std::mutex qMu;  // guards tasks (push by the caller, pop by the ioMu holder)
  // At most one task per stream per message in flight: kSocketMaxRequests
  // requests of up to kSocketMaxRecvs messages each.
  FixedQueue<StreamTask, kSocketMaxRequests * kSocketMaxRecvs> tasks;
  std::atomic<int> queued{0};  // tasks.size(), readable without qMu
};

struct Comm : CommHeader {
  bool isSend = false;
  // The control stream's socket. Until the comm is established it is ours
  // alone; then link.ctrl owns it (and may share it, socket_pairing.h) and
  // ctrlFd is its descriptor, cached for the hot path.
  int ctrlFd = -1;
  PairLink link;
  int trafficClass = -1;  // send: IP TOS of our streams (-1: none), kept for a shared connection
  MsgHeader pairHdr{};    // send: the pairing header being written
  size_t pairOff = 0;     // send: bytes of pairHdr written
  // Helpers signal it when a data-stream task completes (or fails), so a
  // caller sleeping in commWait wakes for payloads that never touch ctrlFd.
  int wakeFd = -1;
  int nsocks = 0;
  size_t chunkSize = 0;
  size_t inlineMax = 0;
  std::deque<Stream> streams;  // a deque: Stream holds mutexes and never moves
  std::vector<std::unique_ptr<Helper>> helpers;
  RequestTable<Request, kSocketMaxRequests> reqs;
  uint64_t seq = 0;                     // messages so far, the same count on both sides
  std::atomic<int> error{ncclSuccess};  // first failure, sticky
  // send: the peer closed its recv comm in order (kByeMagic read); from then
  // on sends complete without being delivered.
  std::atomic<bool> peerClosed{false};
  std::atomic<bool> closing{false};        // set by close before it shuts the streams down
  bool aborted = false;                    // socketAbortComm cut the streams: close says no bye
  int64_t byeCheckMs = 0;                  // send: last look for a bye while blocked (caller's thread)
  std::atomic<int64_t> dataProgressMs{0};  // last time any thread moved data-stream bytes
  std::atomic<int> queuedTasks{0};         // sum of the streams' `queued`: test() skips them all at 0
  std::mutex mrMutex;
  std::unordered_set<MemRegion*> mrs;

  // Control stream state, touched only by the caller's thread.
  FixedQueue<Request*, kSocketMaxRequests> ctrlQueue;  // send: requests whose header is not fully out
  // recv: receive matching (transport/tag_matcher.h), with the inline
  // payloads of kept messages in `early` (one buffer per kept slot, grown
  // on demand and reused: bounded by kMaxKept x SIGNLION_SOCKET_INLINE).
  Matcher matcher;
  std::vector<std::vector<char>> early;
  std::vector<int> earlyFree;
  size_t earlyBytes = 0;  // payload bytes held in early buffers
  int keptSpread = 0;     // kept messages with a spread payload
  size_t ctrlOff = 0;     // send: bytes of the front entry already written
  // recv: one recv() fills the staging buffer with headers and inline
  // payloads; they are parsed from it, and what no posted receive wants yet
  // waits there. Bytes [stageHead, stageTail) are unparsed.
  std::vector<char> stage;
  size_t stageHead = 0;
  size_t stageTail = 0;
  int64_t ackModeMs = -1;  // recv: last TCP_QUICKACK=0 on ctrlFd (see delayAcks)
  // recv: the inline payload being read, into a posted buffer (rxReq set)
  // or an early buffer (rxReq null; rxSeq names the kept message).
  bool rxActive = false;
  char* rxDst = nullptr;
  size_t rxSize = 0;
  size_t rxOff = 0;
  Request* rxReq = nullptr;
  uint64_t rxSeq = 0;
  // Since when the control stream waits mid-message (-1: it does not); see ctrlStalled.
  int64_t ctrlWaitSinceMs = -1;
  // recv: since when the comm is stuck beside an unclaimed kept message (a
  // receive waits with an open slot and nothing arrives; -1: it is not);
  // see unclaimedStuck.
  int64_t unclaimedWaitSinceMs = -1;
  // recv: the last header could not be taken for want of room to keep it
  // (kMaxKept messages or kEarlyBudget bytes kept): the comm stopped reading.
  bool keptStopped = false;

  // Connecting side only, until connect() returns the comm.
  struct Connecting {
    // Per stream (control first): the peer's interface it goes to, and ours
    // it leaves from (bound only when our device is fused: a single
    // interface leaves as routing says, as before).
    std::vector<SocketAddress> to;
    std::vector<SocketAddress> from;
    bool bindFrom = false;
    int trafficClass;
    int64_t deadline;
    std::vector<int> state;  // 0 connecting, 1 sending hello, 2 done
    std::vector<size_t> off;
    std::vector<Hello> hello;
  };
  std::unique_ptr<Connecting> connecting;
  PendingConnects* pending = nullptr;  // the context that keeps this unfinished connect
};

struct PendingConn {
  int fd;
  SocketAddress peer;
  Hello hello;
  size_t off;
  int64_t start;
};

struct ConnGroup {
  uint64_t connId;
  Hello ctrl;
  int ctrlFd = -1;
  std::vector<int> dataFds;
  int64_t start;
};

struct ListenComm : CommHeader {
  std::vector<int> fds;  // one listening socket per interface of the device
  uint64_t secret = 0;
  std::vector<PendingConn> pending;
  std::vector<ConnGroup> groups;
};

void wakeCaller(Comm* c) {
  uint64_t one = 1;
  ssize_t r;
  do {
    r = write(c->wakeFd, &one, sizeof(one));
  } while (r < 0 && errno == EINTR);  // EAGAIN: the counter is already non-zero, enough
}

void setError(Comm* c, ncclResult_t res, const char* what) {
  // A comm being closed cuts its own streams short: nothing to report.
  if (c->closing.load(std::memory_order_acquire)) return;
  int expected = ncclSuccess;
  if (c->error.compare_exchange_strong(expected, res)) {
    WARN("NET/signlion: %s comm %p: %s", c->isSend ? "send" : "recv", (void*)c, what);
    wakeCaller(c);  // a caller asleep in commWait must see the error
  }
}

// Mirrors an errno from send/recv into the comm's error (peer gone = remote error).
void setSysError(Comm* c, int err, const char* op) {
  std::string what = std::string(op) + ": " + (err == 0 ? "connection closed by peer" : strerror(err));
  bool remote = err == 0 || err == ECONNRESET || err == EPIPE || err == ETIMEDOUT || err == EHOSTUNREACH;
  setError(c, remote ? ncclRemoteError : ncclSystemError, what.c_str());
}

// ---- Orderly close ------------------------------------------------------------

// Send comm: whether the peer closed its recv comm in order, i.e. wrote
// kByeMagic on a data stream (nothing else ever travels against the data).
// Read also after the peer's reset: the kernel hands out what arrived before
// it. Sets peerClosed (once, with an INFO line).
bool peerSaidBye(Comm* c) {
  if (c->peerClosed.load(std::memory_order_acquire)) return true;
  for (Stream& st : c->streams) {
    char got[sizeof(kByeMagic)];
    ssize_t n = recv(st.fd, got, sizeof(got), MSG_DONTWAIT | MSG_PEEK);
    if (n == (ssize_t)sizeof(got) && memcmp(got, kByeMagic, sizeof(got)) == 0) {
      if (!c->peerClosed.exchange(true, std::memory_order_acq_rel))
        INFO(kSubsysNet, "NET/signlion: send comm %p: the peer closed its recv comm; later sends are not delivered",
             (void*)c);
      wakeCaller(c);
      return true;
    }
  }
  return false;
}

// A send failed with err: an orderly close of the peer, or an error. The
// peer's bye and its reset travel on different connections, so a reset
// waits (up to kByeWaitMs, an error path only) until every data stream has
// something to read: the bye, or the EOF/reset of a peer that vanished.
void sendFailed(Comm* c, int err, const char* op) {
  constexpr int kByeWaitMs = 250;
  bool peerGone = err == EPIPE || err == ECONNRESET;
  if (peerGone) {
    int64_t deadline = nowMs() + kByeWaitMs;
    bool ready[kSocketMaxStreams] = {};
    pollfd p[kSocketMaxStreams];
    int which[kSocketMaxStreams];
    for (;;) {
      if (peerSaidBye(c)) return;
      nfds_t n = 0;
      for (int s = 0; s < c->nsocks; s++)
        if (!ready[s]) which[n] = s, p[n++] = {c->streams[s].fd, POLLIN, 0};
      int64_t left = deadline - nowMs();
      if (n == 0 || left <= 0) break;
      if (poll(p, n, (int)left) < 0 && errno != EINTR) break;
      for (nfds_t i = 0; i < n; i++) ready[which[i]] |= p[i].revents != 0;
    }
  }
  setSysError(c, err, op);
}

// Recv comm closing: tells the peer's sender on every data stream, then ends
// our direction of them (the bye is followed by a FIN, nothing else).
void sayBye(Comm* c) {
  for (Stream& st : c->streams) {
    if (st.fd < 0) continue;
    (void)!send(st.fd, kByeMagic, sizeof(kByeMagic), MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(st.fd, SHUT_WR);
  }
}

// ---- Helper threads: data streams -------------------------------------------

// Moves bytes of task t on stream st until it is done, the socket would
// block or `budget` bytes moved. Returns bytes moved; -1 on error (recorded in
// the comm).
ssize_t progressTask(Comm* c, Stream* st, StreamTask* t, size_t budget, bool* taskDone) {
  ssize_t moved = 0;
  *taskDone = false;
  while (t->nextChunk * t->chunk < t->size) {
    if ((size_t)moved >= budget) return moved;
    size_t begin = t->nextChunk * t->chunk;
    size_t len = std::min(t->chunk, t->size - begin);
    char* p = t->buf + begin + t->off;
    size_t want = len - t->off;
    ssize_t r = c->isSend ? send(st->fd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(st->fd, p, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moved;
    if (r <= 0) {
      if (c->isSend)
        sendFailed(c, errno, "send on data stream");
      else
        setSysError(c, r == 0 ? 0 : errno, "recv on data stream");
      return -1;
    }
    moved += r;
    t->off += (size_t)r;
    if (t->off == len) {
      t->off = 0;
      t->nextChunk += t->step;
    }
  }
  *taskDone = true;
  return moved;
}

// Moves stream st's tasks, front first, until the socket would block or the
// queue is empty. A helper waits for ioMu; the caller's thread only tries it
// (a helper busy on the stream is progress already) and moves at most one
// chunk per stream per call, so one test() never runs long, however fast the
// peer sends. Returns true if bytes moved or a task completed.
bool progressStream(Comm* c, Stream* st, bool byHelper) {
  std::unique_lock<std::mutex> io(st->ioMu, std::defer_lock);
  if (byHelper)
    io.lock();
  else if (!io.try_lock())
    return false;
  bool progress = false;
  size_t budget = byHelper ? SIZE_MAX : c->chunkSize;
  while (budget > 0 && c->error.load(std::memory_order_relaxed) == ncclSuccess &&
         !c->peerClosed.load(std::memory_order_relaxed)) {
    StreamTask* t;
    {
      std::lock_guard<std::mutex> q(st->qMu);
      if (st->tasks.empty()) break;
      t = &st->tasks.front();
    }
    bool done = false;
    ssize_t moved = progressTask(c, st, t, budget, &done);
    if (moved < 0) break;
    budget -= std::min(budget, (size_t)moved);
    if (moved > 0) {
      progress = true;
      (c->isSend ? c->bytesSent : c->bytesRecv).fetch_add((uint64_t)moved, std::memory_order_relaxed);
    }
    if (!done) break;
    Request* req = t->req;
    size_t bytes = t->share;
    {
      std::lock_guard<std::mutex> q(st->qMu);
      st->tasks.pop_front();
      st->queued.fetch_sub(1, std::memory_order_release);
      c->queuedTasks.fetch_sub(1, std::memory_order_release);
    }
    req->pending.fetch_sub(bytes, std::memory_order_acq_rel);  // last touch of req
    if (byHelper) wakeCaller(c);                               // the caller may sleep in commWait
    progress = true;
  }
  if (progress) c->dataProgressMs.store(nowMs(), std::memory_order_relaxed);
  return progress;
}

// The caller's share of the work: every data stream with queued tasks, no waiting.
void callerProgressStreams(Comm* c) {
  if (c->queuedTasks.load(std::memory_order_acquire) == 0) return;  // small messages: no stream to visit
  for (Stream& st : c->streams)
    if (st.queued.load(std::memory_order_acquire) > 0) progressStream(c, &st, false);
}

// Hands the streams the caller could not finish to their helpers.
void wakeHelpers(Comm* c) {
  for (auto& h : c->helpers) {
    bool busy = false;
    for (int s : h->streams) busy |= c->streams[s].queued.load(std::memory_order_acquire) > 0;
    if (!busy) continue;
    { std::lock_guard<std::mutex> lk(h->mu); }  // a helper between its check and its wait sees the task
    h->cv.notify_one();
  }
}

void helperLoop(Comm* c, Helper* h) {
  std::vector<pollfd> pfds;
  std::vector<int> which;
  int64_t lastProgress = nowMs();
  auto busy = [&] {
    if (c->error.load(std::memory_order_relaxed) != ncclSuccess || c->peerClosed.load(std::memory_order_relaxed))
      return false;
    for (int s : h->streams)
      if (c->streams[s].queued.load(std::memory_order_acquire) > 0) return true;
    return false;
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(h->mu);
      if (!h->stop && !busy()) {
        h->cv.wait_for(lk, std::chrono::milliseconds(kPollMs), [&] { return h->stop || busy(); });
        lastProgress = nowMs();  // idle time is not a stall
      }
      if (h->stop) return;
    }
    pfds.clear();
    which.clear();
    for (int s : h->streams) {
      if (c->streams[s].queued.load(std::memory_order_acquire) == 0) continue;
      // A sender also watches for the peer's bye (or reset) against the data.
      pfds.push_back({c->streams[s].fd, (short)(c->isSend ? POLLOUT | POLLIN : POLLIN), 0});
      which.push_back(s);
    }
    if (pfds.empty()) continue;
    int r = poll(pfds.data(), pfds.size(), kPollMs);
    if (r < 0 && errno != EINTR) {
      setSysError(c, errno, "poll");
      continue;
    }
    bool progress = false;
    for (size_t i = 0; r > 0 && i < pfds.size(); i++) {
      if (c->isSend && (pfds[i].revents & POLLIN) && peerSaidBye(c)) break;
      if (pfds[i].revents != 0) progress |= progressStream(c, &c->streams[which[i]], true);
    }
    int64_t now = nowMs();
    if (progress) {
      lastProgress = now;
    } else if (now - std::max(lastProgress, c->dataProgressMs.load(std::memory_order_relaxed)) > timeoutMs() &&
               busy() && !(c->isSend && peerSaidBye(c))) {
      setError(c, ncclRemoteError, "no progress on a data stream within SIGNLION_SOCKET_TIMEOUT");
    }
  }
}

// Deals the payload of message `seq` (size bytes at buf) to the data streams;
// the caller has added size to req->pending. The caller moves what the
// sockets take at once; helpers are woken for the rest.
void enqueueStreams(Comm* c, uint64_t seq, char* buf, size_t size, Request* req) {
  size_t nchunks = (size + c->chunkSize - 1) / c->chunkSize;
  if (nchunks == 0) return;
  size_t n = (size_t)c->nsocks;
  size_t start = seq % n;
  for (size_t s = 0; s < n; s++) {
    size_t first = (s + n - start) % n;  // first chunk index carried by stream s
    if (first >= nchunks) continue;
    size_t share = 0;
    for (size_t k = first; k < nchunks; k += n) share += std::min(c->chunkSize, size - k * c->chunkSize);
    Stream& st = c->streams[s];
    std::lock_guard<std::mutex> q(st.qMu);
    bool queued = st.tasks.push_back({buf, size, c->chunkSize, first, n, 0, share, req});
    if (!queued) {  // cannot happen: the request table bounds the tasks
      setError(c, ncclInternalError, "stream task queue overflow");
      return;
    }
    st.queued.fetch_add(1, std::memory_order_release);
    c->queuedTasks.fetch_add(1, std::memory_order_release);
  }
  callerProgressStreams(c);
  // A medium message is left to the caller, whose test() calls (and
  // commWait, which polls the streams with queued tasks) finish it: waking a
  // helper for what the sockets did not take at once cost a thread hand-off
  // per message and helpers racing the caller for two cores, 256 KiB
  // ping-pong 1.45x the plain socket instead of 1.1-1.2x (docs/
  // PERFORMANCE.md, "Why medium messages cost what they cost"). A caller that stops calling
  // still gets it done: an idle helper checks its streams every kPollMs.
  if (size > kCallerOnlyMax) wakeHelpers(c);
}

ncclResult_t startHelpers(Comm* c, int nthreads) {
  nthreads = std::max(1, std::min(nthreads, c->nsocks));
  for (int t = 0; t < nthreads; t++) c->helpers.emplace_back(new Helper());
  for (int s = 0; s < c->nsocks; s++) c->helpers[s % nthreads]->streams.push_back(s);
  for (auto& h : c->helpers) {
    try {
      h->thread = std::thread(helperLoop, c, h.get());
    } catch (const std::exception& e) {
      WARN("NET/signlion: cannot start helper thread: %s", e.what());
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

// An unfinished connect leaves its context's list: it finished or failed.
void unlistPending(Comm* c) {
  if (c->pending == nullptr) return;
  std::lock_guard<std::mutex> lk(c->pending->mu);
  c->pending->comms.erase(c);
  c->pending = nullptr;
}

// Send comms whose connect is in progress (connect_registry.h).
ConnectRegistry& connectsInProgress() {
  static ConnectRegistry r;
  return r;
}

void destroyComm(Comm* c) {
  connectsInProgress().remove(c);
  c->closing.store(true, std::memory_order_release);
  unlistPending(c);
  pairUnregister(&c->link);
  for (auto& h : c->helpers) {
    {
      std::lock_guard<std::mutex> lk(h->mu);
      h->stop = true;
    }
    h->cv.notify_all();
  }
  for (Stream& s : c->streams)
    if (s.fd >= 0) shutdown(s.fd, SHUT_RDWR);
  for (auto& h : c->helpers)
    if (h->thread.joinable()) h->thread.join();
  for (Stream& s : c->streams) closeFd(&s.fd);
  if (c->link.ctrl != nullptr) {
    // A shared socket stays open for its other owner: end only our
    // direction, so the peer's reader sees EOF as if we had closed it.
    if (c->isSend) shutdown(c->link.ctrl->fd, SHUT_WR);
    c->link.ctrl.reset();
    c->ctrlFd = -1;
  }
  closeFd(&c->ctrlFd);
  closeFd(&c->wakeFd);
  for (MemRegion* mr : c->mrs) {
    mr->magic = 0;
    delete mr;
  }
  c->magic = 0;
  delete c;
}

Comm* newComm(bool isSend) {
  Comm* c = new Comm();
  c->magic = kCommMagic;
  c->kind = isSend ? kCommSend : kCommRecv;
  c->isSend = isSend;
  c->inlineMax = (size_t)std::max<int64_t>(0, std::min<int64_t>(signlionParamSocketInline(), kMaxInline));
  if (!isSend) {
    c->stage.resize(kStageBytes);
    c->early.resize(kMaxKept);
    for (int i = (int)kMaxKept - 1; i >= 0; i--) c->earlyFree.push_back(i);
  }
  c->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wakeFd < 0) {
    WARN("NET/signlion: eventfd failed: %s", strerror(errno));
    c->magic = 0;
    delete c;
    return nullptr;
  }
  return c;
}

// The comm is established: its control socket moves into link.ctrl and the
// comm is registered for pairing (socket_pairing.h).
void establishCtrl(Comm* c, uint64_t connId, uint64_t peerInstance) {
  c->link.shared = &c->ctrlShared;
  c->link.isSend = c->isSend;
  c->link.connId = connId;
  c->link.peerInstance = peerInstance;
  c->link.ctrl = std::make_shared<CtrlSocket>(c->ctrlFd);
  pairRegister(&c->link);
}

Comm* asComm(void* p, CommKind kind) {
  Comm* c = static_cast<Comm*>(static_cast<CommHeader*>(p));
  if (c == nullptr || c->magic != kCommMagic || c->kind != (uint32_t)kind) return nullptr;
  return c;
}

// ---- Control stream ---------------------------------------------------------

// A wait's stall clock (*sinceMs: when it began or last moved, -1: no
// wait), here the control stream's. `waiting`: a message is part-way (send:
// queued bytes the socket did not take; recv: a header or inline payload cut
// short); `moved`: bytes moved in this call. Returns true once the stream has
// waited without progress longer than SIGNLION_SOCKET_TIMEOUT. The clock is
// read only while waiting: a small message that goes out or comes in whole
// (the latency-bound case) costs no clock read here.
bool waitedTooLong(int64_t* sinceMs, bool waiting, bool moved) {
  if (!waiting) {
    *sinceMs = -1;
    return false;
  }
  int64_t now = nowMs();
  if (moved || *sinceMs < 0) *sinceMs = now;
  return now - *sinceMs > timeoutMs();
}
bool ctrlStalled(Comm* c, bool waiting, bool moved) { return waitedTooLong(&c->ctrlWaitSinceMs, waiting, moved); }

// Writes the pairing header a send comm owes (socket_pairing.h), between two
// messages. Returns true once it is out or no longer owed (a switch marker
// also moves the comm onto the shared connection; its old one closes, FIN
// after the marker), false while the socket does not take it or after an error.
bool progressPairHeader(Comm* c, bool* moved) {
  if (c->pairOff == 0) {
    uint32_t due = c->link.due.load(std::memory_order_acquire);
    uint64_t offer = 0;
    if (due & kPairSwitchDue) {
      c->pairHdr = MsgHeader{0, kMsgSwitch, 0};
    } else if (pairTakeOffer(&c->link, &offer)) {
      c->pairHdr = MsgHeader{0, kMsgPair, offer};
    } else {  // the pairing was undone before we took the offer
      c->link.due.fetch_and(~(uint32_t)kPairOfferDue, std::memory_order_acq_rel);
      return true;
    }
  }
  char wire[kWirePairBytes];
  const size_t len = encodeHeader(c->pairHdr, wire);
  while (c->pairOff < len) {
    ssize_t n = send(c->ctrlFd, wire + c->pairOff, len - c->pairOff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n < 0) {
      sendFailed(c, errno, "send on control stream");
      return false;
    }
    *moved = true;
    c->bytesSent.fetch_add((uint64_t)n, std::memory_order_relaxed);
    c->pairOff += (size_t)n;
  }
  c->pairOff = 0;
  if (c->pairHdr.flags & kMsgSwitch) {
    CtrlRef to = pairTakeAdopted(&c->link);
    if (to == nullptr) {  // cannot happen: the switch is due only with a socket to move to
      setError(c, ncclInternalError, "switch marker sent without a connection to move to");
      return false;
    }
    c->link.ctrl = std::move(to);
    c->ctrlFd = c->link.ctrl->fd;
    // The adopted end was accepted by the peer, with no traffic class; ours
    // must keep applying to what this comm sends.
    if (c->trafficClass >= 0) tuneStream(c->ctrlFd, c->trafficClass, c->link.local.sa.sa_family);
    c->link.due.fetch_and(~(uint32_t)kPairSwitchDue, std::memory_order_acq_rel);
  } else {
    c->link.due.fetch_and(~(uint32_t)kPairOfferDue, std::memory_order_acq_rel);
  }
  c->ctrlShared.store(1, std::memory_order_relaxed);
  return true;
}

// Writes queued headers (and inline payloads) in order, as far as the socket takes them.
void progressSendCtrl(Comm* c) {
  bool moved = false;
  while (c->error.load(std::memory_order_relaxed) == ncclSuccess && !c->peerClosed.load(std::memory_order_relaxed)) {
    // A pairing header goes at the next message boundary (one relaxed load
    // per message when none is owed).
    if (c->ctrlOff == 0 && c->link.due.load(std::memory_order_relaxed) != 0 && !progressPairHeader(c, &moved)) break;
    if (c->ctrlQueue.empty()) break;
    Request* r = c->ctrlQueue.front();
    MsgHeader hdr{r->sub[0].tag, 0, r->sub[0].posted};
    bool inl = r->sub[0].posted <= c->inlineMax;
    if (inl) hdr.flags |= kMsgInline;
    char wire[kWirePairBytes];
    const size_t hlen = encodeHeader(hdr, wire);
    size_t total = hlen + (inl ? r->sub[0].posted : 0);
    iovec iov[2];
    int niov = 0;
    if (c->ctrlOff < hlen) {
      iov[niov++] = {wire + c->ctrlOff, hlen - c->ctrlOff};
      if (inl && r->sub[0].posted > 0) iov[niov++] = {r->sub[0].data, r->sub[0].posted};
    } else {
      iov[niov++] = {r->sub[0].data + (c->ctrlOff - hlen), total - c->ctrlOff};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    ssize_t n = sendmsg(c->ctrlFd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      sendFailed(c, errno, "send on control stream");
      return;
    }
    moved = true;
    c->bytesSent.fetch_add((uint64_t)n, std::memory_order_relaxed);
    c->ctrlOff += (size_t)n;
    if (c->ctrlOff == total) {
      r->ctrlDone = true;
      c->ctrlOff = 0;
      c->ctrlQueue.pop_front();
    }
  }
  if (c->peerClosed.load(std::memory_order_relaxed)) return;
  bool waiting = !c->ctrlQueue.empty() || c->pairOff > 0;
  if (waiting && !moved && c->ctrlWaitSinceMs >= 0) {
    // Blocked: a closed peer whose control socket stays open (shared with
    // its process's sender, socket_pairing.h) takes no more bytes and sends
    // no reset; its bye on the data streams says so. Looked for at most
    // every kPollMs while blocked, never on the fast path.
    int64_t now = nowMs();
    if (now - c->byeCheckMs >= kPollMs && now - c->ctrlWaitSinceMs >= kPollMs) {
      c->byeCheckMs = now;
      if (peerSaidBye(c)) return;
    }
  }
  if (ctrlStalled(c, waiting, moved))
    setError(c, ncclRemoteError, "control stream blocked longer than SIGNLION_SOCKET_TIMEOUT");
}

// Send comm whose peer closed in order: what is queued is dropped and every
// outstanding send completes. Waits for a helper inside a data-stream call
// (non-blocking, short), so none touches a buffer once its request is done.
void discardSends(Comm* c) {
  while (!c->ctrlQueue.empty()) {
    c->ctrlQueue.front()->ctrlDone = true;
    c->ctrlQueue.pop_front();
  }
  c->ctrlOff = 0;
  c->ctrlWaitSinceMs = -1;
  if (c->queuedTasks.load(std::memory_order_acquire) == 0) return;
  for (Stream& st : c->streams) {
    std::lock_guard<std::mutex> io(st.ioMu);
    std::lock_guard<std::mutex> q(st.qMu);
    while (!st.tasks.empty()) {
      StreamTask& t = st.tasks.front();
      t.req->pending.fetch_sub(t.share, std::memory_order_acq_rel);
      st.tasks.pop_front();
      st.queued.fetch_sub(1, std::memory_order_release);
      c->queuedTasks.fetch_sub(1, std::memory_order_release);
    }
  }
}

// Reads into buf up to want bytes; returns bytes read, 0 when nothing is
// available now, -1 after recording an error (EOF included).
ssize_t readCtrl(Comm* c, char* buf, size_t want) {
  for (;;) {
    ssize_t n = recv(c->ctrlFd, buf, want, MSG_DONTWAIT);
    if (n > 0) {
      c->bytesRecv.fetch_add((uint64_t)n, std::memory_order_relaxed);
      return n;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    setSysError(c, n == 0 ? 0 : errno, "recv on control stream");
    return -1;
  }
}

// Refills the staging buffer from the control stream (keeping the unparsed
// tail, always shorter than a header here). Returns readCtrl's result.
ssize_t fillStage(Comm* c) {
  size_t avail = c->stageTail - c->stageHead;
  if (c->stageHead > 0) {
    memmove(c->stage.data(), c->stage.data() + c->stageHead, avail);
    c->stageHead = 0;
    c->stageTail = avail;
  }
  ssize_t n = readCtrl(c, c->stage.data() + c->stageTail, c->stage.size() - c->stageTail);
  if (n > 0) c->stageTail += (size_t)n;
  return n;
}

// An early buffer for a kept inline payload of `size` bytes; -1 when the
// budget is spent (the comm then reads no further until receives claim some).
int takeEarly(Comm* c, size_t size) {
  if (c->earlyFree.empty() || (c->earlyBytes > 0 && c->earlyBytes + size > kEarlyBudget)) return -1;
  int i = c->earlyFree.back();
  c->earlyFree.pop_back();
  if (c->early[i].size() < size) c->early[i].resize(size);  // grows once per slot, then reused
  c->earlyBytes += size;
  return i;
}

void giveEarly(Comm* c, const RxMsg& m) {
  if (m.earlyIdx < 0) return;
  c->earlyBytes -= m.size;
  c->earlyFree.push_back(m.earlyIdx);
}

// Slot `slot` of receive r takes a message of `size` bytes. Returns false
// after recording an error (larger than the posted buffer).
bool fillSlot(Comm* c, Request* r, int slot, int tag, uint64_t size) {
  SubRequest* s = &r->sub[slot];
  if (size > s->posted) {
    char what[160];
    snprintf(what, sizeof(what), "message of %llu bytes (tag %d) is larger than the posted receive of %zu bytes",
             (unsigned long long)size, tag, s->posted);
    setError(c, ncclInvalidUsage, what);
    return false;
  }
  s->matched = true;
  s->size = size;
  r->pending.fetch_add(size, std::memory_order_acq_rel);  // until the payload is in
  return true;
}

// Starts reading an inline payload off the control stream.
void startInline(Comm* c, char* dst, size_t size, Request* r, uint64_t seq) {
  c->rxActive = true;
  c->rxDst = dst;
  c->rxSize = size;
  c->rxOff = 0;
  c->rxReq = r;
  c->rxSeq = seq;
}

// Hands kept messages that are claimed to their receives: an inline payload
// complete in its early buffer is copied; a spread one starts on the data
// streams, but only in message order (the streams carry payloads in the
// sender's order, so one behind an unclaimed spread message waits).
void deliverKept(Comm* c) {
  bool spreadBlocked = false;
  for (size_t i = 0; i < c->matcher.keptCount();) {
    Matcher::Kept& k = c->matcher.kept(i);
    const RxMsg& m = k.msg;
    if (m.isInline) {
      if (k.recv != nullptr && m.payloadIn) {
        if (m.size > 0) memcpy(k.recv->sub[k.slot].data, c->early[m.earlyIdx].data(), m.size);
        k.recv->pending.fetch_sub(m.size, std::memory_order_acq_rel);
        giveEarly(c, m);
        c->matcher.release(i);
        continue;
      }
    } else if (k.recv == nullptr) {
      spreadBlocked = true;
    } else if (!spreadBlocked) {
      enqueueStreams(c, m.seq, k.recv->sub[k.slot].data, m.size, k.recv);
      c->keptSpread--;
      c->matcher.release(i);
      continue;
    }
    i++;
  }
}

// The message whose header was just read: to the receive that holds its tag
// (transport/tag_matcher.h), or kept until one is posted. Returns 1 when
// taken, 0 when it must wait unread (no room to keep it), -1 after an error.
int takeHeader(Comm* c, const MsgHeader& hdr) {
  bool isInline = (hdr.flags & kMsgInline) != 0;  // its size was checked by parseCtrlHeader
  // A claimed spread message behind a kept one is kept too: needs room first.
  if (c->matcher.keptFull() && !isInline && c->keptSpread > 0) return 0;
  Request* r = nullptr;
  int slot = -1;
  if (!c->matcher.claim(hdr.tag, &r, &slot)) {
    if (c->matcher.keptFull()) return 0;
    RxMsg m{c->seq, hdr.size, isInline, !isInline || hdr.size == 0, -1};
    if (isInline && hdr.size > 0 && (m.earlyIdx = takeEarly(c, hdr.size)) < 0) return 0;
    c->matcher.keep(hdr.tag, m);
    if (!isInline)
      c->keptSpread++;
    else if (hdr.size > 0)
      startInline(c, c->early[m.earlyIdx].data(), hdr.size, nullptr, c->seq);
    c->seq++;
    return 1;
  }
  if (!fillSlot(c, r, slot, hdr.tag, hdr.size)) return -1;
  uint64_t seq = c->seq++;
  if (isInline) {
    if (hdr.size > 0) startInline(c, r->sub[slot].data, hdr.size, r, seq);
  } else if (c->keptSpread > 0) {
    c->matcher.keep(hdr.tag, RxMsg{seq, hdr.size, false, true, -1}, r, slot);
    c->keptSpread++;
  } else {
    enqueueStreams(c, seq, r->sub[slot].data, hdr.size, r);
  }
  return 1;
}

// An inline payload is complete: its receive's share is in, or its kept
// message may now be delivered.
void finishInline(Comm* c) {
  c->rxActive = false;
  if (c->rxReq != nullptr) {
    c->rxReq->pending.fetch_sub(c->rxSize, std::memory_order_acq_rel);
    c->rxReq = nullptr;
    return;
  }
  for (size_t i = 0; i < c->matcher.keptCount(); i++)
    if (c->matcher.kept(i).msg.isInline && c->matcher.kept(i).msg.seq == c->rxSeq)
      c->matcher.kept(i).msg.payloadIn = true;
  deliverKept(c);
}

// The oldest kept message no receive claimed, or nullptr.
const Matcher::Kept* oldestUnclaimed(Comm* c) {
  for (size_t i = 0; i < c->matcher.keptCount(); i++)
    if (c->matcher.kept(i).recv == nullptr) return &c->matcher.kept(i);
  return nullptr;
}

// A pairing header (socket_pairing.h: kPair or kSwitch from parseCtrlHeader) read on the control
// stream. Returns false after recording a protocol error.
bool handlePairHeader(Comm* c, const MsgHeader& hdr) {
  if (hdr.flags == kMsgPair) {
    pairAcceptOffer(&c->link, hdr.size);
    return true;
  }
  // The marker: the peer's sender moved onto the connection we were pinned
  // to. Nothing may follow it here (what has arrived already is checked).
  char stray;
  if (c->stageTail != c->stageHead || recv(c->ctrlFd, &stray, 1, MSG_DONTWAIT | MSG_PEEK) > 0) {
    setError(c, ncclRemoteError, "protocol error: bytes after the switch marker");
    return false;
  }
  CtrlRef to = pairTakeAdopted(&c->link);
  if (to == nullptr) {
    setError(c, ncclRemoteError, "protocol error: switch marker without a pairing");
    return false;
  }
  c->link.ctrl = std::move(to);
  c->ctrlFd = c->link.ctrl->fd;
  c->stageHead = c->stageTail = 0;
  c->ackModeMs = -1;
  c->ctrlShared.store(1, std::memory_order_relaxed);
  return true;
}

// A message no receive claims is an error once the comm is stuck with it
// for SIGNLION_SOCKET_TIMEOUT: a receive waits with an open slot, and no
// header, control-stream byte or data-stream byte arrives. Then the two
// sides disagree on tags (or the kept tables are full and the message the
// open receive waits for is behind them). Its age alone proves nothing: a
// receiver may take other messages for longer than the timeout before it
// posts the receive for an early one. Costs a clock read per call only
// while a kept message waits. `moved`: this call matched a header or read bytes.
void unclaimedStuck(Comm* c, bool moved) {
  const Matcher::Kept* k = oldestUnclaimed(c);
  bool waiting = k != nullptr && c->matcher.anyPosted();
  // Payload bytes of earlier messages moving count as progress too.
  if (waiting && c->unclaimedWaitSinceMs >= 0 &&
      c->dataProgressMs.load(std::memory_order_relaxed) >= c->unclaimedWaitSinceMs)
    moved = true;
  if (!waitedTooLong(&c->unclaimedWaitSinceMs, waiting, moved)) return;
  char limit[160] = "";
  if (c->keptStopped)
    snprintf(limit, sizeof(limit),
             "; the comm stopped reading at its limit of kept messages (%zu kept messages, %zu bytes of early "
             "payloads; limits %zu, %zu)",
             c->matcher.keptCount(), c->earlyBytes, kMaxKept, kEarlyBudget);
  char what[400];
  snprintf(what, sizeof(what),
           "message with tag %d (%llu bytes) is held by no posted receive, and the posted receives got nothing for "
           "%lld ms (SIGNLION_SOCKET_TIMEOUT)%s",
           k->tag, (unsigned long long)k->msg.size, (long long)(nowMs() - c->unclaimedWaitSinceMs), limit);
  setError(c, ncclInvalidUsage, what);
}

// Parses headers and inline payloads from the staging buffer, refilling it
// with one recv() whenever it runs short: a small message whose header and
// payload came together costs one system call. irecv passes readSocket=false:
// it only parses what is staged, as test() reads next anyway (a receive is
// mostly posted before its message is sent, so reading then is a wasted call).
void progressRecvCtrl(Comm* c, bool readSocket) {
  bool moved = false;
  bool took = false;  // a message header was matched or kept
  for (int round = 0; round < kCtrlRounds && c->error.load(std::memory_order_relaxed) == ncclSuccess; round++) {
    size_t avail = c->stageTail - c->stageHead;
    const char* head = c->stage.data() + c->stageHead;
    MsgHeader hdr;
    size_t hlen = 0;
    const char* why = nullptr;
    if (c->rxActive) {
      size_t k = std::min(avail, c->rxSize - c->rxOff);
      if (k > 0) memcpy(c->rxDst + c->rxOff, head, k);
      c->stageHead += k;
      c->rxOff += k;
      size_t want = c->rxSize - c->rxOff;
      if (want == 0) {
        finishInline(c);
        continue;
      }
      if (!readSocket) break;
      if (want >= kDirectRead) {  // staging is empty: no copy for a large remainder
        ssize_t n = readCtrl(c, c->rxDst + c->rxOff, want);
        if (n <= 0) break;
        moved = true;
        c->rxOff += (size_t)n;
        continue;
      }
    } else if (CtrlHeader kind = parseCtrlHeader(head, avail, &hdr, &hlen, &why); kind != CtrlHeader::kNeedMore) {
      if (kind == CtrlHeader::kMalformed) {
        char what[160];
        snprintf(what, sizeof(what), "protocol error: %s (tag %d, flags %u, size %llu)", why, hdr.tag, hdr.flags,
                 (unsigned long long)hdr.size);
        setError(c, ncclRemoteError, what);
        return;
      }
      if (kind != CtrlHeader::kMessage) {  // pairing
        c->stageHead += hlen;
        if (!handlePairHeader(c, hdr)) return;
        continue;
      }
      // With no receive open the message waits in staging: the receive
      // posted next takes it straight from there, without a copy to keep it.
      if (!c->matcher.anyPosted()) break;
      int taken = takeHeader(c, hdr);
      if (taken < 0) return;
      c->keptStopped = taken == 0;
      if (taken == 0) break;  // no room to keep it: read on once receives claim some
      c->stageHead += hlen;
      took = true;
      continue;
    } else if (!c->matcher.anyPosted()) {
      break;  // nothing posted: leave the bytes in the socket
    }
    if (!readSocket) break;
    ssize_t n = fillStage(c);
    if (n <= 0) break;
    moved = true;
    delayAcks(c->ctrlFd, &c->ackModeMs);
  }
  size_t avail = c->stageTail - c->stageHead;
  bool partial =
      c->rxActive || (avail > 0 && !headerStaged(c->stage.data() + c->stageHead, avail));
  if (ctrlStalled(c, partial, moved))
    setError(c, ncclRemoteError, "control stream stalled mid-message longer than SIGNLION_SOCKET_TIMEOUT");
  if (c->error.load(std::memory_order_relaxed) == ncclSuccess) unclaimedStuck(c, took || moved);
}

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

}  // namespace

// ---- API --------------------------------------------------------------------

ncclResult_t socketListen(int dev, void* handle, void** listenComm) {
  ARGCHECK(handle != nullptr, "listen", "handle", "NULL");
  ARGCHECK(listenComm != nullptr, "listen", "listenComm", "NULL");
  *listenComm = nullptr;
  NicSet nics;
  ARGCHECK(deviceNics(dev, &nics), "listen", "dev", "%d is not a device", dev);

  std::unique_ptr<ListenComm> l(new ListenComm());
  l->magic = kCommMagic;
  l->kind = kCommListen;
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.nnics = (uint8_t)nics.n;
  h.instance = localInstance();
  h.connecting = nullptr;
  auto fail = [&] {
    for (int& fd : l->fds) closeFd(&fd);
    return ncclSystemError;
  };
  for (int i = 0; i < nics.n; i++) {
    SocketAddress bound;
    l->fds.push_back(-1);
    if (!listenOnFreePort(nics.addr[i], 1024, &l->fds.back(), &bound)) return fail();
    h.nics[i] = toHandleNic(bound);
    INFO(kSubsysNet, "NET/signlion: listening on %s", addressString(bound).c_str());
  }
  if (getrandom(&l->secret, sizeof(l->secret), 0) != (ssize_t)sizeof(l->secret)) {
    WARN("NET/signlion: getrandom failed: %s", strerror(errno));
    return fail();
  }
  h.secret = l->secret;
  memset(handle, 0, 128);
  memcpy(handle, &h, sizeof(h));
  *listenComm = static_cast<CommHeader*>(l.release());
  return ncclSuccess;
}

ncclResult_t socketConnect(int dev, int trafficClass, void* handle, void** sendComm, PendingConnects* pending) {
  ARGCHECK(handle != nullptr, "connect", "handle", "NULL");
  ARGCHECK(sendComm != nullptr, "connect", "sendComm", "NULL");
  *sendComm = nullptr;
  // NCCL's handle buffer has no alignment promise: read it by copy, and write
  // back only the connector-private pointer, also by copy.
  SocketParsedHandle parsed;
  NCCLCHECK(socketParseHandle(handle, &parsed));
  const ListenHandle* h = &parsed.raw;
  const SocketAddress* remote = parsed.remote;
  auto setConnecting = [handle](Comm* comm) {
    void* p = comm;
    memcpy(static_cast<char*>(handle) + offsetof(ListenHandle, connecting), &p, sizeof(p));
  };
  NicSet local;
  ARGCHECK(deviceNics(dev, &local), "connect", "dev", "%d is not a device", dev);

  Comm* c = static_cast<Comm*>(h->connecting);
  ARGCHECK(c == nullptr || connectsInProgress().contains(c), "connect", "handle",
           "its connector-private bytes hold %p, no connect of this process (a handle from a peer must come "
           "unchanged from its listen)", h->connecting);
  if (c == nullptr) {
    c = newComm(true);
    if (c == nullptr) return ncclSystemError;
    c->nsocks = socketDeviceStreams(local);
    c->chunkSize = (size_t)std::max<int64_t>(4096, std::min<int64_t>(signlionParamSocketChunkSize(), 1 << 30));
    for (int s = 0; s < c->nsocks; s++) c->streams.emplace_back();
    auto* cs = new Comm::Connecting();
    c->connecting.reset(cs);
    cs->trafficClass = trafficClass;
    c->trafficClass = trafficClass;
    cs->deadline = nowMs() + timeoutMs();
    uint64_t connId = 0;
    if (getrandom(&connId, sizeof(connId), 0) != (ssize_t)sizeof(connId)) connId = (uint64_t)nowMs() ^ (uint64_t)c;
    int nfd = 1 + c->nsocks;
    cs->state.assign(nfd, 0);
    cs->off.assign(nfd, 0);
    cs->hello.resize(nfd);
    // Control and data stream 0 on the first interface, stream i on i mod n
    // at each end: a fused device's streams spread over its interfaces.
    cs->bindFrom = local.n > 1;
    for (int i = 0; i < nfd; i++) {
      int s = i == 0 ? 0 : i - 1;
      cs->to.push_back(remote[s % h->nnics]);
      cs->from.push_back(local.addr[s % local.n]);
    }
    for (int i = 0; i < nfd; i++) {
      Hello& he = cs->hello[i];
      he = Hello{};
      he.magic = kHandleMagic;
      he.version = kWireVersion;
      he.kind = i == 0 ? 0 : 1;  // control, data
      he.index = (uint8_t)(i == 0 ? 0 : i - 1);
      he.nsocks = (uint32_t)c->nsocks;
      he.chunkSize = (uint32_t)c->chunkSize;
      he.secret = h->secret;
      he.connId = connId;
      he.instance = localInstance();
      int* fd = i == 0 ? &c->ctrlFd : &c->streams[i - 1].fd;
      if (!startConnect(cs->to[i], trafficClass, fd, cs->bindFrom ? &cs->from[i] : nullptr)) {
        WARN("NET/signlion: connect to %s failed: %s", addressString(cs->to[i]).c_str(), strerror(errno));
        destroyComm(c);
        return ncclSystemError;
      }
    }
    setConnecting(c);
    connectsInProgress().add(c);
    if (pending != nullptr) {
      std::lock_guard<std::mutex> lk(pending->mu);
      pending->comms.insert(c);
      c->pending = pending;
    }
  }
  Comm::Connecting* cs = c->connecting.get();
  int nfd = 1 + c->nsocks;
  bool all = true;
  for (int i = 0; i < nfd; i++) {
    int* fd = i == 0 ? &c->ctrlFd : &c->streams[i - 1].fd;
    if (cs->state[i] == 0) {
      pollfd p{*fd, POLLOUT, 0};
      if (poll(&p, 1, 0) > 0) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err == 0) {
          cs->state[i] = 1;
        } else if ((err == ECONNREFUSED || err == ETIMEDOUT) && nowMs() < cs->deadline) {
          closeFd(fd);  // the listener may not be up yet: try again on the next call
          if (!startConnect(cs->to[i], cs->trafficClass, fd, cs->bindFrom ? &cs->from[i] : nullptr))
            err = errno;
          else
            err = 0;
        }
        if (err != 0 && cs->state[i] == 0) {
          WARN("NET/signlion: connect to %s failed: %s", addressString(cs->to[i]).c_str(), strerror(err));
          setConnecting(nullptr);
          destroyComm(c);
          return ncclSystemError;
        }
      }
    }
    if (cs->state[i] == 1) {
      ssize_t n = send(*fd, (char*)&cs->hello[i] + cs->off[i], sizeof(Hello) - cs->off[i], MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0)
        cs->off[i] += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        WARN("NET/signlion: handshake with %s failed: %s", addressString(cs->to[i]).c_str(), strerror(errno));
        setConnecting(nullptr);
        destroyComm(c);
        return ncclSystemError;
      }
      if (cs->off[i] == sizeof(Hello)) cs->state[i] = 2;
    }
    all &= cs->state[i] == 2;
  }
  if (!all) {
    if (nowMs() > cs->deadline) {
      WARN("NET/signlion: connect to %s timed out after %lld ms", addressString(cs->to[0]).c_str(),
           (long long)timeoutMs());
      setConnecting(nullptr);
      destroyComm(c);
      return ncclSystemError;
    }
    return ncclSuccess;  // call again
  }
  setConnecting(nullptr);
  uint64_t connId = cs->hello[0].connId;
  c->connecting.reset();
  connectsInProgress().remove(c);
  unlistPending(c);
  ncclResult_t res = startHelpers(c, (int)signlionParamNthreads());
  if (res != ncclSuccess) {
    destroyComm(c);
    return res;
  }
  establishCtrl(c, connId, h->instance);
  INFO(kSubsysNet, "NET/signlion: connected to %s, %d streams over %d x %d interfaces, chunk %zu",
       addressString(remote[0]).c_str(), c->nsocks, local.n, (int)h->nnics, c->chunkSize);
  *sendComm = static_cast<CommHeader*>(c);
  return ncclSuccess;
}

void socketAbandonConnects(PendingConnects* pending) {
  if (pending == nullptr) return;
  std::unordered_set<void*> left;
  {
    std::lock_guard<std::mutex> lk(pending->mu);
    left.swap(pending->comms);
  }
  for (void* p : left) {
    Comm* c = static_cast<Comm*>(p);
    c->pending = nullptr;
    WARN("NET/signlion: closing a connect to %s that never finished", addressString(c->connecting->to[0]).c_str());
    destroyComm(c);
  }
}

namespace {

// Drops a connection that did not present our handshake.
void refuse(PendingConn* p, const char* why) {
  WARN("NET/signlion: dropping connection from %s: %s", addressString(p->peer).c_str(), why);
  closeFd(&p->fd);
}

void dropGroup(ConnGroup* g) {
  closeFd(&g->ctrlFd);
  for (int& fd : g->dataFds) closeFd(&fd);
}

}  // namespace

ncclResult_t socketAccept(void* listenComm, void** recvComm) {
  ARGCHECK(recvComm != nullptr, "accept", "recvComm", "NULL");
  *recvComm = nullptr;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "accept", "listenComm",
           "%p is not a listen comm", listenComm);
  int64_t now = nowMs();
  for (int i = 0, k = 0; i < 64 && k < (int)l->fds.size();) {  // bounded per call; each interface in turn
    PendingConn p{};
    socklen_t len = sizeof(p.peer);
    p.fd = accept4(l->fds[k], &p.peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p.fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        k++;
        continue;
      }
      WARN("NET/signlion: accept failed: %s", strerror(errno));
      return ncclSystemError;
    }
    i++;
    tuneStream(p.fd, -1, p.peer.sa.sa_family);
    p.start = now;
    if (l->pending.size() >= kMaxPendingAccepts) {
      refuse(&l->pending.front(), "too many handshakes in progress");
      l->pending.erase(l->pending.begin());
    }
    l->pending.push_back(p);
  }
  // Read hellos; sort valid streams into their connection's group.
  for (size_t i = 0; i < l->pending.size();) {
    PendingConn* p = &l->pending[i];
    ssize_t n = recv(p->fd, (char*)&p->hello + p->off, sizeof(Hello) - p->off, MSG_DONTWAIT);
    if (n > 0) p->off += (size_t)n;
    const char* why = nullptr;
    if (n == 0)
      why = "closed during handshake";
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      why = strerror(errno);
    else if (p->off < sizeof(Hello) && now - p->start > timeoutMs())
      why = "handshake timed out";
    else if (p->off == sizeof(Hello)) {
      const Hello& he = p->hello;
      why = socketHelloProblem(he, l->secret);
      if (why == nullptr) {
        ConnGroup* g = nullptr;
        for (ConnGroup& x : l->groups)
          if (x.connId == he.connId) g = &x;
        if (g == nullptr) {
          l->groups.emplace_back();
          g = &l->groups.back();
          g->connId = he.connId;
          g->dataFds.assign(he.nsocks, -1);
          g->start = now;
        }
        int* slot = he.kind == 0 ? &g->ctrlFd : (he.nsocks == g->dataFds.size() ? &g->dataFds[he.index] : nullptr);
        if (slot == nullptr || *slot >= 0) {
          why = "duplicate or inconsistent stream";
        } else {
          *slot = p->fd;
          if (he.kind == 0) g->ctrl = he;
          l->pending.erase(l->pending.begin() + i);
          continue;
        }
      }
    } else {
      i++;
      continue;
    }
    if (why != nullptr) {
      refuse(p, why);
      l->pending.erase(l->pending.begin() + i);
      continue;
    }
    i++;
  }
  // Hand out the first complete connection; expire stale partial ones.
  for (size_t i = 0; i < l->groups.size(); i++) {
    ConnGroup& g = l->groups[i];
    bool complete = g.ctrlFd >= 0;
    for (int fd : g.dataFds) complete &= fd >= 0;
    if (!complete) {
      if (now - g.start > timeoutMs()) {
        WARN("NET/signlion: dropping incomplete connection (%zu data streams expected) after timeout",
             g.dataFds.size());
        dropGroup(&g);
        l->groups.erase(l->groups.begin() + i);
        i--;
      }
      continue;
    }
    Comm* c = newComm(false);
    if (c == nullptr) {
      dropGroup(&g);
      l->groups.erase(l->groups.begin() + i);
      return ncclSystemError;
    }
    c->nsocks = (int)g.dataFds.size();
    c->chunkSize = g.ctrl.chunkSize;
    c->ctrlFd = g.ctrlFd;
    for (int s = 0; s < c->nsocks; s++) c->streams.emplace_back().fd = g.dataFds[s];
    uint64_t connId = g.connId;
    uint64_t peerInstance = g.ctrl.instance;
    l->groups.erase(l->groups.begin() + i);
    ncclResult_t res = startHelpers(c, (int)signlionParamNthreads());
    if (res != ncclSuccess) {
      destroyComm(c);
      return res;
    }
    establishCtrl(c, connId, peerInstance);
    INFO(kSubsysNet, "NET/signlion: accepted connection, %d streams, chunk %zu", c->nsocks, c->chunkSize);
    *recvComm = static_cast<CommHeader*>(c);
    return ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  ARGCHECK(mhandle != nullptr, "regMr", "mhandle", "NULL");
  *mhandle = nullptr;
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
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
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "deregMr", "comm", "%p is not a send or recv comm", comm);
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::lock_guard<std::mutex> lk(c->mrMutex);
  ARGCHECK(mr != nullptr && c->mrs.count(mr) == 1, "deregMr", "mhandle", "%p is not registered on comm %p", mhandle,
           comm);
  c->mrs.erase(mr);
  mr->magic = 0;
  delete mr;
  return ncclSuccess;
}

ncclResult_t socketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  ARGCHECK(request != nullptr, "isend", "request", "NULL");
  *request = nullptr;
  Comm* c = asComm(sendComm, kCommSend);
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
  Comm* c = asComm(recvComm, kCommRecv);
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
    progressSendCtrl(c);
  else
    progressRecvCtrl(c, true);
  callerProgressStreams(c);
  int err = c->error.load(std::memory_order_acquire);
  if (err != ncclSuccess) return (ncclResult_t)err;
  if (c->peerClosed.load(std::memory_order_acquire)) discardSends(c);
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
  Comm* c = asComm(comm, kCommRecv);
  if (c == nullptr) c = asComm(comm, kCommSend);
  if (c == nullptr) return true;
  // Headers and inline payloads arrive on ctrlFd (a send waits for room to
  // write there); helpers signal data-stream completions on wakeFd; a stream
  // with queued tasks wakes the caller directly, so it can move the bytes
  // itself in test() without waiting for a helper's hand-off.
  if (!c->isSend && c->matcher.anyPosted() &&
      headerStaged(c->stage.data() + c->stageHead, c->stageTail - c->stageHead))
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
  if (c->isSend ? !c->ctrlQueue.empty() : (c->matcher.anyPosted() || c->rxActive)) add(c->ctrlFd, dir, false);
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

ncclResult_t socketCloseSend(void* sendComm) {
  if (sendComm == nullptr) return ncclSuccess;
  Comm* c = asComm(sendComm, kCommSend);
  ARGCHECK(c != nullptr, "closeSend", "sendComm", "%p is not a send comm", sendComm);
  destroyComm(c);
  return ncclSuccess;
}

ncclResult_t socketAbortComm(void* comm) {
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "abortComm", "comm", "%p is not a send or recv comm", comm);
  // Our helpers fail on the streams cut below: that is the abort, not news.
  c->closing.store(true, std::memory_order_release);
  c->aborted = true;
  // Both directions of every data stream: the peer's reader sees the end of
  // its stream now, and its writer a reset once the close below us frees the
  // sockets, with no bye before them: what a killed process leaves. A send comm also ends its direction of the
  // control stream, where the peer's receives wait for headers (only ours:
  // a control socket shared by the pair, socket_pairing.h, carries the
  // opposite comm's the other way).
  for (Stream& s : c->streams)
    if (s.fd >= 0) shutdown(s.fd, SHUT_RDWR);
  if (c->isSend && c->ctrlFd >= 0) shutdown(c->ctrlFd, SHUT_WR);
  return ncclSuccess;
}

ncclResult_t socketCloseRecv(void* recvComm) {
  if (recvComm == nullptr) return ncclSuccess;
  Comm* c = asComm(recvComm, kCommRecv);
  ARGCHECK(c != nullptr, "closeRecv", "recvComm", "%p is not a recv comm", recvComm);
  // Messages that arrived and that no receive claimed are lost: said once
  // per comm, naming the tags (close still frees everything).
  std::string lost;
  int nlost = 0;
  for (size_t i = 0; i < c->matcher.keptCount(); i++) {
    const Matcher::Kept& k = c->matcher.kept(i);
    if (k.recv != nullptr) continue;
    if (nlost++ < 8) lost += " tag " + std::to_string(k.tag) + " (" + std::to_string(k.msg.size) + " B)";
  }
  if (nlost > 0)
    WARN("NET/signlion: recv comm %p closed with %d message(s) no receive claimed:%s%s", (void*)c, nlost, lost.c_str(),
         nlost > 8 ? " ..." : "");
  if (!c->aborted) sayBye(c);  // an aborted comm's peer must see a failure, not an orderly close
  destroyComm(c);
  return ncclSuccess;
}

ncclResult_t socketCloseListen(void* listenComm) {
  if (listenComm == nullptr) return ncclSuccess;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l->magic == kCommMagic && l->kind == kCommListen, "closeListen", "listenComm", "%p is not a listen comm",
           listenComm);
  for (PendingConn& p : l->pending) closeFd(&p.fd);
  for (ConnGroup& g : l->groups) dropGroup(&g);
  for (int& fd : l->fds) closeFd(&fd);
  l->magic = 0;
  delete l;
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
