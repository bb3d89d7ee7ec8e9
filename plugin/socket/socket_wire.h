// The socket transport's wire formats (socket_transport.h) and the pure
// decoding of what a peer sent: the listen handle (which travels through the
// application's own out-of-band exchange), the hello on each new stream, and
// the headers on the control stream. Bytes in, a struct or a reason out; no
// I/O. The transport (socket_connect.cc and the control streams) and the
// fuzz targets (tests/fuzz/) call the same functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"
#include "net/socket_devices.h"
#include "socket/socket_transport.h"

namespace signlion {
namespace net {

constexpr uint32_t kSocketHandleMagic = 0x534c4e48;  // "SLNH": the handle and every hello
// 2: instance ids, control-socket pairing; 3: a handle lists 1..4 interfaces;
// 4: 8-byte message headers (SocketWireMsg)
constexpr uint16_t kSocketWireVersion = 4;
// SIGNLION_SOCKET_INLINE's cap: no sender inlines more, so a larger inline
// header is a protocol error (a receiver would size an early buffer by it).
constexpr size_t kSocketMaxInline = 1 << 20;
constexpr size_t kSocketHandleBytes = 128;  // NCCL_NET_HANDLE_MAXSIZE

// One listening address in a handle, compact (a SocketAddress is 28 bytes).
struct SocketHandleNic {
  uint16_t family;  // AF_INET or AF_INET6
  uint16_t port;    // network order
  uint8_t ip[16];   // IPv4 in the first 4 bytes
};

// What listen() writes into NCCL's handle: one address per interface of the
// device (a fused device has several). The tail after `nics` is private to
// the connecting side (NCCL hands the same handle back on every connect call).
struct SocketListenHandle {
  uint32_t magic;
  uint16_t version;
  uint8_t nnics;
  uint8_t reserved;
  uint64_t secret;
  uint64_t instance;  // the listener's localInstance(): who the connector reaches
  SocketHandleNic nics[kSocketMaxFusedNics];
  // connector-private
  void* connecting;
};
static_assert(sizeof(SocketListenHandle) <= kSocketHandleBytes, "handle must fit NCCL_NET_HANDLE_MAXSIZE");

SocketHandleNic toHandleNic(const SocketAddress& a);
// False for a family we do not speak.
bool fromHandleNic(const SocketHandleNic& n, SocketAddress* a);

// A handle as connect() reads it: the fields it needs, its addresses decoded.
struct SocketParsedHandle {
  SocketListenHandle raw;  // as copied (connecting included)
  int nnics = 0;
  SocketAddress remote[kSocketMaxFusedNics];
};
// Reads kSocketHandleBytes at `handle` (no alignment needed) and checks
// magic, version, the interface count and every address family:
// ncclInvalidArgument with a WARN naming "connect" and "handle" otherwise.
ncclResult_t socketParseHandle(const void* handle, SocketParsedHandle* out);

// First bytes on every stream of a new connection.
struct SocketHello {
  uint32_t magic;
  uint16_t version;
  uint8_t kind;   // 0: control, 1: data
  uint8_t index;  // data stream index
  uint32_t nsocks;
  uint32_t chunkSize;
  uint64_t secret;
  uint64_t connId;
  uint64_t instance;  // the connector's localInstance()
};
static_assert(sizeof(SocketHello) == 40, "hello layout");

// Why a listener under `secret` drops a stream that said `he`, or nullptr.
// The chunk size must lie in what a sender may pick ([4096, 2^30]).
const char* socketHelloProblem(const SocketHello& he, uint64_t secret);

// One per message on the control stream; also the two pairing headers
// (socket_pairing.h), which are no message: no tag, no sequence number. This
// is the decoded form; on the wire (SocketWireMsg) a message header is 8
// bytes and a pairing header 16.
struct SocketMsgHeader {
  int32_t tag;
  uint32_t flags;  // kMsgInline, or one of kMsgPair / kMsgSwitch
  uint64_t size;   // kMsgPair: connId of the receiver's process's send comm invited to move here
};
constexpr uint32_t kMsgInline = 1;
constexpr uint32_t kMsgPair = 2;    // offer: the named send comm may move onto this connection
constexpr uint32_t kMsgSwitch = 4;  // marker: the sender moved; read the pinned connection from here on

// A header on the wire: the tag, then one word. A message's word is its size
// (at most kSocketMaxMessage = 2^30, 31 bits) with kWireInline set when the
// payload follows inline (at most kSocketMaxInline, so bit 30 is clear). A
// pairing header sets both top bits (kWireControl), its flags in the low
// bits, and is followed by 8 bytes: the offer's connId (0 for the marker).
// Eight bytes per message rather than 16: on a small call (a sign all-reduce
// of a few thousand parameters sends messages of a few hundred bytes) the
// framing is a visible part of what goes on the wire.
struct SocketWireMsg {
  int32_t tag;
  uint32_t word;
};
static_assert(sizeof(SocketWireMsg) == 8, "message header layout");
constexpr uint32_t kWireInline = 1u << 31;
constexpr uint32_t kWireControl = 3u << 30;
constexpr size_t kWireMsgBytes = sizeof(SocketWireMsg);
constexpr size_t kWirePairBytes = sizeof(SocketWireMsg) + sizeof(uint64_t);
static_assert(kSocketMaxMessage < kWireInline && kSocketMaxInline < (1u << 30), "sizes fit the header word");

// Writes h's wire form into out (room for kWirePairBytes); returns its length.
size_t encodeHeader(const SocketMsgHeader& h, char* out);

// What the bytes at the head of a control stream hold.
enum class CtrlHeader {
  kNeedMore,   // not a whole header yet
  kMessage,    // a message header (inline or spread)
  kPair,       // a pairing offer (size: the connId it names)
  kSwitch,     // the switch marker
  kMalformed,  // a protocol error (*why says which)
};
// Decodes the header at `in` (avail bytes there): *out and *len (its wire
// length) are set for every kind but kNeedMore; *why for kMalformed. A
// message larger than kSocketMaxMessage, an inline one larger than
// kSocketMaxInline and a pairing header with a tag, unknown flags or a
// marker carrying a connId are malformed.
CtrlHeader parseCtrlHeader(const char* in, size_t avail, SocketMsgHeader* out, size_t* len, const char** why);

}  // namespace net
}  // namespace signlion
