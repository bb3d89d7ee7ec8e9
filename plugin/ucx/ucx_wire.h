// The UCX transport's setup formats (ucx_transport.h): the listen handle, the
// connector's hello and the listener's reply on the setup connection, and the
// pure checks of what a peer sent (bytes in, a verdict out, no I/O), called
// by ucx_connect.cc and by the fuzz targets (tests/fuzz/). Needs no UCX.
// The worker address that follows a reply is UCX's own format, handed to
// ucp_ep_create as it came; only its length is ours to bound.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"
#include "net/socket_devices.h"

namespace signlion {
namespace net {

constexpr uint32_t kUcxHandleMagic = 0x534c5548;    // "SLUH": a UCX handle (the socket one is "SLNH")
constexpr uint16_t kUcxWireVersion = 2;             // 2: the reply carries the recv comm's id
constexpr uint32_t kUcxMaxWorkerAddress = 1 << 16;  // refuse larger replies
constexpr size_t kUcxHandleBytes = 128;             // NCCL_NET_HANDLE_MAXSIZE
// Comm ids use 31 bits; with this bit set the high half of a UCP tag marks a
// comm's two setup messages, which no ncclNet tag can then match.
constexpr uint32_t kUcxSetupIdBit = 1u << 31;

// Magic, version, secret and the setup address (family, port, IPv4 address)
// sit at the socket handle's offsets (0, 4, 8, 24, 26, 28), so tools that
// read one read the other.
struct UcxListenHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t secret;
  uint64_t reserved2;  // the socket handle's instance id
  SocketAddress addr;
  void* connecting;  // connector-private: the half-made send comm
};
static_assert(sizeof(UcxListenHandle) <= kUcxHandleBytes, "handle must fit");
static_assert(offsetof(UcxListenHandle, addr) == 24, "address where the socket handle has its first one");

struct UcxHello {  // connector -> listener
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t secret;
};
struct UcxReply {  // listener -> connector, then addrLen bytes of worker address
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t addrLen;
  uint32_t commId;  // the recv comm's id: the high 32 bits of every UCP tag sent to it
};

// Reads kUcxHandleBytes at `handle` (no alignment needed) into *out and
// checks magic, version and address family: ncclInvalidArgument with a WARN
// naming "connect" and "handle" otherwise.
ncclResult_t ucxParseHandle(const void* handle, UcxListenHandle* out);
// Why a listener under `secret` drops a connection that said `h`, or nullptr.
const char* ucxHelloProblem(const UcxHello& h, uint64_t secret);
// Why a connector refuses the listener's reply `r`, or nullptr: its worker
// address must be 1..kUcxMaxWorkerAddress bytes and its comm id 31 bits.
const char* ucxReplyProblem(const UcxReply& r);

}  // namespace net
}  // namespace signlion
