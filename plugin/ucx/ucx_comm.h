// The UCX transport's comms (ucx_transport.h) as its own files see them: the
// process's context and workers, the comm, request and listen types, and
// the functions one part of the transport calls in another. Private to
// plugin/ucx; nothing outside includes it.
//
// The parts, one file each:
//   ucx_worker.cc          the context, the two shared workers, progress,
//                          init and devices
//   ucx_comm.cc            comm lifetime: draining, parking, closing, aborting
//   ucx_connect.cc         listen handle, connect and accept
//   ucx_endpoint_setup.cc  confirming a new endpoint before a comm is handed out
//   ucx_requests.cc        the entry points on requests: regMr, isend, irecv,
//                          iflush, test
#pragma once

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "net/comm_header.h"  // byte counters readable by commBytes()
#include "net/socket_devices.h"
#include "net/socket_params.h"  // socketTimeoutMs
#include "net_common.h"
#include "transport/connect_registry.h"
#include "transport/request_table.h"
#include "ucx/ucx_liveness.h"
#include "ucx/ucx_transport.h"
#include "ucx/ucx_wire.h"

namespace signlion {
namespace net {
namespace ucx {

constexpr uint32_t kHandleMagic = kUcxHandleMagic;
constexpr uint16_t kWireVersion = kUcxWireVersion;
constexpr uint32_t kMrMagic = 0x534c554d;  // "SLUM"
constexpr size_t kMaxPendingAccepts = 256;
constexpr uint64_t kFullTagMask = ~0ull;
constexpr uint64_t kCommIdMask = ~0ull << 32;     // a UCP tag: recv comm id (high 32 bits), ncclNet tag (low)
constexpr uint32_t kSetupIdBit = kUcxSetupIdBit;  // the setup messages' tags (confirmEndpoint)
// How long accept waits, after a connector's bye or death, for its last setup
// message, which travels on another connection than the bye (ucxAccept).
constexpr int64_t kSetupGraceMs = 1000;

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
Global& global();

const char* ucsStr(ucs_status_t s);

constexpr int kRecvSide = 0, kSendSide = 1;

ucs_status_t newWorker(ucp_worker_h* w);
// Held by whoever calls into a worker (Global::workerMu).
std::mutex& workerLock();

inline ucp_tag_t ucpTag(uint32_t commId, int tag) { return ((ucp_tag_t)commId << 32) | (uint32_t)tag; }
// Setup message i (0 or 1) of the recv comm commId (confirmEndpoint).
inline ucp_tag_t setupTag(uint32_t commId, int i) { return ucpTag(commId | kSetupIdBit, i); }

// ---- Comms and requests ------------------------------------------------------

struct Comm;

struct Slot {
  void* ureq;  // UCX request while in flight, else nullptr
  const char* buf;  // the caller's buffer: deregMr cancels what is in flight on its region
  size_t cap;       // its size (a send: the message's)
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

// A comm: a recv comm is one of these, a send comm a SendComm (isSend says
// which). Delete it through destroyComm.
struct Comm : CommHeader {
  bool isSend = false;
  int fd = -1;  // the setup connection, kept as the out-of-band liveness channel
  OobWatch oob;
  int64_t lastOobMs = 0;
  ucp_worker_h worker = nullptr;  // the process's shared worker
  uint32_t commId = 0;            // recv comm: its own id; send comm: its receiver's
  bool warned = false;
  // A bye needs no sending any more: closeRecv said it before it waited for
  // its matched receives, or an abort cut the socket.
  bool byeSent = false;
  // A deregMr cancelled transfers in flight on its region
  // (cancelForDeregistration): every later isend, irecv and test fails.
  bool cancelled = false;
  RequestTable<Request, NCCL_NET_MAX_REQUESTS> reqs;
  std::mutex mrMu;
  std::unordered_set<MemRegion*> mrs;
  // The two setup messages (confirmEndpoint): the sender's sync send and
  // plain send, the receiver's receives for them. Their UCX requests write
  // here, so a comm with one in flight is kept as one with transfers in flight.
  // (Sender: sync send, flush, plain send; receiver: the two receives.)
  Slot setup[3] = {};
  bool setupPosted[3] = {false, false, false};
  char setupBuf[2] = {0, 0};
};

// A send comm: the only endpoint of a connection, and the connector's state
// until connect returns it.
struct SendComm : Comm {
  ucp_ep_h ep = nullptr;
  ucs_status_t epStatus = UCS_OK;
  bool epForced = false;         // after the peer's bye: outstanding sends were cut short
  bool epNoErrHandling = false;  // shared memory: UCX refuses peer error handling (and force close)
  bool everSent = false;         // an isend was called: closeSend flushes what it left
  int orphans = 0;               // sends discardSends reported done while UCX still holds them
  // Connector state (before connect returns the comm).
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

// ---- Workers (ucx_worker.cc) ---------------------------------------------------

// A new comm's share of its side's worker; a recv comm gets its id.
bool attachWorker(Comm* c);
// Comms of c's side made from now on get a fresh worker.
void taintWorker(Comm* c);
// One progress call on the comm's worker and the other side's; returns the
// events processed. The caller holds workerLock().
unsigned progress(Comm* c);
// Progress-bound wait for a UCX request of our own (ep close, flush).
ucs_status_t waitUcx(Comm* c, void* req, int64_t limitMs);
// The address of device dev; false when dev is no device.
bool deviceAddress(int dev, SocketAddress* a);

// ---- Comm lifetime (ucx_comm.cc) ------------------------------------------------

// The comm behind a pointer we handed out, if it is one of `kind`.
Comm* asComm(void* p, CommKind kind);
// Send comms whose connect is in progress (connect_registry.h).
ConnectRegistry& connectsInProgress();
// Every UCX resource of a comm, and the comm; the caller holds workerLock().
void destroyComm(Comm* c);
// The same, taking workerLock().
void destroyCommLocked(Comm* c);
// Waits (bounded) until UCX is done with the caller's buffers of a closing comm.
void waitForCallerBuffers(Comm* c);
// Sends before the bye of an orderly close reach the receiver first.
void flushBeforeBye(SendComm* c);
// Reads the out-of-band socket, at most every few ms unless force.
OobWatch::State checkPeer(Comm* c, bool force);
// WARNs once per comm; returns ncclRemoteError.
ncclResult_t peerLost(Comm* c, const char* why);
// The receiver closed in order: completes our sends (their data discarded).
void discardSends(SendComm* c);
// deregMr found `requests` transfers in flight on the region being
// deregistered: the comm fails (ncclInvalidUsage from every later call, its
// peer told as by an abort), its receives are cancelled, its sends cut short
// by a force close, and the worker progressed until UCX is done with all of
// them, or until the peer is gone and they stopped moving. Returns
// ncclSystemError (WARN naming the comm) when some are still in flight with
// the peer alive after SIGNLION_SOCKET_TIMEOUT. The caller holds workerLock().
ncclResult_t cancelForDeregistration(Comm* c, int requests);

// ---- Requests (ucx_requests.cc) --------------------------------------------------

void finishSlot(Slot* s, ucs_status_t status, size_t length);
// Completion callbacks of our sends and receives (user data: the slot).
void sendDone(void* ureq, ucs_status_t status, void* user);
void recvDone(void* ureq, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
// What a returned UCX pointer means for a slot just posted.
void startSlot(Slot* s, ucs_status_ptr_t p, size_t immediateLength);
// Parameters of a send or receive for `slot`, with mhandle's memory handle.
ucp_request_param_t opParams(void* slot, void* mhandle);

// ---- Endpoint setup (ucx_endpoint_setup.cc) ---------------------------------------

// The sender's setup steps; *ready once all are done. The caller holds workerLock().
ncclResult_t confirmEndpoint(SendComm* c, bool* ready);
// The receiver's receives for the two setup messages. The caller holds workerLock().
void postSetupReceives(Comm* c);
// Whether both setup messages came (1), not yet (0), or a receive failed (-1).
int setupReceived(Comm* c, bool drain);

}  // namespace ucx
}  // namespace net
}  // namespace signlion
