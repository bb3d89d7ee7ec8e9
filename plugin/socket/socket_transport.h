// The Ethernet-tuned socket transport, version-neutral. socket_net.cc adapts
// it to each ncclNet version; nothing here knows about NCCL's structs.
//
// A connection is one control stream plus SIGNLION_NSOCKS data streams, all
// TCP. The control stream carries a 16-byte header per message (tag, size,
// inline flag) and small messages inline; larger ones are cut into
// SIGNLION_SOCKET_CHUNKSIZE chunks dealt round-robin over the data streams,
// starting one stream further for each message. The caller's thread moves
// the control stream inside isend/irecv/test (a small message costs one
// sendmsg and one recv into the receiver's staging buffer) and as much of the
// data streams as their sockets take at once (never waiting for a helper);
// the comm's helper threads move the rest, so a message that fits in the
// socket buffers completes without a thread hand-off. Once a process pair
// has a send and a recv comm each way, one of them moves its control stream
// onto the other's connection, so replies carry ACKs (socket_pairing.h).
//
// A message goes to the oldest posted receive holding its tag, whatever the
// order of tags (transport/tag_matcher.h); one that no open receive holds
// is kept until one is posted. A recv comm's close writes a bye on its data
// streams, against the data: the peer's sender then completes its sends
// without delivering them instead of failing (docs/dev/PLUGIN_INTERNALS.md, "Teardown").
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "nccl_sign.h"
#include "net/comm_header.h"
#include "net/socket_device_table.h"
#include "net/socket_net.h"

namespace signlion {
namespace net {

constexpr int kSocketMaxRequests = 32;            // outstanding requests per comm (NCCL_NET_MAX_REQUESTS)
constexpr size_t kSocketMaxMessage = 1ull << 30;  // maxP2pBytes: test() reports sizes as int

// socketInit, socketDevices, socketGetProperties and socketMakeVDevice, and
// the limits on devices and streams: net/socket_device_table.h. The header
// every comm begins with: net/comm_header.h.
ncclResult_t socketListen(int dev, void* handle, void** listenComm);
// Connects a caller started and has not seen finish. ncclNet has no call that
// cancels a connect in progress (the half-made comm lives behind the handle
// until connect is called again), so a v11 context keeps its own here and its
// finalize closes what is left: a rank that gave up waiting for a peer does
// not leak those sockets.
struct PendingConnects {
  std::mutex mu;
  std::unordered_set<void*> comms;
};

// trafficClass: -1 (undefined) or an IP TOS byte applied to every stream.
// pending (may be null): where an unfinished connect is kept until it ends.
ncclResult_t socketConnect(int dev, int trafficClass, void* handle, void** sendComm,
                           PendingConnects* pending = nullptr);
// Closes every connect still in `pending` (its handles must not be used to
// connect again).
void socketAbandonConnects(PendingConnects* pending);
ncclResult_t socketAccept(void* listenComm, void** recvComm);
ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t socketRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
ncclResult_t socketDeregMr(void* comm, void* mhandle);
ncclResult_t socketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t socketIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                         void** request);
ncclResult_t socketIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t socketTest(void* request, int* done, int* sizes);
// Blocks the caller up to timeoutMs until the comm has something for test()
// to do (control stream or a data stream with queued work: bytes to read or
// room to write) or a helper completed a task. Lets
// a host-side caller sleep instead of spinning on test(); never required.
void socketCommWait(void* comm, int timeoutMs);
// The same for several comms at once: returns when any of them has something
// for test() to do (a caller with transfers on many comms, such as the host
// executor, must not sleep on one while another's message has arrived).
void socketCommWaitAny(void* const* comms, size_t n, int timeoutMs);
// Data streams of a send or receive comm of this socket transport (the
// connector's choice, socketDeviceStreams); 0 for anything else.
int socketCommStreams(void* comm);
// socketAbortComm (a link ended as a crash would): net/socket_net.h.
// socket_net.h's commSetPacing and commPacing.
bool socketSetPacing(void* sendComm, uint64_t bytesPerSec);
uint64_t socketPacing(void* sendComm);
ncclResult_t socketCloseSend(void* sendComm);
ncclResult_t socketCloseRecv(void* recvComm);
ncclResult_t socketCloseListen(void* listenComm);

}  // namespace net
}  // namespace signlion
