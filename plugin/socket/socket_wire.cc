#include "socket/socket_wire.h"

#include <cstring>

#include "common/checks.h"

namespace signlion {
namespace net {

SocketHandleNic toHandleNic(const SocketAddress& a) {
  SocketHandleNic n{};
  n.family = a.sa.sa_family;
  if (a.sa.sa_family == AF_INET) {
    n.port = a.sin.sin_port;
    memcpy(n.ip, &a.sin.sin_addr, 4);
  } else {
    n.port = a.sin6.sin6_port;
    memcpy(n.ip, &a.sin6.sin6_addr, 16);
  }
  return n;
}

bool fromHandleNic(const SocketHandleNic& n, SocketAddress* a) {
  memset(a, 0, sizeof(*a));
  if (n.family == AF_INET) {
    a->sin.sin_family = AF_INET;
    a->sin.sin_port = n.port;
    memcpy(&a->sin.sin_addr, n.ip, 4);
    return true;
  }
  if (n.family == AF_INET6) {
    a->sin6.sin6_family = AF_INET6;
    a->sin6.sin6_port = n.port;
    memcpy(&a->sin6.sin6_addr, n.ip, 16);
    return true;
  }
  return false;
}

ncclResult_t socketParseHandle(const void* handle, SocketParsedHandle* out) {
  // NCCL's handle buffer has no alignment promise: read it by copy.
  SocketListenHandle& h = out->raw;
  memcpy(&h, handle, sizeof(h));
  ARGCHECK(h.magic == kSocketHandleMagic, "connect", "handle", "bad magic 0x%x (not a signlion handle)", h.magic);
  ARGCHECK(h.version == kSocketWireVersion, "connect", "handle", "version %u, expected %u", h.version,
           kSocketWireVersion);
  ARGCHECK(h.nnics >= 1 && h.nnics <= kSocketMaxFusedNics, "connect", "handle", "%u interfaces", h.nnics);
  for (int i = 0; i < h.nnics; i++)
    ARGCHECK(fromHandleNic(h.nics[i], &out->remote[i]), "connect", "handle", "address family %d of interface %d",
             (int)h.nics[i].family, i);
  out->nnics = h.nnics;
  return ncclSuccess;
}

const char* socketHelloProblem(const SocketHello& he, uint64_t secret) {
  if (he.magic != kSocketHandleMagic) return "bad magic";
  if (he.version != kSocketWireVersion) return "wrong protocol version";
  if (he.secret != secret) return "wrong secret";
  if (he.kind > 1 || he.nsocks < 1 || he.nsocks > (uint32_t)kSocketMaxStreams || he.index >= he.nsocks ||
      he.chunkSize < 4096 || he.chunkSize > kSocketMaxMessage)
    return "malformed hello";
  return nullptr;
}

size_t encodeHeader(const SocketMsgHeader& h, char* out) {
  const bool pairing = (h.flags & (kMsgPair | kMsgSwitch)) != 0;
  SocketWireMsg w{h.tag, pairing ? kWireControl | h.flags
                                 : (uint32_t)h.size | ((h.flags & kMsgInline) != 0 ? kWireInline : 0u)};
  memcpy(out, &w, sizeof(w));
  if (!pairing) return kWireMsgBytes;
  memcpy(out + sizeof(w), &h.size, sizeof(h.size));
  return kWirePairBytes;
}

CtrlHeader parseCtrlHeader(const char* in, size_t avail, SocketMsgHeader* out, size_t* len, const char** why) {
  if (avail < kWireMsgBytes) return CtrlHeader::kNeedMore;
  SocketWireMsg w;
  memcpy(&w, in, sizeof(w));
  SocketMsgHeader h{w.tag, 0, 0};
  if ((w.word & kWireControl) == kWireControl) {
    if (avail < kWirePairBytes) return CtrlHeader::kNeedMore;
    h.flags = w.word & ~kWireControl;
    memcpy(&h.size, in + sizeof(w), sizeof(h.size));
    *out = h;
    *len = kWirePairBytes;
    if (h.tag != 0 || (h.flags != kMsgPair && h.flags != kMsgSwitch) || (h.flags == kMsgSwitch && h.size != 0)) {
      *why = "malformed pairing header";
      return CtrlHeader::kMalformed;
    }
    return h.flags == kMsgPair ? CtrlHeader::kPair : CtrlHeader::kSwitch;
  }
  if (w.word & kWireInline) {
    h.flags = kMsgInline;
    h.size = w.word & ~kWireInline;
  } else {
    h.size = w.word;
  }
  *out = h;
  *len = kWireMsgBytes;
  if ((h.flags & kMsgInline) != 0 && h.size > kSocketMaxInline) {
    *why = "inline message larger than any sender inlines";
    return CtrlHeader::kMalformed;
  }
  if (h.size > kSocketMaxMessage) {
    *why = "message larger than maxP2pBytes";
    return CtrlHeader::kMalformed;
  }
  return CtrlHeader::kMessage;
}

}  // namespace net
}  // namespace signlion
