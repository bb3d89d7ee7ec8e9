// A send comm's control stream (socket_comm.h): message headers and inline
// payloads in order, the pairing headers it owes (socket_pairing.h), and
// what it does once the peer closed in order.
#include "socket/socket_comm.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace sock {

namespace {

// Writes the pairing header a send comm owes (socket_pairing.h), between two
// messages. Returns true once it is out or no longer owed (a switch marker
// also moves the comm onto the shared connection; its old one closes, FIN
// after the marker), false while the socket does not take it or after an error.
bool progressPairHeader(SendComm* c, bool* moved) {
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

}  // namespace

void progressSendCtrl(SendComm* c) {
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

// Waits for a helper inside a data-stream call (non-blocking, short), so
// none touches a buffer once its request is done.
void discardSends(SendComm* c) {
  while (!c->ctrlQueue.empty()) {
    c->ctrlQueue.front()->ctrlDone = true;
    c->ctrlQueue.pop_front();
  }
  c->ctrlOff = 0;
  c->ctrlWaitSinceMs = -1;
  if (c->queuedTasks.load(std::memory_order_acquire) == 0) return;
  if (!dropStreamTasks(c, socketTimeoutMs()))
    setError(c, ncclSystemError, "a helper thread kept a data stream longer than SIGNLION_SOCKET_TIMEOUT");
}

}  // namespace sock
}  // namespace net
}  // namespace signlion
