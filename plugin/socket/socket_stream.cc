#include "socket/socket_stream.h"

#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/debug.h"

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

bool listenOnFreePort(const SocketAddress& addr, int backlog, int* fd, SocketAddress* bound) {
  SocketAddress a = addr;
  if (a.sa.sa_family == AF_INET)
    a.sin.sin_port = 0;
  else
    a.sin6.sin6_port = 0;
  *fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) {
    WARN("NET/signlion: socket() failed: %s", strerror(errno));
    return false;
  }
  socklen_t len = addrLen(a);
  memset(bound, 0, sizeof(*bound));
  if (bind(*fd, &a.sa, len) != 0 || listen(*fd, backlog) != 0 || getsockname(*fd, &bound->sa, &len) != 0) {
    WARN("NET/signlion: cannot listen on %s: %s", addressString(a).c_str(), strerror(errno));
    closeFd(fd);
    return false;
  }
  return true;
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
