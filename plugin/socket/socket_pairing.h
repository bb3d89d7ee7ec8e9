// Control-socket pairing: a send comm and a recv comm between the same two
// processes end up sharing one TCP connection for their control streams.
//
// Why: ncclNet hands out one-way comms, so a ping-pong between ranks A and B
// runs over two one-way connections. On a one-way connection every ACK is a
// packet of its own (no reply can carry it), and Linux sends one for every
// second segment shorter than 536 bytes from inside the receiver's recv(),
// on the critical path. Two plain one-way sockets are 1.18-1.26x a
// one-socket ping-pong before any code of ours runs (docs/PERFORMANCE.md,
// "Small messages: where the time goes"). With both directions on one
// socket, the reply carries the ACK, as in the plain ping-pong.
//
// How, without changing when connect/accept complete (connect never waits
// for the peer's accept, so no order of calls can deadlock):
//   - Every established comm registers its control connection: connId (drawn
//     by the connecting side, known to both ends), the peer's instance id
//     (random per copy of this code and process, carried in the listen handle
//     and the hello) and the connection's local and peer IP.
//   - The *initiator* of a process pair is the side with the smaller
//     instance id. When it holds an unpaired send comm S (connection x) and
//     an unpaired recv comm R (connection y) to the same peer over the same
//     IPs, it pairs them: R is pinned to x, and S owes an offer header naming
//     y, written on x between two messages. Until S writes it, either closing
//     undoes the pairing and the survivor may pair again.
//   - The peer's recv comm on x reads the offer and hands its end of x to
//     its send comm on y (if that comm has not registered yet, the offer
//     waits for it), which, between two messages, writes a switch marker on
//     y, then closes y and sends everything after on x.
//   - R reads y up to the marker, then reads x. Order is kept: nothing
//     follows the marker on y.
// One process with both ends (instance ids equal) pairs only when all four
// comms are registered, and marks all four, so no comm plays two roles; the
// far send comm then accepts an offer only from the far recv comm.
//
// Lifetimes: each end of a shared connection is owned by both its comms
// (CtrlRef); closing a send comm shuts its direction down (the peer's reader
// sees EOF, as it did when the socket was closed), closing the last owner
// drains what is unread and closes the socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "net/socket_devices.h"

namespace signlion {
namespace net {

// One end of a control connection; closed when the last owner lets go.
struct CtrlSocket {
  explicit CtrlSocket(int f) : fd(f) {}
  // Reads what is left unread (bounded) before closing: a socket closed with
  // unread bytes is reset, and a reset discards what this end still had to
  // send, which a shared socket may hold for the other owner's direction.
  ~CtrlSocket();
  CtrlSocket(const CtrlSocket&) = delete;
  CtrlSocket& operator=(const CtrlSocket&) = delete;
  int fd;
};
using CtrlRef = std::shared_ptr<CtrlSocket>;

// This copy of the transport's instance id in this process (never 0; a
// forked child gets its own).
uint64_t localInstance();

// What a send comm's caller thread owes its control stream, set by other
// threads, read lock-free on every progress call.
enum PairDue : uint32_t {
  kPairOfferDue = 1,   // write the offer pairTakeOffer() gives before the next message
  kPairSwitchDue = 2,  // write a switch marker, then move to pairTakeAdopted()
};

// A comm's registration. The comm owns it; fields below `registry-guarded`
// are only touched through the functions here.
struct PairLink {
  bool isSend = false;
  uint64_t connId = 0;
  uint64_t peerInstance = 0;
  SocketAddress local{};  // control connection's addresses (ports ignored)
  SocketAddress peer{};
  // The comm's current end of its control connection. Written only by the
  // comm's own thread (at a switch) and read by others under the registry
  // lock only while the comm is unpaired; a comm that switches is paired.
  CtrlRef ctrl;
  std::atomic<uint32_t>* shared = nullptr;  // the comm's CommHeader::ctrlShared
  std::atomic<uint32_t> due{0};             // PairDue bits (send comms)
  // registry-guarded
  bool registered = false;
  bool paired = false;
  PairLink* partner = nullptr;        // initiator S <-> R until S takes its offer
  PairLink* expectOfferOn = nullptr;  // same process, far send comm: whose offer it accepts
  CtrlRef adopted;                    // recv: the socket to follow at the marker; send: the socket to move to
  uint64_t offer = 0;                 // send (initiator): connId of the peer's send comm to invite
};

// Fills local/peer from link->ctrl, registers the link, applies an offer
// that arrived for it earlier, and pairs it when it can (see above). Call
// once the comm is established.
void pairRegister(PairLink* link);
// Leaves the registry (before the comm is freed); undoes a pairing whose
// offer was not taken yet.
void pairUnregister(PairLink* link);
// Follower side: the recv comm `link` read an offer naming its process's send
// comm sendConnId; that comm is told to move onto link's socket (now, or when
// it registers). An offer that does not fit (wrong peer, comm already paired
// or gone) is dropped: the peer's pinned recv comm then never sees a marker.
void pairAcceptOffer(PairLink* link, uint64_t sendConnId);
// A send comm with kPairOfferDue takes the offer it must write (the pairing
// can no longer be undone); false when the pairing was undone meanwhile.
bool pairTakeOffer(PairLink* link, uint64_t* offer);
// Moves out the socket a recv comm follows at the marker, or a send comm moves
// to; null when there is none (a marker without an offer is a protocol error).
CtrlRef pairTakeAdopted(PairLink* link);

}  // namespace net
}  // namespace signlion
