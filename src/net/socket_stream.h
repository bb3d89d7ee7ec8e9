// TCP stream primitives shared by the socket transport and signlion's
// bootstrap (src/host/bootstrap.cc): address length, non-blocking listen and
// connect, close. Everything here is non-blocking and CLOEXEC.
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "net/socket_devices.h"

namespace signlion {
namespace net {

socklen_t addrLen(const SocketAddress& a);

// Closes *fd if open and marks it closed.
void closeFd(int* fd);

// TCP_NODELAY, and the IP TOS / IPv6 traffic class when trafficClass >= 0.
void tuneStream(int fd, int trafficClass, int family);

// For a socket that only receives (a recv comm's control stream): every ACK
// it sends is a packet of its own, never carried by a reply, and by default
// Linux sends it from recv() itself, ahead of the reply the caller is about
// to send. TCP_QUICKACK=0 puts the socket in "ping-pong" mode, which delays
// ACKs; the kernel still ACKs every second segment shorter than 536 bytes
// from inside recv() (ICSK_ACK_PUSHED2), and every two full segments from the
// softirq that receives them, and it leaves the mode when a delayed-ACK timer
// fires, hence the re-arm, at most once per millisecond (*lastMs: the last
// time, -1 before the first). docs/PERFORMANCE.md has the measurements.
void delayAcks(int fd, int64_t* lastMs);

// A non-blocking listening socket on addr with its port replaced by a free
// one: the lowest free port of SIGNLION_SOCKET_PORT_RANGE when it is set, else
// one the kernel picks (port 0). *bound gets the address with that port.
// WARNs and returns false on failure (a malformed or exhausted range included).
bool listenOnFreePort(const SocketAddress& addr, int backlog, int* fd, SocketAddress* bound);

// Non-blocking connect; *fd is the new socket. from (may be null): the local
// address to send from (port 0), so the stream leaves by that interface.
// Returns false on an immediate failure.
bool startConnect(const SocketAddress& to, int trafficClass, int* fd, const SocketAddress* from = nullptr);

}  // namespace net
}  // namespace signlion
