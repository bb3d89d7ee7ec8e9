// Every tunable of the socket transport, declared once. docs/PLUGIN.md has
// the table (name, default, meaning).
#pragma once

#include <cstdint>

#include "common/param.h"

namespace signlion {
namespace net {

// Interface filter in NCCL's syntax: "eth,ib" prefixes, "^docker" excludes,
// "=eth0" exact. Empty: every up interface but lo and docker*, lo as last resort.
SIGNLION_STRING_PARAM(SocketIfname, "SOCKET_IFNAME", "")
// Address family of the interfaces' addresses, as NCCL_SOCKET_FAMILY: "AF_INET"
// or "AF_INET6"; empty: whichever address an interface lists first.
SIGNLION_CHOICE_PARAM(SocketFamily, "SOCKET_FAMILY", "", "AF_INET,AF_INET6")
// Ports every listening socket of signlion may take, "LO-HI" (or one port):
// the bootstrap root, each rank's bootstrap listener, the socket and UCX
// transports' listeners. Empty: a port the kernel picks (its ephemeral range).
SIGNLION_STRING_PARAM(SocketPortRange, "SOCKET_PORT_RANGE", "")
// Data streams (TCP connections) per comm, besides the control stream; 0:
// from the link's speed (socketDeviceStreams, socket_device_table.h).
SIGNLION_PARAM(Nsocks, "NSOCKS", 0, 0, 64)
// Helper threads per comm serving the data streams (capped at NSOCKS).
SIGNLION_PARAM(Nthreads, "NTHREADS", 2, 1, 64)
// Longest wait, in ms, for a connection handshake or for progress on a
// transfer that has started; past it the call or test returns an error.
SIGNLION_PARAM(SocketTimeoutMs, "SOCKET_TIMEOUT", 30000, 1, INT32_MAX)
// SIGNLION_SOCKET_TIMEOUT in ms: what every bounded wait of both transports
// waits at most.
inline int64_t socketTimeoutMs() { return signlionParamSocketTimeoutMs(); }
// Bytes per chunk when a message is spread across the data streams.
SIGNLION_PARAM(SocketChunkSize, "SOCKET_CHUNKSIZE", 128 * 1024, 4096, int64_t{1} << 30)
// Messages up to this size travel inline on the control stream. 64 KiB, not
// 16: a 32 KiB message on a data stream took one more send/recv pair than
// inline (its header goes apart), 1.5x the plain ping-pong instead of ~1.05x
// (docs/dev/PLUGIN_INTERNALS.md, "Why medium messages cost what they cost"); NCCL's 128 KiB+ slices still spread.
SIGNLION_PARAM(SocketInline, "SOCKET_INLINE", 64 * 1024, 0, 1 << 20)
// Speed (Mbit/s) reported when sysfs has none (virtual interfaces, lo).
SIGNLION_PARAM(SocketDefaultSpeed, "SOCKET_DEFAULT_SPEED", 10000, 1, int64_t{1} << 30)
// Speed (Mbit/s) of every interface, in place of what sysfs says; 0: sysfs.
// For links whose rate is set elsewhere than the NIC (traffic shaping, a
// rate-limited virtual machine, a veth behind tbf): the speed picks the
// number of data streams.
SIGNLION_PARAM(SocketSpeed, "SOCKET_SPEED", 0, 0, int64_t{1} << 30)

}  // namespace net
}  // namespace signlion
