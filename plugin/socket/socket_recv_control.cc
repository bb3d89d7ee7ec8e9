// A recv comm's control stream (socket_comm.h): the staging buffer, message
// headers matched to posted receives (transport/tag_matcher.h) or kept
// until one is posted, inline payloads, the pairing headers it reads, and
// the stall checks.
#include "socket/socket_comm.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace sock {

namespace {

// Reads into buf up to want bytes; returns bytes read, 0 when nothing is
// available now, -1 after recording an error (EOF included).
ssize_t readCtrl(RecvComm* c, char* buf, size_t want) {
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
ssize_t fillStage(RecvComm* c) {
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
int takeEarly(RecvComm* c, size_t size) {
  if (c->earlyFree.empty() || (c->earlyBytes > 0 && c->earlyBytes + size > kEarlyBudget)) return -1;
  int i = c->earlyFree.back();
  c->earlyFree.pop_back();
  if (c->early[i].size() < size) c->early[i].resize(size);  // grows once per slot, then reused
  c->earlyBytes += size;
  return i;
}

void giveEarly(RecvComm* c, const RxMsg& m) {
  if (m.earlyIdx < 0) return;
  c->earlyBytes -= m.size;
  c->earlyFree.push_back(m.earlyIdx);
}

}  // namespace

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

namespace {

// Starts reading an inline payload off the control stream.
void startInline(RecvComm* c, char* dst, size_t size, Request* r, uint64_t seq) {
  c->rxActive = true;
  c->rxDst = dst;
  c->rxSize = size;
  c->rxOff = 0;
  c->rxReq = r;
  c->rxSeq = seq;
}

}  // namespace

// Hands kept messages that are claimed to their receives: an inline payload
// complete in its early buffer is copied; a spread one starts on the data
// streams, but only in message order (the streams carry payloads in the
// sender's order, so one behind an unclaimed spread message waits).
void deliverKept(RecvComm* c) {
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

namespace {

// The message whose header was just read: to the receive that holds its tag
// (transport/tag_matcher.h), or kept until one is posted. Returns 1 when
// taken, 0 when it must wait unread (no room to keep it), -1 after an error.
int takeHeader(RecvComm* c, const MsgHeader& hdr) {
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
void finishInline(RecvComm* c) {
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
const Matcher::Kept* oldestUnclaimed(RecvComm* c) {
  for (size_t i = 0; i < c->matcher.keptCount(); i++)
    if (c->matcher.kept(i).recv == nullptr) return &c->matcher.kept(i);
  return nullptr;
}

// A pairing header (socket_pairing.h: kPair or kSwitch from parseCtrlHeader) read on the control
// stream. Returns false after recording a protocol error.
bool handlePairHeader(RecvComm* c, const MsgHeader& hdr) {
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
void unclaimedStuck(RecvComm* c, bool moved) {
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

}  // namespace

// Parses headers and inline payloads from the staging buffer, refilling it
// with one recv() whenever it runs short: a small message whose header and
// payload came together costs one system call. irecv passes readSocket=false:
// it only parses what is staged, as test() reads next anyway (a receive is
// mostly posted before its message is sent, so reading then is a wasted call).
void progressRecvCtrl(RecvComm* c, bool readSocket) {
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
  bool partial = c->rxActive || (avail > 0 && !headerStaged(c->stage.data() + c->stageHead, avail));
  if (ctrlStalled(c, partial, moved))
    setError(c, ncclRemoteError, "control stream stalled mid-message longer than SIGNLION_SOCKET_TIMEOUT");
  if (c->error.load(std::memory_order_relaxed) == ncclSuccess) unclaimedStuck(c, took || moved);
}

}  // namespace sock
}  // namespace net
}  // namespace signlion
