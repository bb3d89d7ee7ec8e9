// In-process access to the socket transport, for signlion itself (the host
// communicator) and for tests and benchmarks that link the static library
// signlion_net_socket instead of dlopen'ing libnccl-net-signlion.so.
//
// Declared here in the network layer and defined by the transport
// (plugin/socket/socket_net.cc, socket_comm.cc, socket_requests.cc): the host
// communicator, whose default network this is, reaches the transport through
// this interface alone and never includes a plugin header. Whatever calls
// these links signlion_net_socket.
//
// The shared plugin exports only ncclNetPlugin_v8..v12; the byte counters are
// reached through commBytes() below, which reads the CommHeader every comm of
// ours begins with, so it also works on comms created by a dlopen'ed copy of
// the plugin.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v8.h"
#include "net_v9.h"

namespace signlion {
namespace net {

// Name of the network in every version's struct: what NCCL_NET must say.
constexpr const char* kSocketNetName = "signlion";

// The transport as each ncclNet version. All five drive the same code.
const ncclNet_v8_t* socketNetV8();
const ncclNet_v9_t* socketNetV9();
const ncclNet_v10_t* socketNetV10();
const ncclNet_v11_t* socketNetV11();
const ncclNet_v12_t* socketNetV12();

// Bytes this comm has put on / taken off the wire so far (payload plus our
// 16-byte message and pairing headers; the connection handshake is not counted). comm is
// a send or recv comm of ours; false (and zeros) for anything else.
bool commBytes(void* comm, uint64_t* sent, uint64_t* received);

// Caps the rate at which a send comm's data streams put bytes on the wire
// (SO_MAX_PACING_RATE, Linux's TCP pacing), bytesPerSec shared evenly by its
// streams; 0 lifts the cap. The host communicator paces the links of a
// schedule that sends to several peers at once, so that this rank's own
// streams do not overflow its link's queue (host/send_pacing.h). False for
// a comm that is not a send comm of ours, or where the socket refused.
bool commSetPacing(void* sendComm, uint64_t bytesPerSec);
// The cap the data streams of a send comm have now, summed over its streams
// (0: none, or not a send comm of ours), read back from the sockets.
uint64_t commPacing(void* sendComm);

// True once a send or recv comm has done its part of sharing one control
// connection for both directions between its two processes
// (plugin/socket/socket_pairing.h): a send comm sent its offer or moved onto the peer's
// connection; a recv comm handed its socket to its process's sender or
// followed the peer's sender onto the shared connection. Sharing is complete
// when all four comms of the pairing (two per process) say so.
bool commSharesControl(void* comm);

// Ends a send or recv comm's link as a crash would: the peer's pending and
// later operations on it fail (ncclRemoteError) instead of ending as after an
// orderly close, where a closed receiver's sends complete undelivered. A
// receiver waiting on an aborted send comm fails at once; a sender to an
// aborted recv comm once that comm is closed (its sockets' reset), which the
// caller does next, without a bye. Waits for nothing. For a communicator's
// abort, which aborts every link before it closes any.
ncclResult_t socketAbortComm(void* comm);

// Sleeps up to timeoutMs until a send or recv comm's control stream is ready
// (bytes to read, room to write), so a host-side caller need not spin on test().
void commWait(void* comm, int timeoutMs);
// The same for n comms: returns as soon as any of them is ready.
void commWaitAny(void* const* comms, size_t n, int timeoutMs);

}  // namespace net
}  // namespace signlion
