// The socket transport's comms (socket_transport.h) as its own files see
// them: the send, receive and listen comm types, their requests and data
// streams, and the functions one part of the transport calls in another.
// Private to plugin/socket; nothing outside includes it.
//
// The parts, one file each:
//   socket_comm.cc          comm lifetime: making, erroring, closing, aborting
//   socket_connect.cc       listen handle, connect and accept
//   socket_streams.cc       data streams and their helper threads
//   socket_send_control.cc  a send comm's control stream (headers, pairing)
//   socket_recv_control.cc  a recv comm's control stream (staging, matching)
//   socket_requests.cc      the ncclNet entry points on requests: regMr,
//                           isend, irecv, iflush, test, and waiting on comms
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "net/comm_header.h"
#include "net/socket_devices.h"
#include "net/socket_params.h"  // socketTimeoutMs
#include "socket/socket_pairing.h"
#include "socket/socket_transport.h"
#include "socket/socket_wire.h"
#include "transport/connect_registry.h"
#include "transport/fixed_queue.h"
#include "transport/request_table.h"
#include "transport/tag_matcher.h"

namespace signlion {
namespace net {
namespace sock {

constexpr uint32_t kMrMagic = 0x534c4d52;      // "SLMR"
constexpr int kPollMs = 50;                    // helper wake-up period, bounds close latency
constexpr size_t kCallerOnlyMax = 512 * 1024;  // payloads up to this are moved by the caller (enqueueStreams)
// How long a helper leaves such a payload to the caller after the caller's
// last visit to the streams (test() on any request of the comm): a caller
// that waits on another comm (posts a send, then blocks on the reply's
// receive) would otherwise leave the rest of the send to an idle helper's
// next kPollMs check.
constexpr int64_t kCallerGraceUs = 100;
// While the caller keeps visiting, the helper's checks back off from
// kCallerGraceUs to this, so a caller testing in a tight loop through a long
// medium transfer costs about a thousand helper wake-ups a second, not ten.
constexpr int64_t kCallerGraceMaxUs = 1000;
constexpr size_t kMaxPendingAccepts = 256;
constexpr size_t kStageBytes = 64 * 1024;  // recv comm staging buffer for the control stream
constexpr size_t kDirectRead = 4096;       // inline remainder read straight into the user buffer
constexpr int kCtrlRounds = 1024;          // parse/read steps per progress call (fairness bound)
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

// Wire formats: socket_wire.h.
using Hello = SocketHello;
using ListenHandle = SocketListenHandle;
using MsgHeader = SocketMsgHeader;
constexpr uint32_t kHandleMagic = kSocketHandleMagic;
constexpr uint16_t kWireVersion = kSocketWireVersion;
constexpr size_t kMaxInline = kSocketMaxInline;

// Whether a whole header is staged at `in` (avail bytes).
bool headerStaged(const char* in, size_t avail);

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
  bool urgent;   // of a payload above kCallerOnlyMax: helpers move it at once
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
// time touches fd. The caller only try_locks ioMu: it never waits for a helper
// (only dropStreamTasks does, bounded).
struct Stream {
  int fd = -1;
  std::mutex ioMu;
  std::mutex qMu;  // guards tasks (push by the caller, pop by the ioMu holder)
  // At most one task per stream per message in flight: kSocketMaxRequests
  // requests of up to kSocketMaxRecvs messages each.
  FixedQueue<StreamTask, kSocketMaxRequests * kSocketMaxRecvs> tasks;
  std::atomic<int> queued{0};  // tasks.size(), readable without qMu
};

// What a send and a recv comm share: the control stream's socket, the data
// streams and their helpers, requests, the error, and the close state. The
// data streams and helpers serve both directions (socket_streams.cc), so the
// few send-only facts they read (peerClosed) live here too. A Comm is always
// a SendComm or a RecvComm (isSend says which); delete it through deleteComm.
struct Comm : CommHeader {
  bool isSend = false;
  // The control stream's socket. Until the comm is established it is ours
  // alone; then link.ctrl owns it (and may share it, socket_pairing.h) and
  // ctrlFd is its descriptor, cached for the hot path.
  int ctrlFd = -1;
  PairLink link;
  // Helpers signal it when a data-stream task completes (or fails), so a
  // caller sleeping in commWait wakes for payloads that never touch ctrlFd.
  int wakeFd = -1;
  int nsocks = 0;
  size_t chunkSize = 0;
  std::deque<Stream> streams;  // a deque: Stream holds mutexes and never moves
  std::vector<std::unique_ptr<Helper>> helpers;
  RequestTable<Request, kSocketMaxRequests> reqs;
  uint64_t seq = 0;                     // messages so far, the same count on both sides
  std::atomic<int> error{ncclSuccess};  // first failure, sticky
  // Send comms only (false on a recv comm): the peer closed its recv comm in
  // order (kByeMagic read); from then on sends complete without being delivered.
  std::atomic<bool> peerClosed{false};
  std::atomic<bool> closing{false};        // set by close before it shuts the streams down
  bool aborted = false;                    // socketAbortComm cut the streams: close says no bye
  std::atomic<int64_t> dataProgressMs{0};  // last time any thread moved data-stream bytes
  std::atomic<int> queuedTasks{0};         // sum of the streams' `queued`: test() skips them all at 0
  std::atomic<int> urgentTasks{0};         // the queued tasks with `urgent` set
  std::atomic<int64_t> callerVisitUs{0};   // the caller's last visit to streams with queued tasks
  std::mutex mrMutex;
  std::unordered_set<MemRegion*> mrs;
  // Since when the control stream waits mid-message (-1: it does not); see ctrlStalled.
  int64_t ctrlWaitSinceMs = -1;
};

// A send comm: writes headers and inline payloads on the control stream
// (socket_send_control.cc), spreads larger payloads over the data streams.
struct SendComm : Comm {
  int trafficClass = -1;   // IP TOS of our streams (-1: none), kept for a shared connection
  size_t inlineMax = 0;    // SIGNLION_SOCKET_INLINE, capped at kMaxInline
  MsgHeader pairHdr{};     // the pairing header being written
  size_t pairOff = 0;      // bytes of pairHdr written
  int64_t byeCheckMs = 0;  // last look for a bye while blocked (caller's thread)
  // Control stream state, touched only by the caller's thread.
  FixedQueue<Request*, kSocketMaxRequests> ctrlQueue;  // requests whose header is not fully out
  size_t ctrlOff = 0;                                  // bytes of the front entry already written

  // Until connect() returns the comm.
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

// A recv comm: reads headers and inline payloads off the control stream and
// matches them to posted receives (socket_recv_control.cc).
struct RecvComm : Comm {
  // Receive matching (transport/tag_matcher.h), with the inline payloads of
  // kept messages in `early` (one buffer per kept slot, grown on demand and
  // reused: bounded by kMaxKept x SIGNLION_SOCKET_INLINE).
  Matcher matcher;
  std::vector<std::vector<char>> early;
  std::vector<int> earlyFree;
  size_t earlyBytes = 0;  // payload bytes held in early buffers
  int keptSpread = 0;     // kept messages with a spread payload
  // One recv() fills the staging buffer with headers and inline payloads;
  // they are parsed from it, and what no posted receive wants yet waits
  // there. Bytes [stageHead, stageTail) are unparsed.
  std::vector<char> stage;
  size_t stageHead = 0;
  size_t stageTail = 0;
  int64_t ackModeMs = -1;  // last TCP_QUICKACK=0 on ctrlFd (see delayAcks)
  // The inline payload being read, into a posted buffer (rxReq set) or an
  // early buffer (rxReq null; rxSeq names the kept message).
  bool rxActive = false;
  char* rxDst = nullptr;
  size_t rxSize = 0;
  size_t rxOff = 0;
  Request* rxReq = nullptr;
  uint64_t rxSeq = 0;
  // Since when the comm is stuck beside an unclaimed kept message (a
  // receive waits with an open slot and nothing arrives; -1: it is not);
  // see unclaimedStuck.
  int64_t unclaimedWaitSinceMs = -1;
  // The last header could not be taken for want of room to keep it
  // (kMaxKept messages or kEarlyBudget bytes kept): the comm stopped reading.
  bool keptStopped = false;
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

// ---- Comm lifetime (socket_comm.cc) ------------------------------------------

// A new comm with its wake-up descriptor; nullptr (after a WARN) without one.
SendComm* newSendComm();
RecvComm* newRecvComm();
// Stops the helpers, closes every socket and frees the comm.
void destroyComm(Comm* c);
// The comm behind a pointer we handed out, if it is one of `kind`.
Comm* asComm(void* p, CommKind kind);
// A send or recv comm, or nullptr.
Comm* asAnyComm(void* p);
// The comm is established: its control socket moves into link.ctrl and the
// comm is registered for pairing (socket_pairing.h).
void establishCtrl(Comm* c, uint64_t connId, uint64_t peerInstance);
// Send comms whose connect is in progress (connect_registry.h).
ConnectRegistry& connectsInProgress();
// An unfinished connect leaves its context's list: it finished or failed.
void unlistPending(SendComm* c);

void wakeCaller(Comm* c);
// Records the comm's first error (WARN naming it) and wakes its caller.
void setError(Comm* c, ncclResult_t res, const char* what);
// Mirrors an errno from send/recv into the comm's error (peer gone = remote error).
void setSysError(Comm* c, int err, const char* op);
// deregMr found `requests` unfinished requests on the region (socket_requests.cc):
// the comm fails (ncclInvalidUsage from every later call), its data streams
// are shut so the peer fails too, and their tasks are dropped once no helper
// is inside one. Returns ncclSystemError (WARN naming the comm) when a helper
// still held a stream after SIGNLION_SOCKET_TIMEOUT.
ncclResult_t cancelForDeregistration(Comm* c, int requests);
// Send comm: whether the peer closed its recv comm in order (its bye read).
bool peerSaidBye(Comm* c);
// A send failed with err: an orderly close of the peer, or an error.
void sendFailed(Comm* c, int err, const char* op);

// A wait's stall clock (*sinceMs: when it began or last moved, -1: no
// wait). Returns true once it waited without progress longer than
// SIGNLION_SOCKET_TIMEOUT.
bool waitedTooLong(int64_t* sinceMs, bool waiting, bool moved);
// The same for the control stream's clock.
inline bool ctrlStalled(Comm* c, bool waiting, bool moved) {
  return waitedTooLong(&c->ctrlWaitSinceMs, waiting, moved);
}

// ---- Data streams (socket_streams.cc) -----------------------------------------

// The caller's share of the work: every data stream with queued tasks, no waiting.
void callerProgressStreams(Comm* c);
// Deals the payload of message `seq` (size bytes at buf) to the data streams;
// the caller has added size to req->pending.
void enqueueStreams(Comm* c, uint64_t seq, char* buf, size_t size, Request* req);
ncclResult_t startHelpers(Comm* c, int nthreads);
// Drops every queued task (their bytes no longer owed to their requests),
// each stream once its ioMu is free: afterwards no thread holds a pointer
// into any task's buffer. Waits limitMs at most in all; false when some
// stream's ioMu stayed held (its tasks are kept).
bool dropStreamTasks(Comm* c, int64_t limitMs);

// ---- Control streams (socket_send_control.cc, socket_recv_control.cc) --------

// Writes queued headers (and inline payloads) in order, as far as the socket takes them.
void progressSendCtrl(SendComm* c);
// Send comm whose peer closed in order: what is queued is dropped and every
// outstanding send completes.
void discardSends(SendComm* c);
// Parses headers and inline payloads, reading the socket when readSocket.
void progressRecvCtrl(RecvComm* c, bool readSocket);
// Slot `slot` of receive r takes a message of `size` bytes. Returns false
// after recording an error (larger than the posted buffer).
bool fillSlot(Comm* c, Request* r, int slot, int tag, uint64_t size);
// Hands kept messages that are claimed to their receives.
void deliverKept(RecvComm* c);

}  // namespace sock
}  // namespace net
}  // namespace signlion
