// The listen handle, connect and accept (socket_comm.h): a listener per
// interface of the device, the connector's control and data streams each
// opened with a hello, and the acceptor sorting arriving streams into their
// connections until one is complete.
#include "socket/socket_comm.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_device_table.h"
#include "net/socket_params.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {

using namespace sock;

ncclResult_t socketListen(int dev, void* handle, void** listenComm) {
  ARGCHECK(handle != nullptr, "listen", "handle", "NULL");
  ARGCHECK(listenComm != nullptr, "listen", "listenComm", "NULL");
  *listenComm = nullptr;
  NicSet nics;
  ARGCHECK(deviceNics(dev, &nics), "listen", "dev", "%d is not a device", dev);

  std::unique_ptr<ListenComm> l(new ListenComm());
  l->magic = kCommMagic;
  l->kind = kCommListen;
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.nnics = (uint8_t)nics.n;
  h.instance = localInstance();
  h.connecting = nullptr;
  auto fail = [&] {
    for (int& fd : l->fds) closeFd(&fd);
    return ncclSystemError;
  };
  for (int i = 0; i < nics.n; i++) {
    SocketAddress bound;
    l->fds.push_back(-1);
    if (!listenOnFreePort(nics.addr[i], 1024, &l->fds.back(), &bound)) return fail();
    h.nics[i] = toHandleNic(bound);
    INFO(kSubsysNet, "NET/signlion: listening on %s", addressString(bound).c_str());
  }
  if (getrandom(&l->secret, sizeof(l->secret), 0) != (ssize_t)sizeof(l->secret)) {
    WARN("NET/signlion: getrandom failed: %s", strerror(errno));
    return fail();
  }
  h.secret = l->secret;
  memset(handle, 0, 128);
  memcpy(handle, &h, sizeof(h));
  *listenComm = static_cast<CommHeader*>(l.release());
  return ncclSuccess;
}

ncclResult_t socketConnect(int dev, int trafficClass, void* handle, void** sendComm, PendingConnects* pending) {
  ARGCHECK(handle != nullptr, "connect", "handle", "NULL");
  ARGCHECK(sendComm != nullptr, "connect", "sendComm", "NULL");
  *sendComm = nullptr;
  // NCCL's handle buffer has no alignment promise: read it by copy, and write
  // back only the connector-private pointer, also by copy.
  SocketParsedHandle parsed;
  NCCLCHECK(socketParseHandle(handle, &parsed));
  const ListenHandle* h = &parsed.raw;
  const SocketAddress* remote = parsed.remote;
  auto setConnecting = [handle](SendComm* comm) {
    void* p = comm;
    memcpy(static_cast<char*>(handle) + offsetof(ListenHandle, connecting), &p, sizeof(p));
  };
  NicSet local;
  ARGCHECK(deviceNics(dev, &local), "connect", "dev", "%d is not a device", dev);

  SendComm* c = static_cast<SendComm*>(h->connecting);
  ARGCHECK(c == nullptr || connectsInProgress().contains(c), "connect", "handle",
           "its connector-private bytes hold %p, no connect of this process (a handle from a peer must come "
           "unchanged from its listen)",
           h->connecting);
  if (c == nullptr) {
    c = newSendComm();
    if (c == nullptr) return ncclSystemError;
    c->nsocks = socketDeviceStreams(local);
    c->chunkSize = (size_t)std::max<int64_t>(4096, std::min<int64_t>(signlionParamSocketChunkSize(), 1 << 30));
    for (int s = 0; s < c->nsocks; s++) c->streams.emplace_back();
    auto* cs = new SendComm::Connecting();
    c->connecting.reset(cs);
    cs->trafficClass = trafficClass;
    c->trafficClass = trafficClass;
    cs->deadline = nowMs() + socketTimeoutMs();
    uint64_t connId = 0;
    if (getrandom(&connId, sizeof(connId), 0) != (ssize_t)sizeof(connId)) connId = (uint64_t)nowMs() ^ (uint64_t)c;
    int nfd = 1 + c->nsocks;
    cs->state.assign(nfd, 0);
    cs->off.assign(nfd, 0);
    cs->hello.resize(nfd);
    // Control and data stream 0 on the first interface, stream i on i mod n
    // at each end: a fused device's streams spread over its interfaces.
    cs->bindFrom = local.n > 1;
    for (int i = 0; i < nfd; i++) {
      int s = i == 0 ? 0 : i - 1;
      cs->to.push_back(remote[s % h->nnics]);
      cs->from.push_back(local.addr[s % local.n]);
    }
    for (int i = 0; i < nfd; i++) {
      Hello& he = cs->hello[i];
      he = Hello{};
      he.magic = kHandleMagic;
      he.version = kWireVersion;
      he.kind = i == 0 ? 0 : 1;  // control, data
      he.index = (uint8_t)(i == 0 ? 0 : i - 1);
      he.nsocks = (uint32_t)c->nsocks;
      he.chunkSize = (uint32_t)c->chunkSize;
      he.secret = h->secret;
      he.connId = connId;
      he.instance = localInstance();
      int* fd = i == 0 ? &c->ctrlFd : &c->streams[i - 1].fd;
      if (!startConnect(cs->to[i], trafficClass, fd, cs->bindFrom ? &cs->from[i] : nullptr)) {
        WARN("NET/signlion: connect to %s failed: %s", addressString(cs->to[i]).c_str(), strerror(errno));
        destroyComm(c);
        return ncclSystemError;
      }
    }
    setConnecting(c);
    connectsInProgress().add(c);
    if (pending != nullptr) {
      std::lock_guard<std::mutex> lk(pending->mu);
      pending->comms.insert(c);
      c->pending = pending;
    }
  }
  SendComm::Connecting* cs = c->connecting.get();
  int nfd = 1 + c->nsocks;
  bool all = true;
  for (int i = 0; i < nfd; i++) {
    int* fd = i == 0 ? &c->ctrlFd : &c->streams[i - 1].fd;
    if (cs->state[i] == 0) {
      pollfd p{*fd, POLLOUT, 0};
      if (poll(&p, 1, 0) > 0) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(*fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err == 0) {
          cs->state[i] = 1;
        } else if ((err == ECONNREFUSED || err == ETIMEDOUT) && nowMs() < cs->deadline) {
          closeFd(fd);  // the listener may not be up yet: try again on the next call
          if (!startConnect(cs->to[i], cs->trafficClass, fd, cs->bindFrom ? &cs->from[i] : nullptr))
            err = errno;
          else
            err = 0;
        }
        if (err != 0 && cs->state[i] == 0) {
          WARN("NET/signlion: connect to %s failed: %s", addressString(cs->to[i]).c_str(), strerror(err));
          setConnecting(nullptr);
          destroyComm(c);
          return ncclSystemError;
        }
      }
    }
    if (cs->state[i] == 1) {
      ssize_t n = send(*fd, (char*)&cs->hello[i] + cs->off[i], sizeof(Hello) - cs->off[i], MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0)
        cs->off[i] += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        WARN("NET/signlion: handshake with %s failed: %s", addressString(cs->to[i]).c_str(), strerror(errno));
        setConnecting(nullptr);
        destroyComm(c);
        return ncclSystemError;
      }
      if (cs->off[i] == sizeof(Hello)) cs->state[i] = 2;
    }
    all &= cs->state[i] == 2;
  }
  if (!all) {
    if (nowMs() > cs->deadline) {
      WARN("NET/signlion: connect to %s timed out after %lld ms", addressString(cs->to[0]).c_str(),
           (long long)socketTimeoutMs());
      setConnecting(nullptr);
      destroyComm(c);
      return ncclSystemError;
    }
    return ncclSuccess;  // call again
  }
  setConnecting(nullptr);
  uint64_t connId = cs->hello[0].connId;
  c->connecting.reset();
  connectsInProgress().remove(c);
  unlistPending(c);
  ncclResult_t res = startHelpers(c, (int)signlionParamNthreads());
  if (res != ncclSuccess) {
    destroyComm(c);
    return res;
  }
  establishCtrl(c, connId, h->instance);
  INFO(kSubsysNet, "NET/signlion: connected to %s, %d streams over %d x %d interfaces, chunk %zu",
       addressString(remote[0]).c_str(), c->nsocks, local.n, (int)h->nnics, c->chunkSize);
  *sendComm = static_cast<CommHeader*>(c);
  return ncclSuccess;
}

void socketAbandonConnects(PendingConnects* pending) {
  if (pending == nullptr) return;
  std::unordered_set<void*> left;
  {
    std::lock_guard<std::mutex> lk(pending->mu);
    left.swap(pending->comms);
  }
  for (void* p : left) {
    SendComm* c = static_cast<SendComm*>(p);
    c->pending = nullptr;
    WARN("NET/signlion: closing a connect to %s that never finished", addressString(c->connecting->to[0]).c_str());
    destroyComm(c);
  }
}

namespace {

// Drops a connection that did not present our handshake.
void refuse(PendingConn* p, const char* why) {
  WARN("NET/signlion: dropping connection from %s: %s", addressString(p->peer).c_str(), why);
  closeFd(&p->fd);
}

void dropGroup(ConnGroup* g) {
  closeFd(&g->ctrlFd);
  for (int& fd : g->dataFds) closeFd(&fd);
}

}  // namespace

ncclResult_t socketAccept(void* listenComm, void** recvComm) {
  ARGCHECK(recvComm != nullptr, "accept", "recvComm", "NULL");
  *recvComm = nullptr;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "accept", "listenComm",
           "%p is not a listen comm", listenComm);
  int64_t now = nowMs();
  for (int i = 0, k = 0; i < 64 && k < (int)l->fds.size();) {  // bounded per call; each interface in turn
    PendingConn p{};
    socklen_t len = sizeof(p.peer);
    p.fd = accept4(l->fds[k], &p.peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p.fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        k++;
        continue;
      }
      WARN("NET/signlion: accept failed: %s", strerror(errno));
      return ncclSystemError;
    }
    i++;
    tuneStream(p.fd, -1, p.peer.sa.sa_family);
    p.start = now;
    if (l->pending.size() >= kMaxPendingAccepts) {
      refuse(&l->pending.front(), "too many handshakes in progress");
      l->pending.erase(l->pending.begin());
    }
    l->pending.push_back(p);
  }
  // Read hellos; sort valid streams into their connection's group.
  for (size_t i = 0; i < l->pending.size();) {
    PendingConn* p = &l->pending[i];
    ssize_t n = recv(p->fd, (char*)&p->hello + p->off, sizeof(Hello) - p->off, MSG_DONTWAIT);
    if (n > 0) p->off += (size_t)n;
    const char* why = nullptr;
    if (n == 0)
      why = "closed during handshake";
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      why = strerror(errno);
    else if (p->off < sizeof(Hello) && now - p->start > socketTimeoutMs())
      why = "handshake timed out";
    else if (p->off == sizeof(Hello)) {
      const Hello& he = p->hello;
      why = socketHelloProblem(he, l->secret);
      if (why == nullptr) {
        ConnGroup* g = nullptr;
        for (ConnGroup& x : l->groups)
          if (x.connId == he.connId) g = &x;
        if (g == nullptr) {
          l->groups.emplace_back();
          g = &l->groups.back();
          g->connId = he.connId;
          g->dataFds.assign(he.nsocks, -1);
          g->start = now;
        }
        int* slot = he.kind == 0 ? &g->ctrlFd : (he.nsocks == g->dataFds.size() ? &g->dataFds[he.index] : nullptr);
        if (slot == nullptr || *slot >= 0) {
          why = "duplicate or inconsistent stream";
        } else {
          *slot = p->fd;
          if (he.kind == 0) g->ctrl = he;
          l->pending.erase(l->pending.begin() + i);
          continue;
        }
      }
    } else {
      i++;
      continue;
    }
    if (why != nullptr) {
      refuse(p, why);
      l->pending.erase(l->pending.begin() + i);
      continue;
    }
    i++;
  }
  // Hand out the first complete connection; expire stale partial ones.
  for (size_t i = 0; i < l->groups.size(); i++) {
    ConnGroup& g = l->groups[i];
    bool complete = g.ctrlFd >= 0;
    for (int fd : g.dataFds) complete &= fd >= 0;
    if (!complete) {
      if (now - g.start > socketTimeoutMs()) {
        WARN("NET/signlion: dropping incomplete connection (%zu data streams expected) after timeout",
             g.dataFds.size());
        dropGroup(&g);
        l->groups.erase(l->groups.begin() + i);
        i--;
      }
      continue;
    }
    RecvComm* c = newRecvComm();
    if (c == nullptr) {
      dropGroup(&g);
      l->groups.erase(l->groups.begin() + i);
      return ncclSystemError;
    }
    c->nsocks = (int)g.dataFds.size();
    c->chunkSize = g.ctrl.chunkSize;
    c->ctrlFd = g.ctrlFd;
    for (int s = 0; s < c->nsocks; s++) c->streams.emplace_back().fd = g.dataFds[s];
    uint64_t connId = g.connId;
    uint64_t peerInstance = g.ctrl.instance;
    l->groups.erase(l->groups.begin() + i);
    ncclResult_t res = startHelpers(c, (int)signlionParamNthreads());
    if (res != ncclSuccess) {
      destroyComm(c);
      return res;
    }
    establishCtrl(c, connId, peerInstance);
    INFO(kSubsysNet, "NET/signlion: accepted connection, %d streams, chunk %zu", c->nsocks, c->chunkSize);
    *recvComm = static_cast<CommHeader*>(c);
    return ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t socketCloseListen(void* listenComm) {
  if (listenComm == nullptr) return ncclSuccess;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l->magic == kCommMagic && l->kind == kCommListen, "closeListen", "listenComm", "%p is not a listen comm",
           listenComm);
  for (PendingConn& p : l->pending) closeFd(&p.fd);
  for (ConnGroup& g : l->groups) dropGroup(&g);
  for (int& fd : l->fds) closeFd(&fd);
  l->magic = 0;
  delete l;
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
