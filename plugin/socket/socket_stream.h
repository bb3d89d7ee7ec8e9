// TCP stream primitives shared by the socket transport and signlion's
// bootstrap (src/host/bootstrap.cc): address length, non-blocking listen and
// connect, close. Everything here is non-blocking and CLOEXEC.
#pragma once

#include <sys/socket.h>

#include "socket/socket_devices.h"

namespace signlion {
namespace net {

socklen_t addrLen(const SocketAddress& a);

// Closes *fd if open and marks it closed.
void closeFd(int* fd);

// TCP_NODELAY, and the IP TOS / IPv6 traffic class when trafficClass >= 0.
void tuneStream(int fd, int trafficClass, int family);

// A non-blocking listening socket on addr with its port replaced by 0; *bound
// gets the address with the port the kernel chose. WARNs and returns false on failure.
bool listenOnFreePort(const SocketAddress& addr, int backlog, int* fd, SocketAddress* bound);

// Non-blocking connect; *fd is the new socket. Returns false on an immediate failure.
bool startConnect(const SocketAddress& to, int trafficClass, int* fd);

}  // namespace net
}  // namespace signlion
