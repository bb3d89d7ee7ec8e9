// The listen handle, connect and accept of the UCX transport (ucx_comm.h):
// the setup connection the handle points at (hello, reply with the
// receiving worker's address), the sender's endpoint made from it, and the
// listener's comms handed out once their endpoint is confirmed.
#include "ucx/ucx_comm.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>

#include "common/checks.h"
#include "common/clock.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace ucx {

namespace {

void epError(void* arg, ucp_ep_h, ucs_status_t status) {
  SendComm* c = static_cast<SendComm*>(arg);
  if (c->epStatus == UCS_OK) c->epStatus = status;
}

bool makeWorkerReply(Comm* c, std::vector<char>* out) {
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  ucs_status_t s = ucp_worker_get_address(c->worker, &addr, &len);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_worker_get_address: %s", ucsStr(s));
    return false;
  }
  Reply r{};
  r.magic = kHandleMagic;
  r.version = kWireVersion;
  r.addrLen = (uint32_t)len;
  r.commId = c->commId;
  out->resize(sizeof(r) + len);
  memcpy(out->data(), &r, sizeof(r));
  memcpy(out->data() + sizeof(r), addr, len);
  ucp_worker_release_address(c->worker, addr);
  return true;
}

// Non-blocking read/write of a fixed span; returns -1 on error or EOF, else
// whether the span is complete.
int moveBytes(int fd, bool write, char* buf, size_t len, size_t* off) {
  while (*off < len) {
    ssize_t n = write ? send(fd, buf + *off, len - *off, MSG_DONTWAIT | MSG_NOSIGNAL)
                      : recv(fd, buf + *off, len - *off, MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n == 0) return -1;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;
  }
  return 1;
}

ncclResult_t connectSteps(SendComm* c, bool* ready);

// Connect-side handshake; returns ncclSuccess with *ready set once connect()
// may return the comm: its endpoint made and confirmed (state 5). Timed out
// when the listener's part is still missing after the timeout.
ncclResult_t progressConnect(SendComm* c, bool* ready) {
  bool late = monotonicMs() - c->startMs > socketTimeoutMs();
  NCCLCHECK(connectSteps(c, ready));
  if (late && !*ready) {
    WARN("NET/signlion-ucx: connect: no answer from the listener within %lld ms", (long long)socketTimeoutMs());
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t connectSteps(SendComm* c, bool* ready) {
  *ready = false;
  if (c->connState == 0) {
    pollfd p{c->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return ncclSuccess;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET) {
      // Nobody listens yet (or any more): retry until the timeout, as the
      // socket transport does; the caller sees no comm meanwhile.
      closeFd(&c->fd);
      if (!startConnect(c->listener, c->trafficClass, &c->fd)) {
        WARN("NET/signlion-ucx: connect to %s failed: %s", addressString(c->listener).c_str(), strerror(errno));
        return ncclSystemError;
      }
      return ncclSuccess;
    }
    if (err != 0) {
      WARN("NET/signlion-ucx: connect: %s", strerror(err));
      return ncclRemoteError;
    }
    c->connState = 1;
    c->off = 0;
  }
  if (c->connState == 1) {
    int r = moveBytes(c->fd, true, (char*)&c->hello, sizeof(c->hello), &c->off);
    if (r < 0) return peerLost(c, "the listener closed the connection during the hello");
    if (r == 0) return ncclSuccess;
    c->connState = 2;
    c->off = 0;
    // From here on the receiver may hold this comm and watch its socket for
    // silence: heartbeats start now, not at the first isend (a sender may
    // connect long before it sends; removed in destroyComm).
    heartbeatAdd(c->fd);
  }
  if (c->connState == 4) return confirmEndpoint(c, ready);
  if (c->connState == 2) {
    int r = moveBytes(c->fd, false, (char*)&c->reply, sizeof(c->reply), &c->off);
    if (r < 0) return peerLost(c, "the listener refused the connection (wrong handle or secret?)");
    if (r == 0) return ncclSuccess;
    if (const char* why = ucxReplyProblem(c->reply)) {
      WARN("NET/signlion-ucx: connect: malformed reply: %s (magic 0x%x, version %u, address of %u bytes)", why,
           c->reply.magic, c->reply.version, c->reply.addrLen);
      return ncclRemoteError;
    }
    c->peerAddr.resize(c->reply.addrLen);
    c->commId = c->reply.commId;
    c->connState = 3;
    c->off = 0;
  }
  int r = moveBytes(c->fd, false, c->peerAddr.data(), c->peerAddr.size(), &c->off);
  if (r < 0) return peerLost(c, "the listener closed the connection during the reply");
  if (r == 0) return ncclSuccess;
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof(ep));
  ep.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(c->peerAddr.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // a vanished peer fails our requests instead of hanging them
  ep.err_handler.cb = epError;
  ep.err_handler.arg = c;
  ucs_status_t s = ucp_ep_create(c->worker, &ep, &c->ep);
  if (s == UCS_ERR_UNREACHABLE) {
    // Shared-memory transports (UCX_TLS=sm) cannot report peer failures;
    // the out-of-band socket still does (ucx_liveness.h).
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    c->epNoErrHandling = true;
    s = ucp_ep_create(c->worker, &ep, &c->ep);
  }
  c->oob.start(c->fd, monotonicMs());  // only heartbeats and the bye follow on the socket
  if (s != UCS_OK && c->oob.settle(std::min<int64_t>(socketTimeoutMs(), 1000)) == OobWatch::kClosed) {
    // The receiver closed (its comm is gone) before we reached it: a
    // comm without an endpoint whose sends complete discarded.
    c->ep = nullptr;
    s = UCS_OK;
  }
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_ep_create: %s", ucsStr(s));
    return ncclSystemError;
  }
  std::vector<char>().swap(c->peerAddr);
  c->connState = 4;
  return confirmEndpoint(c, ready);
}

}  // namespace

}  // namespace ucx

using namespace ucx;

// ---- Connection setup ----------------------------------------------------------

ncclResult_t ucxListen(int dev, void* handle, void** listenComm) {
  ARGCHECK(handle != nullptr, "listen", "handle", "NULL");
  ARGCHECK(listenComm != nullptr, "listen", "listenComm", "NULL");
  *listenComm = nullptr;
  SocketAddress addr;
  ARGCHECK(deviceAddress(dev, &addr), "listen", "dev", "%d is not a device", dev);
  std::unique_ptr<ListenComm> l(new ListenComm());
  l->magic = kCommMagic;
  l->kind = kCommListen;
  if (!listenOnFreePort(addr, 1024, &l->fd, &l->addr)) return ncclSystemError;
  if (getrandom(&l->secret, sizeof(l->secret), 0) != (ssize_t)sizeof(l->secret)) {
    WARN("NET/signlion-ucx: getrandom failed: %s", strerror(errno));
    closeFd(&l->fd);
    return ncclSystemError;
  }
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kWireVersion;
  h.secret = l->secret;
  h.addr = l->addr;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  INFO(kSubsysNet, "NET/signlion-ucx: listening on %s", addressString(l->addr).c_str());
  *listenComm = static_cast<CommHeader*>(l.release());
  return ncclSuccess;
}

ncclResult_t ucxConnect(int dev, int trafficClass, void* handle, void** sendComm, UcxPendingConnects* pending) {
  ARGCHECK(handle != nullptr, "connect", "handle", "NULL");
  ARGCHECK(sendComm != nullptr, "connect", "sendComm", "NULL");
  *sendComm = nullptr;
  ListenHandle h;
  NCCLCHECK(ucxParseHandle(handle, &h));
  SocketAddress unused;
  ARGCHECK(deviceAddress(dev, &unused), "connect", "dev", "%d is not a device", dev);
  auto setConnecting = [handle](SendComm* comm) {
    void* p = comm;
    memcpy(static_cast<char*>(handle) + offsetof(ListenHandle, connecting), &p, sizeof(p));
  };
  SendComm* c = static_cast<SendComm*>(h.connecting);
  ARGCHECK(c == nullptr || connectsInProgress().contains(c), "connect", "handle",
           "its connector-private bytes hold %p, no connect of this process in progress (a handle whose connection "
           "finished, or one from a peer that did not come unchanged from its listen)",
           h.connecting);
  if (c == nullptr) {
    c = new SendComm();
    c->magic = kCommMagic;
    c->kind = kCommSend;
    c->isSend = true;
    c->startMs = monotonicMs();
    c->hello.magic = kHandleMagic;
    c->hello.version = kWireVersion;
    c->hello.secret = h.secret;
    bool attached;
    {
      std::lock_guard<std::mutex> lk(workerLock());
      attached = attachWorker(c);
    }
    if (!attached) {
      c->magic = 0;
      delete c;
      return ncclSystemError;
    }
    c->listener = h.addr;
    c->trafficClass = trafficClass;
    if (!startConnect(h.addr, trafficClass, &c->fd)) {
      WARN("NET/signlion-ucx: connect to %s failed: %s", addressString(h.addr).c_str(), strerror(errno));
      destroyCommLocked(c);
      return ncclSystemError;
    }
    if (pending != nullptr) {
      std::lock_guard<std::mutex> lk(pending->mu);
      pending->comms.insert(c);
      c->pending = pending;
    }
    setConnecting(c);
    connectsInProgress().add(c);
  }
  ARGCHECK(c->magic == kCommMagic && c->kind == kCommSend && c->connState < 5, "connect", "handle",
           "its connection already finished (reuse of a handle)");
  bool ready = false;
  ncclResult_t res;
  {
    std::lock_guard<std::mutex> lk(workerLock());  // the last step makes the endpoint
    res = progressConnect(c, &ready);
  }
  if (res != ncclSuccess || ready) {
    setConnecting(nullptr);
    connectsInProgress().remove(c);
    if (c->pending != nullptr) {
      std::lock_guard<std::mutex> lk(c->pending->mu);
      c->pending->comms.erase(c);
      c->pending = nullptr;
    }
  }
  if (res != ncclSuccess) {
    destroyCommLocked(c);
    return res;
  }
  if (ready) *sendComm = static_cast<CommHeader*>(c);
  return ncclSuccess;
}

void ucxAbandonConnects(UcxPendingConnects* pending) {
  std::lock_guard<std::mutex> lk(pending->mu);
  for (void* p : pending->comms) {
    SendComm* c = static_cast<SendComm*>(p);
    c->pending = nullptr;
    destroyCommLocked(c);
  }
  pending->comms.clear();
}

ncclResult_t ucxAccept(void* listenComm, void** recvComm) {
  ARGCHECK(recvComm != nullptr, "accept", "recvComm", "NULL");
  *recvComm = nullptr;
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "accept", "listenComm",
           "%p is not a listen comm", listenComm);
  while (l->incoming.size() < kMaxPendingAccepts) {
    int fd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    tuneStream(fd, -1, l->addr.sa.sa_family);
    Incoming in;
    in.fd = fd;
    in.startMs = monotonicMs();
    l->incoming.push_back(std::move(in));
  }
  int64_t now = monotonicMs();
  for (size_t i = 0; i < l->incoming.size();) {
    Incoming& in = l->incoming[i];
    const char* why = nullptr;
    bool ready = false;
    if (in.comm == nullptr) {
      int r = moveBytes(in.fd, false, (char*)&in.hello, sizeof(in.hello), &in.off);
      if (r < 0)
        why = "closed before its hello";
      else if (r == 0 && now - in.startMs > socketTimeoutMs())
        why = "sent no hello in time";
      else if (r > 0) {
        why = ucxHelloProblem(in.hello, l->secret);
        if (why == nullptr) {
          Comm* c = new Comm();
          c->magic = kCommMagic;
          c->kind = kCommRecv;
          bool made;
          {
            std::lock_guard<std::mutex> lk(workerLock());
            made = attachWorker(c) && makeWorkerReply(c, &in.out);
          }
          if (!made) {
            destroyCommLocked(c);
            return ncclSystemError;
          }
          in.comm = c;
          in.off = 0;
        }
      }
    }
    if (why == nullptr && in.comm != nullptr && !in.replied) {
      int r = moveBytes(in.fd, true, in.out.data(), in.out.size(), &in.off);
      if (r < 0)
        why = "closed during our reply";
      else if (r == 0 && now - in.startMs > socketTimeoutMs())
        why = "took no reply in time";
      else if (r > 0) {
        // The connector makes its endpoint now; the comm is handed out once
        // it is confirmed (confirmEndpoint says why).
        in.replied = true;
        in.comm->oob.start(in.fd, now);
        std::lock_guard<std::mutex> lk(workerLock());
        postSetupReceives(in.comm);
      }
    }
    if (why == nullptr && in.replied) {
      // The connector's connect() returns once its last setup message
      // (step 3) is out locally, and its bye or death shows on this socket
      // only after that: it may close at once, and its comm then exists.
      // So the socket is read first and the worker progressed after, and a
      // connector found gone gets its setup messages drained rather than
      // refused on sight: over shared memory the message is in our FIFO
      // before the bye is written; over TCP it was in the connector's
      // kernel before, but travels on another connection than the bye, so
      // it may still be on the way (loopback's backlog, a retransmission):
      // it gets kSetupGraceMs after the bye. Without step 1 matched (our
      // receive 0) its connect() cannot have returned: refused at once.
      OobWatch::State st = in.comm->oob.poll(now);
      int got;
      {
        std::lock_guard<std::mutex> lk(workerLock());
        got = setupReceived(in.comm, st != OobWatch::kAlive);
      }
      bool gone = got == 0 && st != OobWatch::kAlive;
      if (gone && in.goneMs < 0) in.goneMs = now;
      if (got < 0)
        why = "its endpoint's setup messages failed";
      else if (gone && !in.comm->setup[0].done)
        why = "closed before it confirmed its endpoint";
      else if (gone) {
        if (now - in.goneMs > std::min<int64_t>(socketTimeoutMs(), kSetupGraceMs))
          why = "closed, and its last setup message never came";  // else drained again at the next call
      } else if (got == 0 && now - in.startMs > socketTimeoutMs())
        why = "did not confirm its endpoint in time";
      ready = got > 0;
    }
    if (why != nullptr) {
      WARN("NET/signlion-ucx: accept: refused a connection on %s: %s", addressString(l->addr).c_str(), why);
      if (in.comm != nullptr) destroyCommLocked(in.comm);
      closeFd(&in.fd);
      l->incoming.erase(l->incoming.begin() + i);
      continue;
    }
    if (ready) {
      Comm* c = in.comm;
      c->fd = in.fd;  // its OobWatch reads it since the reply
      heartbeatAdd(c->fd);
      l->incoming.erase(l->incoming.begin() + i);
      *recvComm = static_cast<CommHeader*>(c);
      return ncclSuccess;
    }
    i++;
  }
  return ncclSuccess;
}

ncclResult_t ucxCloseListen(void* listenComm) {
  ListenComm* l = static_cast<ListenComm*>(static_cast<CommHeader*>(listenComm));
  ARGCHECK(l != nullptr && l->magic == kCommMagic && l->kind == kCommListen, "closeListen", "listenComm",
           "%p is not a listen comm", listenComm);
  for (Incoming& in : l->incoming) {
    if (in.comm != nullptr) destroyCommLocked(in.comm);
    closeFd(&in.fd);
  }
  closeFd(&l->fd);
  l->magic = 0;
  delete l;
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
