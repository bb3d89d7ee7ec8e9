#include "ucx/ucx_wire.h"

#include <cstring>

#include "common/checks.h"

namespace signlion {
namespace net {

ncclResult_t ucxParseHandle(const void* handle, UcxListenHandle* out) {
  UcxListenHandle& h = *out;
  memcpy(&h, handle, sizeof(h));  // NCCL's handle buffer has no alignment promise
  ARGCHECK(h.magic == kUcxHandleMagic, "connect", "handle", "bad magic 0x%x (not a signlion-ucx handle)", h.magic);
  ARGCHECK(h.version == kUcxWireVersion, "connect", "handle", "version %u, expected %u", h.version, kUcxWireVersion);
  ARGCHECK(h.addr.sa.sa_family == AF_INET || h.addr.sa.sa_family == AF_INET6, "connect", "handle", "address family %d",
           (int)h.addr.sa.sa_family);
  return ncclSuccess;
}

const char* ucxHelloProblem(const UcxHello& h, uint64_t secret) {
  if (h.magic != kUcxHandleMagic) return "bad magic";
  if (h.version != kUcxWireVersion) return "wrong version";
  if (h.secret != secret) return "wrong secret";
  return nullptr;
}

const char* ucxReplyProblem(const UcxReply& r) {
  if (r.magic != kUcxHandleMagic) return "bad magic";
  if (r.version != kUcxWireVersion) return "wrong version";
  if (r.addrLen == 0 || r.addrLen > kUcxMaxWorkerAddress) return "worker address length out of range";
  if ((r.commId & kUcxSetupIdBit) != 0) return "comm id out of range";
  return nullptr;
}

}  // namespace net
}  // namespace signlion
