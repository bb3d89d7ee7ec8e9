#include "socket/socket_pairing.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/debug.h"

namespace signlion {
namespace net {
namespace {

std::mutex gPairMu;
std::vector<PairLink*> gLinks;  // registered links, guarded by gPairMu

bool sameIp(const SocketAddress& a, const SocketAddress& b) {
  if (a.sa.sa_family != b.sa.sa_family) return false;
  if (a.sa.sa_family == AF_INET) return a.sin.sin_addr.s_addr == b.sin.sin_addr.s_addr;
  if (a.sa.sa_family == AF_INET6) return memcmp(&a.sin6.sin6_addr, &b.sin6.sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

// Caller holds gPairMu.
PairLink* findLocked(bool isSend, uint64_t connId) {
  for (PairLink* l : gLinks)
    if (l->isSend == isSend && l->connId == connId) return l;
  return nullptr;
}

// Can S (send, connection x) and R (recv, connection y) share x? Caller holds gPairMu.
bool pairableLocked(const PairLink* s, const PairLink* r) {
  return s->isSend && !r->isSend && !s->paired && !r->paired && s->connId != r->connId &&
         s->peerInstance == r->peerInstance && sameIp(s->local, r->local) && sameIp(s->peer, r->peer);
}

// Pairs S with R as the initiator: R follows to S's socket at the marker, S
// owes an offer. Caller holds gPairMu.
void pairLocked(PairLink* s, PairLink* r) {
  s->paired = r->paired = true;
  r->adopted = s->ctrl;
  s->offer = r->connId;
  s->due.fetch_or(kPairOfferDue, std::memory_order_release);
}

// Tries to pair a newly registered link. Caller holds gPairMu.
void tryPairLocked(PairLink* fresh) {
  uint64_t me = localInstance();
  if (fresh->peerInstance > me) {  // we initiate: pair fresh with any partner
    for (PairLink* other : gLinks) {
      PairLink* s = fresh->isSend ? fresh : other;
      PairLink* r = fresh->isSend ? other : fresh;
      if (other == fresh || !pairableLocked(s, r)) continue;
      pairLocked(s, r);
      return;
    }
    return;
  }
  if (fresh->peerInstance != me) return;  // the peer initiates
  // Both ends are ours. Pairing S(x) with R(y) also casts the far ends: R(x)
  // will read the offer, S(y) will move. All four must be here and free, and
  // all four are marked, so none is chosen for a second role.
  for (PairLink* other : gLinks) {
    PairLink* s = fresh->isSend ? fresh : other;
    PairLink* r = fresh->isSend ? other : fresh;
    if (other == fresh || !pairableLocked(s, r)) continue;
    PairLink* farR = findLocked(false, s->connId);
    PairLink* farS = findLocked(true, r->connId);
    if (farR == nullptr || farS == nullptr || farR->paired || farS->paired) continue;
    farR->paired = farS->paired = true;
    pairLocked(s, r);
    return;
  }
}

}  // namespace

CtrlSocket::~CtrlSocket() {
  if (fd >= 0) close(fd);
}

uint64_t localInstance() {
  static const uint64_t id = [] {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
      v = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count() ^ ((uint64_t)getpid() << 32);
    return v == 0 ? 1 : v;
  }();
  return id;
}

void pairRegister(PairLink* link) {
  socklen_t len = sizeof(link->local);
  if (getsockname(link->ctrl->fd, &link->local.sa, &len) != 0) memset(&link->local, 0, sizeof(link->local));
  len = sizeof(link->peer);
  if (getpeername(link->ctrl->fd, &link->peer.sa, &len) != 0) memset(&link->peer, 0, sizeof(link->peer));
  std::lock_guard<std::mutex> lk(gPairMu);
  gLinks.push_back(link);
  link->registered = true;
  tryPairLocked(link);
}

void pairUnregister(PairLink* link) {
  std::lock_guard<std::mutex> lk(gPairMu);
  if (!link->registered) return;
  gLinks.erase(std::find(gLinks.begin(), gLinks.end(), link));
  link->registered = false;
  link->adopted.reset();
}

bool pairAcceptOffer(PairLink* link, uint64_t sendConnId) {
  std::lock_guard<std::mutex> lk(gPairMu);
  PairLink* s = findLocked(true, sendConnId);
  // The invited send comm must talk to the process that sent the offer, and
  // must not already be moving (a second offer for it is a peer's bug).
  if (s == nullptr || s->peerInstance != link->peerInstance || s->adopted != nullptr) return false;
  if (s->peerInstance != localInstance() && (s->paired || link->paired)) return false;
  s->paired = link->paired = true;
  s->adopted = link->ctrl;
  s->due.fetch_or(kPairSwitchDue, std::memory_order_release);
  return true;
}

uint64_t pairOffer(PairLink* link) {
  std::lock_guard<std::mutex> lk(gPairMu);
  return link->offer;
}

CtrlRef pairTakeAdopted(PairLink* link) {
  std::lock_guard<std::mutex> lk(gPairMu);
  return std::move(link->adopted);
}

}  // namespace net
}  // namespace signlion
