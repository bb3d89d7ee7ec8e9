#include "host/bootstrap.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_stream.h"

namespace signlion {
namespace host {

using net::SocketAddress;

namespace {

using Hello = BootstrapHello;
using TableHeader = BootstrapTableHeader;
using OpHeader = BootstrapOpHeader;
constexpr size_t kMaxPending = 1024;       // unproven connections held by one listener
constexpr int64_t kHelloTimeoutMs = 10000;  // a connection must say hello within this
constexpr int kPollSliceMs = 100;           // longest single poll: bounds reaction to expiries
constexpr int kMaxConnectAttempts = 1000;   // refused connects retried (with back-off) before the deadline

std::atomic<int> gRootsRunning{0};
std::atomic<uint64_t> gRootBytesSent{0};

// An owned descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    net::closeFd(&fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

SocketAddress loopback(int family) {
  SocketAddress a;
  memset(&a, 0, sizeof(a));
  if (family == AF_INET6) {
    a.sin6.sin6_family = AF_INET6;
    a.sin6.sin6_addr = in6addr_loopback;
  } else {
    a.sin.sin_family = AF_INET;
    a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  return a;
}

// The address this process listens on: the socket transport's first device.
SocketAddress listenAddress() {
  std::vector<net::SocketDevice> devs = net::findSocketDevices(1);
  if (!devs.empty()) return devs[0].addr;
  INFO(kSubsysBootstrap, "bootstrap: no socket device, listening on loopback");
  return loopback(AF_INET);
}

// Moves up to sendLen bytes out on sendFd and recvLen bytes in on recvFd at
// once (either may be -1 / 0), until both are done or deadline passes. A
// readable wakeFd means abort. `peer` names the other side in WARN lines.
ncclResult_t transfer(int sendFd, const void* sendBuf, size_t sendLen, int recvFd, void* recvBuf, size_t recvLen,
                      int64_t deadline, int wakeFd, const char* peer) {
  const char* s = static_cast<const char*>(sendBuf);
  char* r = static_cast<char*>(recvBuf);
  size_t sent = 0, got = 0;
  while (sent < sendLen || got < recvLen) {
    int64_t left = deadline - nowMs();
    if (left <= 0) {
      WARN("bootstrap: %s did not answer in time (%zu/%zu bytes sent, %zu/%zu received)", peer, sent, sendLen, got,
           recvLen);
      return ncclRemoteError;
    }
    pollfd fds[3];
    int n = 0, is = -1, ir = -1, iw = -1;
    if (sent < sendLen) { is = n; fds[n++] = {sendFd, POLLOUT, 0}; }
    if (got < recvLen) { ir = n; fds[n++] = {recvFd, POLLIN, 0}; }
    if (wakeFd >= 0) { iw = n; fds[n++] = {wakeFd, POLLIN, 0}; }
    int p = poll(fds, n, (int)std::min<int64_t>(left, kPollSliceMs));
    if (p < 0) {
      if (errno == EINTR) continue;
      WARN("bootstrap: poll failed: %s", strerror(errno));
      return ncclSystemError;
    }
    if (iw >= 0 && fds[iw].revents != 0) {
      WARN("bootstrap: aborted while exchanging with %s", peer);
      return ncclSystemError;
    }
    if (is >= 0 && fds[is].revents != 0) {
      ssize_t k = send(sendFd, s + sent, sendLen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += (size_t)k;
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        WARN("bootstrap: sending to %s failed: %s", peer, strerror(errno));
        return ncclRemoteError;
      }
    }
    if (ir >= 0 && fds[ir].revents != 0) {
      ssize_t k = recv(recvFd, r + got, recvLen - got, MSG_DONTWAIT);
      if (k > 0) {
        got += (size_t)k;
      } else if (k == 0) {
        WARN("bootstrap: %s closed the connection (%zu/%zu bytes received)", peer, got, recvLen);
        return ncclRemoteError;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        WARN("bootstrap: receiving from %s failed: %s", peer, strerror(errno));
        return ncclRemoteError;
      }
    }
  }
  return ncclSuccess;
}

// Connects to `to`, retrying a refused connection (the listener may not be up
// yet) until deadline.
ncclResult_t connectTo(const SocketAddress& to, int64_t deadline, const char* peer, UniqueFd* out) {
  for (int attempt = 0; attempt < kMaxConnectAttempts; attempt++) {
    int fd = -1;
    if (!net::startConnect(to, -1, &fd)) {
      WARN("bootstrap: connect to %s (%s) failed: %s", peer, net::addressString(to).c_str(), strerror(errno));
      return ncclSystemError;
    }
    UniqueFd conn(fd);
    int err = ETIMEDOUT;
    for (int64_t left = deadline - nowMs(); left > 0; left = deadline - nowMs()) {
      pollfd p{conn.get(), POLLOUT, 0};
      int k = poll(&p, 1, (int)std::min<int64_t>(left, kPollSliceMs));
      if (k < 0 && errno != EINTR) { err = errno; break; }
      if (k > 0) {
        socklen_t len = sizeof(err);
        if (getsockopt(conn.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        break;
      }
    }
    if (err == 0) {
      *out = std::move(conn);
      return ncclSuccess;
    }
    if (err == ECONNREFUSED && nowMs() + 20 < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20 * (attempt + 1), 200)));
      continue;
    }
    WARN("bootstrap: connect to %s (%s) failed: %s", peer, net::addressString(to).c_str(), strerror(err));
    return ncclRemoteError;
  }
  WARN("bootstrap: connect to %s (%s) refused %d times", peer, net::addressString(to).c_str(), kMaxConnectAttempts);
  return ncclRemoteError;
}

Hello makeHello(uint16_t kind, uint64_t secret, int rank, int nranks, const SocketAddress* addr) {
  Hello h;
  memset(&h, 0, sizeof(h));
  h.magic = kBootstrapHelloMagic;
  h.version = kBootstrapWireVersion;
  h.kind = kind;
  h.secret = secret;
  h.rank = rank;
  h.nranks = nranks;
  if (addr != nullptr) h.addr = *addr;
  return h;
}

// A connection accepted on a listener that has proven itself with a hello.
struct Arrival {
  UniqueFd fd;
  SocketAddress peer;
  Hello hello;
};

// Accepts on a listening socket and reads each new connection's hello without
// blocking; drops strangers (garbage, wrong secret, silence) with a WARN.
class HelloGate {
 public:
  HelloGate(int listenFd, uint16_t kind, uint64_t secret, const char* who)
      : listenFd_(listenFd), kind_(kind), secret_(secret), who_(who) {}

  // Waits at most waitMs for activity on the listener, the unproven
  // connections and `extra` (whose revents are filled in), then hands out the
  // connections whose hello passed bootstrapHelloProblem.
  ncclResult_t step(int waitMs, std::vector<pollfd>* extra, std::vector<Arrival>* arrived) {
    std::vector<pollfd> fds;
    fds.push_back({listenFd_, POLLIN, 0});
    for (Pending& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
    size_t base = fds.size();
    for (pollfd& e : *extra) fds.push_back({e.fd, e.events, 0});
    int k = poll(fds.data(), fds.size(), std::max(0, waitMs));
    if (k < 0 && errno != EINTR) {
      WARN("bootstrap: %s: poll failed: %s", who_, strerror(errno));
      return ncclSystemError;
    }
    for (size_t i = 0; i < extra->size(); i++) (*extra)[i].revents = k > 0 ? fds[base + i].revents : 0;
    int64_t now = nowMs();
    size_t polled = pending_.size();
    for (size_t i = 0, f = 1; f < 1 + polled; f++) {  // f: this connection's slot in fds
      Pending& p = pending_[i];
      const char* why = nullptr;
      if (k > 0 && fds[f].revents != 0) {
        ssize_t n = recv(p.fd.get(), (char*)&p.hello + p.off, sizeof(Hello) - p.off, MSG_DONTWAIT);
        if (n > 0) p.off += (size_t)n;
        else if (n == 0) why = "closed before a full hello";
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) why = strerror(errno);
      }
      if (why == nullptr && p.off == sizeof(Hello)) why = bootstrapHelloProblem(p.hello, kind_, secret_);
      if (why == nullptr && p.off < sizeof(Hello) && now - p.start > kHelloTimeoutMs) why = "no hello in time";
      if (why == nullptr && p.off < sizeof(Hello)) {
        i++;
        continue;
      }
      if (why != nullptr) {
        WARN("bootstrap: %s: dropping connection from %s: %s", who_, net::addressString(p.peer).c_str(), why);
      } else {
        arrived->push_back(Arrival{std::move(p.fd), p.peer, p.hello});
      }
      pending_.erase(pending_.begin() + i);
    }
    for (int i = 0; i < 64; i++) {  // bounded per step
      SocketAddress peer;
      socklen_t len = sizeof(peer);
      int fd = accept4(listenFd_, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        WARN("bootstrap: %s: accept failed: %s", who_, strerror(errno));
        return ncclSystemError;
      }
      net::tuneStream(fd, -1, peer.sa.sa_family);
      if (pending_.size() >= kMaxPending) {
        WARN("bootstrap: %s: dropping connection from %s: too many unproven connections", who_,
             net::addressString(pending_.front().peer).c_str());
        pending_.erase(pending_.begin());
      }
      pending_.push_back(Pending{UniqueFd(fd), peer, Hello{}, 0, now});
    }
    return ncclSuccess;
  }

 private:
  struct Pending {
    UniqueFd fd;
    SocketAddress peer;
    Hello hello;
    size_t off;
    int64_t start;
  };
  int listenFd_;
  uint16_t kind_;
  uint64_t secret_;
  const char* who_;
  std::vector<Pending> pending_;
};

// ---- Root rendezvous ----------------------------------------------------------

class Root {
 public:
  Root(UniqueFd listen, uint64_t secret, int timeoutMs)
      : listen_(std::move(listen)), secret_(secret), timeoutMs_(timeoutMs), deadline_(nowMs() + timeoutMs) {}

  void run() {
    HelloGate gate(listen_.get(), kHelloRoot, secret_, "root");
    std::vector<UniqueFd> conns;  // per rank, once checked in
    std::vector<SocketAddress> addrs;
    int nranks = 0, joined = 0;
    while (nranks == 0 || joined < nranks) {
      int64_t left = deadline_ - nowMs();
      if (left <= 0) {
        WARN("bootstrap: root: timed out after %d ms with %d of %d ranks checked in", timeoutMs_, joined, nranks);
        return;  // closing everything: waiting ranks see their connection close
      }
      // A checked-in rank sends nothing more: anything readable means it left.
      std::vector<pollfd> extra;
      std::vector<int> extraRank;
      for (int r = 0; r < nranks; r++) {
        if (conns[r].get() < 0) continue;
        extra.push_back({conns[r].get(), POLLIN, 0});
        extraRank.push_back(r);
      }
      std::vector<Arrival> arrived;
      if (gate.step((int)std::min<int64_t>(left, kPollSliceMs), &extra, &arrived) != ncclSuccess) return;
      for (size_t i = 0; i < extra.size(); i++) {
        if (extra[i].revents == 0) continue;
        WARN("bootstrap: root: rank %d left before its successor's address was sent", extraRank[i]);
        conns[extraRank[i]].reset();
        joined--;
      }
      for (Arrival& a : arrived) {
        const Hello& h = a.hello;
        std::string from = net::addressString(a.peer);
        if (nranks == 0) {
          nranks = h.nranks;
          conns.resize(nranks);
          addrs.resize(nranks);
        }
        if (h.nranks != nranks) {
          WARN("bootstrap: root: dropping rank %d from %s: nranks %d, but the first rank said %d", h.rank,
               from.c_str(), h.nranks, nranks);
        } else if (conns[h.rank].get() >= 0) {
          WARN("bootstrap: root: dropping a second rank %d from %s", h.rank, from.c_str());
        } else {
          INFO(kSubsysBootstrap, "bootstrap: root: rank %d/%d checked in from %s, listens on %s", h.rank, nranks,
               from.c_str(), net::addressString(h.addr).c_str());
          conns[h.rank] = std::move(a.fd);
          addrs[h.rank] = h.addr;
          joined++;
        }
      }
    }
    for (int r = 0; r < nranks; r++) {
      struct {
        TableHeader th;
        SocketAddress next;
      } msg;
      memset(&msg, 0, sizeof(msg));
      msg.th = TableHeader{kBootstrapTableMagic, nranks};
      msg.next = addrs[(r + 1) % nranks];
      std::string peer = "rank " + std::to_string(r);
      if (transfer(conns[r].get(), &msg, sizeof(msg), -1, nullptr, 0, deadline_, -1, peer.c_str()) == ncclSuccess)
        gRootBytesSent += sizeof(msg);
    }
    INFO(kSubsysBootstrap, "bootstrap: root: sent %d ranks their successors' addresses", nranks);
  }

 private:
  UniqueFd listen_;
  uint64_t secret_;
  int timeoutMs_;
  int64_t deadline_;
};

// Ring set-up on the joining side: a proven stream to rank+1 and one from rank-1.
ncclResult_t connectRing(int listenFd, const SocketAddress& nextAddr, int rank, int nranks, uint64_t secret,
                         int64_t deadline, UniqueFd* next, UniqueFd* prev) {
  int nextRank = (rank + 1) % nranks, prevRank = (rank + nranks - 1) % nranks;
  std::string nextName = "rank " + std::to_string(nextRank), prevName = "rank " + std::to_string(prevRank);
  // Connecting needs only the peer's listen backlog, which exists since it checked in.
  NCCLCHECK(connectTo(nextAddr, deadline, nextName.c_str(), next));
  Hello mine = makeHello(kHelloRing, secret, rank, nranks, nullptr);
  NCCLCHECK(transfer(next->get(), &mine, sizeof(mine), -1, nullptr, 0, deadline, -1, nextName.c_str()));

  HelloGate gate(listenFd, kHelloRing, secret, "ring");
  while (prev->get() < 0) {
    int64_t left = deadline - nowMs();
    if (left <= 0) {
      WARN("bootstrap: rank %d: %s did not connect in time", rank, prevName.c_str());
      return ncclRemoteError;
    }
    std::vector<pollfd> none;
    std::vector<Arrival> arrived;
    NCCLCHECK(gate.step((int)std::min<int64_t>(left, kPollSliceMs), &none, &arrived));
    for (Arrival& a : arrived) {
      if (a.hello.rank != prevRank || a.hello.nranks != nranks || prev->get() >= 0) {
        WARN("bootstrap: rank %d: dropping ring connection from %s claiming rank %d of %d", rank,
             net::addressString(a.peer).c_str(), a.hello.rank, a.hello.nranks);
        continue;
      }
      *prev = std::move(a.fd);
    }
  }
  Hello ack = makeHello(kHelloRingAck, secret, rank, nranks, nullptr);
  Hello theirs;
  NCCLCHECK(transfer(prev->get(), &ack, sizeof(ack), next->get(), &theirs, sizeof(theirs), deadline, -1,
                     "ring neighbours"));
  const char* why = bootstrapHelloProblem(theirs, kHelloRingAck, secret);
  if (why == nullptr && (theirs.rank != nextRank || theirs.nranks != nranks)) why = "wrong rank";
  if (why != nullptr) {
    WARN("bootstrap: rank %d: %s at %s did not acknowledge: %s", rank, nextName.c_str(),
         net::addressString(nextAddr).c_str(), why);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

}  // namespace

// ---- Ids ----------------------------------------------------------------------

int bootstrapRootsRunning() { return gRootsRunning.load(); }
uint64_t bootstrapRootBytesSent() { return gRootBytesSent.load(); }

ncclResult_t bootstrapCreateRoot(ncclSignUniqueId* id, int timeoutMs) {
  ARGCHECK(id != nullptr, "bootstrapCreateRoot", "id", "NULL");
  ARGCHECK(timeoutMs > 0, "bootstrapCreateRoot", "timeoutMs", "%d is not positive", timeoutMs);
  BootstrapId w;
  if (getrandom(&w.secret, sizeof(w.secret), 0) != (ssize_t)sizeof(w.secret)) {
    WARN("bootstrap: getrandom failed: %s", strerror(errno));
    return ncclSystemError;
  }
  int fd = -1;
  if (!net::listenOnFreePort(listenAddress(), 1024, &fd, &w.root)) return ncclSystemError;
  UniqueFd listen(fd);
  std::unique_ptr<Root> root(new Root(std::move(listen), w.secret, timeoutMs));
  gRootsRunning++;
  try {
    std::thread([r = std::move(root)]() mutable {
      r->run();
      r.reset();  // closes every socket before the count drops
      gRootsRunning--;
    }).detach();
  } catch (const std::system_error& e) {
    gRootsRunning--;
    WARN("bootstrap: cannot start the root thread: %s", e.what());
    return ncclSystemError;
  }
  bootstrapWriteId(w, id);
  INFO(kSubsysBootstrap, "bootstrap: root listening on %s, timeout %d ms", net::addressString(w.root).c_str(),
       timeoutMs);
  return ncclSuccess;
}

// ---- Joining ------------------------------------------------------------------

Bootstrap::Bootstrap(int rank, int nranks, int timeoutMs, uint64_t secret)
    : rank_(rank), nranks_(nranks), timeoutMs_(timeoutMs), secret_(secret) {}

Bootstrap::~Bootstrap() {
  std::lock_guard<std::mutex> lk(mu_);
  closeLocked();
}

ncclResult_t Bootstrap::create(const ncclSignUniqueId& id, int rank, int nranks, int timeoutMs,
                               std::unique_ptr<Bootstrap>* out) {
  const char* fn = "Bootstrap::create";
  ARGCHECK(out != nullptr, fn, "out", "NULL");
  ARGCHECK(nranks >= 1 && nranks <= kBootstrapMaxRanks, fn, "nranks", "%d is not in [1, %d]", nranks, kBootstrapMaxRanks);
  ARGCHECK(rank >= 0 && rank < nranks, fn, "rank", "%d is not in [0, %d)", rank, nranks);
  ARGCHECK(timeoutMs > 0, fn, "timeoutMs", "%d is not positive", timeoutMs);
  BootstrapId bid;
  NCCLCHECK(bootstrapParseId(id, fn, &bid));
  int64_t deadline = nowMs() + timeoutMs;

  int fd = -1;
  SocketAddress me;
  if (!net::listenOnFreePort(listenAddress(), 128, &fd, &me)) return ncclSystemError;
  UniqueFd listen(fd);

  // Check in with the root; the answer is where rank+1 listens.
  SocketAddress nextAddr;
  {
    UniqueFd root;
    NCCLCHECK(connectTo(bid.root, deadline, "the root", &root));
    Hello h = makeHello(kHelloRoot, bid.secret, rank, nranks, &me);
    TableHeader th{};
    NCCLCHECK(transfer(root.get(), &h, sizeof(h), root.get(), &th, sizeof(th), deadline, -1, "the root"));
    if (const char* why = bootstrapTableProblem(th, nranks, nullptr)) {
      WARN("bootstrap: rank %d: bad answer from the root: %s (magic 0x%x, nranks %d, expected %d)", rank, why,
           th.magic, th.nranks, nranks);
      return ncclRemoteError;
    }
    NCCLCHECK(transfer(-1, nullptr, 0, root.get(), &nextAddr, sizeof(nextAddr), deadline, -1, "the root"));
    if (const char* why = bootstrapTableProblem(th, nranks, &nextAddr)) {
      WARN("bootstrap: rank %d: bad answer from the root: %s", rank, why);
      return ncclRemoteError;
    }
  }
  std::unique_ptr<Bootstrap> b(new Bootstrap(rank, nranks, timeoutMs, bid.secret));
  b->wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (b->wakeFd_ < 0) {
    WARN("bootstrap: eventfd failed: %s", strerror(errno));
    return ncclSystemError;
  }
  if (nranks > 1) {
    UniqueFd next, prev;
    NCCLCHECK(connectRing(listen.get(), nextAddr, rank, nranks, bid.secret, deadline, &next, &prev));
    b->nextFd_ = next.release();
    b->prevFd_ = prev.release();
  }
  INFO(kSubsysBootstrap, "bootstrap: rank %d/%d ready, listened on %s", rank, nranks,
       net::addressString(me).c_str());
  *out = std::move(b);
  return ncclSuccess;
}

// ---- Ring operations ----------------------------------------------------------

ncclResult_t Bootstrap::beginOp(const char* op) {
  std::lock_guard<std::mutex> lk(mu_);
  if (aborted_) {
    WARN("bootstrap: rank %d: %s after abort", rank_, op);
    return ncclSystemError;
  }
  if (error_ != ncclSuccess) {
    WARN("bootstrap: rank %d: %s on a bootstrap broken by an earlier error (%d)", rank_, op, (int)error_);
    return error_;
  }
  busy_++;
  return ncclSuccess;
}

ncclResult_t Bootstrap::endOp(ncclResult_t res) {
  std::lock_guard<std::mutex> lk(mu_);
  busy_--;
  if (res != ncclSuccess && aborted_) res = ncclSystemError;  // our own abort, whatever the link said
  if (res != ncclSuccess && error_ == ncclSuccess) {
    error_ = res;
    shutdownLocked();  // peers blocked on us fail now instead of at their timeout
  }
  if (aborted_ && busy_ == 0) closeLocked();
  return res;
}

void Bootstrap::shutdownLocked() {
  if (nextFd_ >= 0) (void)shutdown(nextFd_, SHUT_RDWR);
  if (prevFd_ >= 0) (void)shutdown(prevFd_, SHUT_RDWR);
}

void Bootstrap::closeLocked() {
  net::closeFd(&nextFd_);
  net::closeFd(&prevFd_);
  net::closeFd(&wakeFd_);
}

void Bootstrap::abort() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!aborted_) INFO(kSubsysBootstrap, "bootstrap: rank %d: abort", rank_);
  aborted_ = true;
  if (wakeFd_ >= 0) {  // before the shutdown, so a blocked call sees why its link closed
    uint64_t one = 1;
    (void)!write(wakeFd_, &one, sizeof(one));
  }
  shutdownLocked();
  if (busy_ == 0) closeLocked();
}

ncclResult_t Bootstrap::ringCollective(uint32_t kind, void* data, size_t bytes) {
  if (nranks_ == 1) return ncclSuccess;
  int64_t deadline = nowMs() + timeoutMs_;
  int nextRank = (rank_ + 1) % nranks_, prevRank = (rank_ + nranks_ - 1) % nranks_;
  std::string peers = "ring neighbours (rank " + std::to_string(prevRank) + " -> " + std::to_string(rank_) + " -> " +
                      std::to_string(nextRank) + ")";
  OpHeader mine{kBootstrapOpMagic, kind, bytes}, theirs{};
  NCCLCHECK(transfer(nextFd_, &mine, sizeof(mine), prevFd_, &theirs, sizeof(theirs), deadline, wakeFd_,
                     peers.c_str()));
  if (bootstrapOpProblem(theirs, kind, bytes) != nullptr) {
    WARN("bootstrap: rank %d: rank %d called %s of %llu bytes, this rank %s of %zu bytes", rank_, prevRank,
         theirs.kind == kOpBarrier ? "barrier" : "allGather", (unsigned long long)theirs.bytes,
         kind == kOpBarrier ? "barrier" : "allGather", bytes);
    return ncclInvalidUsage;
  }
  char* base = static_cast<char*>(data);
  for (int s = 0; s < nranks_ - 1; s++) {
    int sendSlot = (rank_ - s + nranks_) % nranks_;
    int recvSlot = (rank_ - s - 1 + nranks_) % nranks_;
    NCCLCHECK(transfer(nextFd_, base + sendSlot * bytes, bytes, prevFd_, base + recvSlot * bytes, bytes, deadline,
                       wakeFd_, peers.c_str()));
  }
  return ncclSuccess;
}

ncclResult_t Bootstrap::allGather(void* data, size_t bytes) {
  ARGCHECK(data != nullptr || bytes == 0, "Bootstrap::allGather", "data", "NULL with %zu bytes per rank", bytes);
  NCCLCHECK(beginOp("allGather"));
  return endOp(ringCollective(kOpAllGather, data, bytes));
}

ncclResult_t Bootstrap::barrier() {
  NCCLCHECK(beginOp("barrier"));
  // A token per rank makes the ring wait for every rank, as an allGather would.
  std::vector<char> tokens(nranks_, 1);
  return endOp(ringCollective(kOpBarrier, tokens.data(), 1));
}

}  // namespace host
}  // namespace signlion
