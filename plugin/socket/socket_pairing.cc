#include "socket/socket_pairing.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace signlion {
namespace net {
namespace {

// Guards every registry-guarded field of every PairLink, and the tables below.
std::mutex gPairMu;
std::vector<PairLink*> gLinks;                      // registered links
std::unordered_map<uint64_t, PairLink*> gSendById;  // registered send links by connId
std::unordered_map<uint64_t, PairLink*> gRecvById;  // registered recv links by connId
// Offers read before the send comm they name registered: send connId -> the
// recv link that read it (at most one per recv link).
std::unordered_map<uint64_t, PairLink*> gEarlyOffers;

bool sameIp(const SocketAddress& a, const SocketAddress& b) {
  if (a.sa.sa_family != b.sa.sa_family) return false;
  if (a.sa.sa_family == AF_INET) return a.sin.sin_addr.s_addr == b.sin.sin_addr.s_addr;
  if (a.sa.sa_family == AF_INET6) return memcmp(&a.sin6.sin6_addr, &b.sin6.sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

// Caller holds gPairMu.
PairLink* findLocked(bool isSend, uint64_t connId) {
  auto& table = isSend ? gSendById : gRecvById;
  auto it = table.find(connId);
  return it == table.end() ? nullptr : it->second;
}

// Can S (send, connection x) and R (recv, connection y) share x? Caller holds gPairMu.
bool pairableLocked(const PairLink* s, const PairLink* r) {
  return s->isSend && !r->isSend && !s->paired && !r->paired && s->connId != r->connId &&
         s->peerInstance == r->peerInstance && sameIp(s->local, r->local) && sameIp(s->peer, r->peer);
}

void tryPairLocked(PairLink* fresh);

// Pairs S with R as the initiator: R follows to S's socket at the marker, S
// owes an offer. Caller holds gPairMu.
void pairLocked(PairLink* s, PairLink* r) {
  s->paired = r->paired = true;
  s->partner = r;
  r->partner = s;
  r->adopted = s->ctrl;
  s->offer = r->connId;
  s->due.fetch_or(kPairOfferDue, std::memory_order_release);
}

// Undoes an initiator pairing whose offer was not taken: `gone` is leaving,
// its partner (and, within one process, the far ends) may pair again.
// Caller holds gPairMu.
void unpairLocked(PairLink* gone) {
  PairLink* other = gone->partner;
  PairLink* s = gone->isSend ? gone : other;
  PairLink* r = gone->isSend ? other : gone;
  gone->partner = other->partner = nullptr;
  s->due.fetch_and(~(uint32_t)kPairOfferDue, std::memory_order_acq_rel);
  s->offer = 0;
  r->adopted.reset();
  s->paired = r->paired = false;
  std::vector<PairLink*> retry = {other};
  if (s->peerInstance == localInstance()) {
    PairLink* farR = findLocked(false, s->connId);
    PairLink* farS = findLocked(true, r->connId);
    if (farR != nullptr) farR->paired = false, retry.push_back(farR);
    if (farS != nullptr) farS->paired = false, farS->expectOfferOn = nullptr, retry.push_back(farS);
  }
  for (PairLink* l : retry)
    if (l != gone && l->registered && !l->paired) tryPairLocked(l);
}

// Tries to pair a registered, unpaired link. Caller holds gPairMu.
void tryPairLocked(PairLink* fresh) {
  uint64_t me = localInstance();
  if (fresh->peerInstance < me) return;  // the peer initiates
  for (PairLink* other : gLinks) {
    PairLink* s = fresh->isSend ? fresh : other;
    PairLink* r = fresh->isSend ? other : fresh;
    if (other == fresh || !pairableLocked(s, r)) continue;
    if (fresh->peerInstance != me) {
      pairLocked(s, r);
      return;
    }
    // Both ends are ours. Pairing S(x) with R(y) also casts the far ends:
    // R(x) will read the offer, S(y) will move. All four must be here and
    // free; all four are marked, so none is chosen for a second role.
    PairLink* farR = findLocked(false, s->connId);
    PairLink* farS = findLocked(true, r->connId);
    if (farR == nullptr || farS == nullptr || farR->paired || farS->paired) continue;
    farR->paired = farS->paired = true;
    farS->expectOfferOn = farR;
    pairLocked(s, r);
    return;
  }
}

// The follower's half: send comm s moves onto recv comm r's socket, if the
// offer r read fits. Caller holds gPairMu.
void acceptOfferLocked(PairLink* r, PairLink* s) {
  if (s->peerInstance != r->peerInstance || s->adopted != nullptr) return;
  if (s->peerInstance == localInstance()) {
    if (s->expectOfferOn != r) return;  // only the far end cast at pairing, and only once
    s->expectOfferOn = nullptr;
  } else if (s->paired || r->paired) {
    return;  // the peer broke the initiator rule
  }
  s->paired = r->paired = true;
  s->adopted = r->ctrl;
  s->due.fetch_or(kPairSwitchDue, std::memory_order_release);
  if (r->shared != nullptr) r->shared->store(1, std::memory_order_relaxed);
}

}  // namespace

CtrlSocket::~CtrlSocket() {
  if (fd < 0) return;
  char sink[4096];
  for (int i = 0; i < 256; i++)
    if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) break;
  close(fd);
}

uint64_t localInstance() {
  static const uint64_t seed = [] {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
      v = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    return v;
  }();
  // The pid keeps a forked child (which inherits the seed) distinct from its parent.
  uint64_t id = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)getpid());
  return id == 0 ? 1 : id;
}

void pairRegister(PairLink* link) {
  socklen_t len = sizeof(link->local);
  if (getsockname(link->ctrl->fd, &link->local.sa, &len) != 0) memset(&link->local, 0, sizeof(link->local));
  len = sizeof(link->peer);
  if (getpeername(link->ctrl->fd, &link->peer.sa, &len) != 0) memset(&link->peer, 0, sizeof(link->peer));
  std::lock_guard<std::mutex> lk(gPairMu);
  gLinks.push_back(link);
  (link->isSend ? gSendById : gRecvById).emplace(link->connId, link);
  link->registered = true;
  if (link->isSend) {
    auto it = gEarlyOffers.find(link->connId);
    if (it != gEarlyOffers.end()) {
      PairLink* r = it->second;
      gEarlyOffers.erase(it);
      acceptOfferLocked(r, link);
    }
  }
  if (!link->paired) tryPairLocked(link);
}

void pairUnregister(PairLink* link) {
  std::lock_guard<std::mutex> lk(gPairMu);
  if (!link->registered) return;
  link->registered = false;
  gLinks.erase(std::find(gLinks.begin(), gLinks.end(), link));
  auto& table = link->isSend ? gSendById : gRecvById;
  auto it = table.find(link->connId);
  if (it != table.end() && it->second == link) table.erase(it);
  for (auto e = gEarlyOffers.begin(); e != gEarlyOffers.end();) e = e->second == link ? gEarlyOffers.erase(e) : ++e;
  if (link->partner != nullptr) unpairLocked(link);
  link->adopted.reset();
}

void pairAcceptOffer(PairLink* link, uint64_t sendConnId) {
  std::lock_guard<std::mutex> lk(gPairMu);
  PairLink* s = findLocked(true, sendConnId);
  if (s != nullptr) {
    acceptOfferLocked(link, s);
  } else if (link->peerInstance != localInstance() && !link->paired) {
    // The comm it names may be a connect whose last hello went out but that
    // has not registered yet: keep the offer for it.
    for (auto e = gEarlyOffers.begin(); e != gEarlyOffers.end();) e = e->second == link ? gEarlyOffers.erase(e) : ++e;
    gEarlyOffers[sendConnId] = link;
  }
}

bool pairTakeOffer(PairLink* link, uint64_t* offer) {
  std::lock_guard<std::mutex> lk(gPairMu);
  if (link->offer == 0) return false;
  *offer = link->offer;
  link->offer = 0;
  if (link->partner != nullptr) link->partner->partner = nullptr;
  link->partner = nullptr;
  return true;
}

CtrlRef pairTakeAdopted(PairLink* link) {
  std::lock_guard<std::mutex> lk(gPairMu);
  return std::move(link->adopted);
}

}  // namespace net
}  // namespace signlion
