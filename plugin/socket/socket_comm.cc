// Comm lifetime (socket_comm.h): making a send or recv comm, its error,
// the orderly close (the bye a closing receiver writes, and how a sender
// tells it from a vanished peer), abort, and freeing it.
#include "socket/socket_comm.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_params.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace sock {

// Whether a whole header is staged at `in` (avail bytes).
bool headerStaged(const char* in, size_t avail) {
  SocketMsgHeader h;
  size_t len;
  const char* why;
  return parseCtrlHeader(in, avail, &h, &len, &why) != CtrlHeader::kNeedMore;
}

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

ncclResult_t cancelForDeregistration(Comm* c, int requests) {
  // Sticky even on a comm already failed or being closed: the region's
  // requests must never move another byte, whatever else happened.
  int expected = ncclSuccess;
  bool first = c->error.compare_exchange_strong(expected, ncclInvalidUsage);
  WARN("NET/signlion: %s comm %p: memory deregistered with %d transfer(s) in flight on it: cancelling them%s",
       c->isSend ? "send" : "recv", (void*)c, requests, first ? "; the comm fails" : "");
  wakeCaller(c);
  // The streams' byte order is lost with the dropped tasks: shut them, so
  // the peer fails now rather than after SIGNLION_SOCKET_TIMEOUT, with no
  // bye at close (the peer must see a failure, as after an abort). A helper
  // inside a send/recv on them sees the error at its next call.
  c->aborted = true;
  for (Stream& s : c->streams)
    if (s.fd >= 0) shutdown(s.fd, SHUT_RDWR);
  if (dropStreamTasks(c, socketTimeoutMs())) return ncclSuccess;
  WARN("NET/signlion: %s comm %p: a helper thread still held a data stream after SIGNLION_SOCKET_TIMEOUT (%lld ms): "
       "the deregistered memory may still be accessed",
       c->isSend ? "send" : "recv", (void*)c, (long long)socketTimeoutMs());
  return ncclSystemError;
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

namespace {

// Recv comm closing: tells the peer's sender on every data stream, then ends
// our direction of them (the bye is followed by a FIN, nothing else).
void sayBye(Comm* c) {
  for (Stream& st : c->streams) {
    if (st.fd < 0) continue;
    (void)!send(st.fd, kByeMagic, sizeof(kByeMagic), MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(st.fd, SHUT_WR);
  }
}

}  // namespace

// A wait's stall clock (*sinceMs: when it began or last moved, -1: no
// wait), for instance the control stream's. `waiting`: a message is part-way (send:
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
  return now - *sinceMs > socketTimeoutMs();
}

// An unfinished connect leaves its context's list: it finished or failed.
void unlistPending(SendComm* c) {
  if (c->pending == nullptr) return;
  std::lock_guard<std::mutex> lk(c->pending->mu);
  c->pending->comms.erase(c);
  c->pending = nullptr;
}

ConnectRegistry& connectsInProgress() {
  static ConnectRegistry r;
  return r;
}

namespace {

// Frees c as what it is (the comm types have no virtual destructor: a
// vtable would move the CommHeader off the start of the object).
void deleteComm(Comm* c) {
  c->magic = 0;
  if (c->isSend)
    delete static_cast<SendComm*>(c);
  else
    delete static_cast<RecvComm*>(c);
}

// The fields both kinds set up; the comm's wake-up descriptor opened.
bool initComm(Comm* c, bool isSend) {
  c->magic = kCommMagic;
  c->kind = isSend ? kCommSend : kCommRecv;
  c->isSend = isSend;
  c->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wakeFd < 0) {
    WARN("NET/signlion: eventfd failed: %s", strerror(errno));
    deleteComm(c);
    return false;
  }
  return true;
}

}  // namespace

void destroyComm(Comm* c) {
  connectsInProgress().remove(c);
  c->closing.store(true, std::memory_order_release);
  if (c->isSend) unlistPending(static_cast<SendComm*>(c));
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
  deleteComm(c);
}

SendComm* newSendComm() {
  SendComm* c = new SendComm();
  c->inlineMax = (size_t)std::max<int64_t>(0, std::min<int64_t>(signlionParamSocketInline(), kMaxInline));
  return initComm(c, true) ? c : nullptr;
}

RecvComm* newRecvComm() {
  RecvComm* c = new RecvComm();
  c->stage.resize(kStageBytes);
  c->early.resize(kMaxKept);
  for (int i = (int)kMaxKept - 1; i >= 0; i--) c->earlyFree.push_back(i);
  return initComm(c, false) ? c : nullptr;
}

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

Comm* asAnyComm(void* p) {
  Comm* c = asComm(p, kCommSend);
  return c != nullptr ? c : asComm(p, kCommRecv);
}

}  // namespace sock

using namespace sock;

ncclResult_t socketCloseSend(void* sendComm) {
  if (sendComm == nullptr) return ncclSuccess;
  Comm* c = asComm(sendComm, kCommSend);
  ARGCHECK(c != nullptr, "closeSend", "sendComm", "%p is not a send comm", sendComm);
  destroyComm(c);
  return ncclSuccess;
}

ncclResult_t socketAbortComm(void* comm) {
  Comm* c = asAnyComm(comm);
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

// Linux takes the cap as 64 bits since 4.20 and as 32 bits before; ~0 is "none".
static bool setStreamPacing(int fd, uint64_t bytesPerSec) {
  const uint64_t v = bytesPerSec == 0 ? ~uint64_t{0} : bytesPerSec;
  if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof(v)) == 0) return true;
  const uint32_t v32 = bytesPerSec == 0 || bytesPerSec >= ~uint32_t{0} ? ~uint32_t{0} : (uint32_t)bytesPerSec;
  return setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v32, sizeof(v32)) == 0;
}

bool socketSetPacing(void* sendComm, uint64_t bytesPerSec) {
  Comm* c = asComm(sendComm, kCommSend);
  if (c == nullptr || c->streams.empty()) return false;
  const uint64_t each = bytesPerSec == 0 ? 0 : std::max<uint64_t>(1, bytesPerSec / c->streams.size());
  bool ok = true;
  for (Stream& st : c->streams) ok &= st.fd >= 0 && setStreamPacing(st.fd, each);
  return ok;
}

uint64_t socketPacing(void* sendComm) {
  Comm* c = asComm(sendComm, kCommSend);
  if (c == nullptr) return 0;
  uint64_t sum = 0;
  for (Stream& st : c->streams) {
    uint64_t v = 0;
    socklen_t len = sizeof(v);
    if (st.fd < 0 || getsockopt(st.fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len) != 0) return 0;
    if (len == sizeof(uint32_t)) v = v == ~uint32_t{0} ? ~uint64_t{0} : (uint32_t)v;
    if (v == ~uint64_t{0}) return 0;
    sum += v;
  }
  return sum;
}

ncclResult_t socketCloseRecv(void* recvComm) {
  if (recvComm == nullptr) return ncclSuccess;
  RecvComm* c = static_cast<RecvComm*>(asComm(recvComm, kCommRecv));
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

}  // namespace net
}  // namespace signlion
