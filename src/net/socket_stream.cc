#include "net/socket_stream.h"

#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/debug.h"
#include "net/socket_port_range.h"

namespace signlion {
namespace net {

socklen_t addrLen(const SocketAddress& a) {
  return a.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

void closeFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

void tuneStream(int fd, int trafficClass, int family) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (trafficClass >= 0) {
    if (family == AF_INET)
      (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &trafficClass, sizeof(trafficClass));
    else
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &trafficClass, sizeof(trafficClass));
  }
}

void delayAcks(int fd, int64_t* lastMs) {
  int64_t now = nowMs();
  if (now == *lastMs) return;
  *lastMs = now;
  int zero = 0;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof(zero));
}

namespace {

void setPort(SocketAddress* a, int port) {
  if (a->sa.sa_family == AF_INET)
    a->sin.sin_port = htons(static_cast<uint16_t>(port));
  else
    a->sin6.sin6_port = htons(static_cast<uint16_t>(port));
}

// A listening socket on a, port included (0: the kernel picks one). reuse sets
// SO_REUSEADDR, so that a fixed port held only by connections in TIME_WAIT (a
// job that just ended) can listen again. On failure returns false with errno
// set and *fd closed.
bool listenOn(const SocketAddress& a, int backlog, bool reuse, int* fd, SocketAddress* bound) {
  *fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return false;
  int one = 1;
  socklen_t len = addrLen(a);
  memset(bound, 0, sizeof(*bound));
  if ((!reuse || setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0) && bind(*fd, &a.sa, len) == 0 &&
      listen(*fd, backlog) == 0 && getsockname(*fd, &bound->sa, &len) == 0)
    return true;
  int err = errno;
  closeFd(fd);
  errno = err;
  return false;
}

}  // namespace

bool listenOnFreePort(const SocketAddress& addr, int backlog, int* fd, SocketAddress* bound) {
  *fd = -1;
  PortRange range;
  if (!configuredPortRange(&range)) return false;
  SocketAddress a = addr;
  if (range.lo == 0) {
    setPort(&a, 0);
    if (listenOn(a, backlog, false, fd, bound)) return true;
    WARN("NET/signlion: cannot listen on %s: %s", addressString(a).c_str(), strerror(errno));
    return false;
  }
  // The lowest free port of the range: ranks of one node racing for a port
  // are ordered by bind(), and the loser moves on. listen() can report the
  // clash too: two SO_REUSEADDR sockets may bind one port until one listens.
  for (int port = range.lo; port <= range.hi; port++) {
    setPort(&a, port);
    if (listenOn(a, backlog, true, fd, bound)) return true;
    if (errno != EADDRINUSE) {
      WARN("NET/signlion: cannot listen on %s: %s", addressString(a).c_str(), strerror(errno));
      return false;
    }
  }
  setPort(&a, 0);
  WARN("NET/signlion: cannot listen on %s: every port of SIGNLION_SOCKET_PORT_RANGE=%d-%d is in use "
       "(each rank listens on one port for its bootstrap, rank 0 one more for the root, and one per "
       "transport listener: widen the range)",
       addressString(a).c_str(), range.lo, range.hi);
  return false;
}

bool startConnect(const SocketAddress& to, int trafficClass, int* fd, const SocketAddress* from) {
  *fd = socket(to.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return false;
  tuneStream(*fd, trafficClass, to.sa.sa_family);
  if (from != nullptr) {
    SocketAddress local = *from;
    if (local.sa.sa_family == AF_INET)
      local.sin.sin_port = 0;
    else
      local.sin6.sin6_port = 0;
    if (bind(*fd, &local.sa, addrLen(local)) != 0) {
      int err = errno;
      closeFd(fd);
      errno = err;
      return false;
    }
  }
  if (connect(*fd, &to.sa, addrLen(to)) == 0 || errno == EINPROGRESS) return true;
  closeFd(fd);
  return false;
}

}  // namespace net
}  // namespace signlion
