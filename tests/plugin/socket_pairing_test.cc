// The pairing registry (plugin/socket/socket_pairing.h) on its own, with
// links made by hand over real loopback TCP sockets: who initiates, what an
// offer does, an offer read before its send comm registered, a pairing undone
// by a close before the offer went out, and the cases that must not pair.
// The transport-level behaviour (headers, switch, order) is in plugin_pairing_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <vector>

#include "socket/socket_pairing.h"

using signlion::net::CtrlRef;
using signlion::net::CtrlSocket;
using signlion::net::PairLink;

namespace {

// Both ends of one loopback TCP connection.
void tcpPair(const char* ip, int* a, int* b) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &sa.sin_addr);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(bind(l, (sockaddr*)&sa, len), 0);
  ASSERT_EQ(listen(l, 1), 0);
  ASSERT_EQ(getsockname(l, (sockaddr*)&sa, &len), 0);
  *a = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(*a, (sockaddr*)&sa, len), 0);
  *b = accept(l, nullptr, nullptr);
  ASSERT_GE(*b, 0);
  close(l);
}

// One connection as the registry sees it: the connecting end's send link and
// the accepting end's recv link (connId shared), each with its own flag.
struct Conn {
  std::unique_ptr<PairLink> send = std::make_unique<PairLink>();
  std::unique_ptr<PairLink> recv = std::make_unique<PairLink>();
  std::atomic<uint32_t> sendShared{0}, recvShared{0};
};

// peerOfSend: the instance id the send end believes its peer has; peerOfRecv likewise.
std::unique_ptr<Conn> makeConn(uint64_t connId, uint64_t peerOfSend, uint64_t peerOfRecv,
                               const char* ip = "127.0.0.1") {
  auto c = std::make_unique<Conn>();
  int a = -1, b = -1;
  tcpPair(ip, &a, &b);
  c->send->isSend = true;
  c->send->connId = c->recv->connId = connId;
  c->send->peerInstance = peerOfSend;
  c->recv->peerInstance = peerOfRecv;
  c->send->ctrl = std::make_shared<CtrlSocket>(a);
  c->recv->ctrl = std::make_shared<CtrlSocket>(b);
  c->send->shared = &c->sendShared;
  c->recv->shared = &c->recvShared;
  return c;
}

// Links a test registered; all leave the registry when the test ends, also
// when an ASSERT returns early (the registry must never keep a freed link).
// Declared after the Conns it refers to, so it goes first.
struct Registered {
  std::vector<PairLink*> links;
  void add(PairLink* l) {
    signlion::net::pairRegister(l);
    links.push_back(l);
  }
  ~Registered() {
    for (PairLink* l : links) signlion::net::pairUnregister(l);  // a second unregister is a no-op
  }
};

bool due(const PairLink& l, uint32_t bit) { return (l.due.load() & bit) != 0; }

// A peer instance the registry treats as larger (we initiate) or smaller (it does).
uint64_t largerPeer() { return signlion::net::localInstance() + 1 == 0 ? 2 : signlion::net::localInstance() + 1; }
uint64_t smallerPeer() { return signlion::net::localInstance() - 1 == 0 ? 1 : signlion::net::localInstance() - 1; }

}  // namespace

// We hold a send comm on x and a recv comm on y to a peer with a larger id:
// we initiate. R is pinned to S's socket, S owes an offer naming y.
TEST(SocketPairing, InitiatorPinsTheRecvCommAndOwesAnOffer) {
  uint64_t peer = largerPeer();
  auto x = makeConn(0x1001, peer, 0), y = makeConn(0x1002, 0, peer);
  Registered reg;
  reg.add(x->send.get());
  EXPECT_EQ(x->send->due.load(), 0u) << "nothing to pair with yet";
  reg.add(y->recv.get());
  EXPECT_TRUE(due(*x->send, signlion::net::kPairOfferDue));
  uint64_t offer = 0;
  ASSERT_TRUE(signlion::net::pairTakeOffer(x->send.get(), &offer));
  EXPECT_EQ(offer, 0x1002u);
  CtrlRef pinned = signlion::net::pairTakeAdopted(y->recv.get());
  EXPECT_EQ(pinned, x->send->ctrl) << "R follows to S's socket at the marker";
  // Once the offer is taken, a close no longer undoes anything.
  signlion::net::pairUnregister(y->recv.get());
  EXPECT_TRUE(x->send->paired);
}

// The peer has the smaller id: it initiates, we only follow.
TEST(SocketPairing, FollowerDoesNotInitiate) {
  uint64_t peer = smallerPeer();
  auto x = makeConn(0x2001, peer, 0), y = makeConn(0x2002, 0, peer);
  Registered reg;
  reg.add(x->send.get());
  reg.add(y->recv.get());
  EXPECT_EQ(x->send->due.load(), 0u);
  EXPECT_EQ(signlion::net::pairTakeAdopted(y->recv.get()), nullptr);
}

// An offer read on our recv comm (connection x, from the initiating peer)
// moves our send comm on y onto x's socket, once.
TEST(SocketPairing, OfferMovesTheNamedSendCommOntoTheReadersSocket) {
  uint64_t peer = smallerPeer();
  auto x = makeConn(0x3001, 0, peer), y = makeConn(0x3002, peer, 0);
  Registered reg;
  reg.add(x->recv.get());
  reg.add(y->send.get());
  signlion::net::pairAcceptOffer(x->recv.get(), 0x3002);
  EXPECT_TRUE(due(*y->send, signlion::net::kPairSwitchDue));
  EXPECT_EQ(x->recvShared.load(), 1u);
  EXPECT_EQ(signlion::net::pairTakeAdopted(y->send.get()), x->recv->ctrl);
  y->send->due.store(0);
  signlion::net::pairAcceptOffer(x->recv.get(), 0x3002);
  EXPECT_EQ(y->send->due.load(), 0u) << "a second offer for the same comm is refused";
}

// The offer can be read before the send comm it names has registered (its
// connect sent the last hello, the peer accepted and offered, our recv comm
// read it, all before connect returned): it waits for that comm. An early
// offer whose reader closes is forgotten.
TEST(SocketPairing, OfferReadBeforeItsSendCommRegisteredWaitsForIt) {
  uint64_t peer = smallerPeer();
  auto x = makeConn(0x4001, 0, peer), y = makeConn(0x4002, peer, 0);
  auto z = makeConn(0x4003, 0, peer), w = makeConn(0x4004, peer, 0);
  Registered reg;
  reg.add(x->recv.get());
  signlion::net::pairAcceptOffer(x->recv.get(), 0x4002);
  EXPECT_EQ(x->recvShared.load(), 0u);
  reg.add(y->send.get());
  EXPECT_TRUE(due(*y->send, signlion::net::kPairSwitchDue));
  EXPECT_EQ(x->recvShared.load(), 1u);
  EXPECT_EQ(signlion::net::pairTakeAdopted(y->send.get()), x->recv->ctrl);
  reg.add(z->recv.get());
  signlion::net::pairAcceptOffer(z->recv.get(), 0x4004);
  signlion::net::pairUnregister(z->recv.get());
  reg.add(w->send.get());
  EXPECT_EQ(w->send->due.load(), 0u);
}

// Closing either comm of an initiator pairing before its offer was taken
// undoes it, and the survivor pairs again with the next candidate.
TEST(SocketPairing, CloseBeforeTheOfferUndoesThePairing) {
  uint64_t peer = largerPeer();
  auto x = makeConn(0x5001, peer, 0), y = makeConn(0x5002, 0, peer), z = makeConn(0x5003, 0, peer);
  auto u = makeConn(0x5004, peer, 0), v = makeConn(0x5005, 0, peer);
  Registered reg;
  reg.add(x->send.get());
  reg.add(y->recv.get());
  ASSERT_TRUE(due(*x->send, signlion::net::kPairOfferDue));
  signlion::net::pairUnregister(y->recv.get());
  EXPECT_EQ(x->send->due.load(), 0u) << "the offer is withdrawn";
  uint64_t offer = 0;
  EXPECT_FALSE(signlion::net::pairTakeOffer(x->send.get(), &offer));
  // The send comm is free again: a new recv comm from the same peer pairs with it.
  reg.add(z->recv.get());
  EXPECT_TRUE(due(*x->send, signlion::net::kPairOfferDue));
  ASSERT_TRUE(signlion::net::pairTakeOffer(x->send.get(), &offer));
  EXPECT_EQ(offer, 0x5003u);
  // The other way round: the send comm closes first; the recv comm is unpinned.
  signlion::net::pairUnregister(z->recv.get());
  signlion::net::pairUnregister(x->send.get());
  reg.add(u->send.get());
  reg.add(v->recv.get());
  ASSERT_TRUE(due(*u->send, signlion::net::kPairOfferDue));
  signlion::net::pairUnregister(u->send.get());
  EXPECT_EQ(signlion::net::pairTakeAdopted(v->recv.get()), nullptr);
}

// No pairing across different peers or different local addresses.
TEST(SocketPairing, DifferentPeersOrAddressesDoNotPair) {
  uint64_t peer = largerPeer();
  auto x = makeConn(0x6001, peer, 0), y = makeConn(0x6002, 0, peer + 1);
  auto z = makeConn(0x6003, 0, peer, "127.0.0.2");
  Registered reg;
  reg.add(x->send.get());
  reg.add(y->recv.get());
  EXPECT_EQ(x->send->due.load(), 0u) << "another peer";
  reg.add(z->recv.get());
  EXPECT_EQ(x->send->due.load(), 0u) << "another local address";
}

// Within one process (both ends ours), a pairing needs all four comms and
// casts the far ends: the far send comm accepts the offer only from the far
// recv comm of the same pairing.
TEST(SocketPairing, WithinOneProcessAllFourAreCastAndOnlyTheFarReaderMayOffer) {
  uint64_t me = signlion::net::localInstance();
  auto x = makeConn(0x7001, me, me), y = makeConn(0x7002, me, me), other = makeConn(0x7003, me, me);
  Registered reg;
  reg.add(x->send.get());
  reg.add(x->recv.get());
  reg.add(y->send.get());
  EXPECT_EQ(x->send->due.load() | y->send->due.load(), 0u) << "y's recv end is not registered yet";
  reg.add(y->recv.get());
  // Registration order: x's sender offers, y's receiver is pinned, x's
  // receiver will read the offer, y's sender will move.
  ASSERT_TRUE(due(*x->send, signlion::net::kPairOfferDue));
  reg.add(other->recv.get());
  signlion::net::pairAcceptOffer(other->recv.get(), 0x7002);
  EXPECT_EQ(y->send->due.load(), 0u) << "an offer read by a comm outside the pairing";
  signlion::net::pairAcceptOffer(x->recv.get(), 0x7002);
  EXPECT_TRUE(due(*y->send, signlion::net::kPairSwitchDue));
  EXPECT_EQ(signlion::net::pairTakeAdopted(y->send.get()), x->recv->ctrl);
}
