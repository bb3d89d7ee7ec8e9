#include "host/bootstrap_wire.h"

#include <cstring>

#include "common/checks.h"

namespace signlion {
namespace host {

bool bootstrapAddressUsable(const net::SocketAddress& a) {
  return a.sa.sa_family == AF_INET || a.sa.sa_family == AF_INET6;
}

ncclResult_t bootstrapParseId(const ncclSignUniqueId& id, const char* caller, BootstrapId* out) {
  BootstrapIdWire w;
  memcpy(&w, id.internal, sizeof(w));
  ARGCHECK(w.magic == kBootstrapIdMagic, caller, "uniqueId", "bad magic 0x%x: not made by ncclSignGetUniqueId",
           w.magic);
  ARGCHECK(w.version == kBootstrapWireVersion, caller, "uniqueId", "bootstrap version %u, this library speaks %u",
           w.version, kBootstrapWireVersion);
  ARGCHECK(bootstrapAddressUsable(w.root), caller, "uniqueId", "address family %d", (int)w.root.sa.sa_family);
  out->secret = w.secret;
  out->root = w.root;
  return ncclSuccess;
}

void bootstrapWriteId(const BootstrapId& id, ncclSignUniqueId* out) {
  BootstrapIdWire w;
  memset(&w, 0, sizeof(w));
  w.magic = kBootstrapIdMagic;
  w.version = kBootstrapWireVersion;
  w.secret = id.secret;
  w.root = id.root;
  memset(out->internal, 0, sizeof(out->internal));
  memcpy(out->internal, &w, sizeof(w));
}

const char* bootstrapHelloProblem(const BootstrapHello& h, uint16_t kind, uint64_t secret) {
  if (h.magic != kBootstrapHelloMagic) return "not a signlion bootstrap hello";
  if (h.version != kBootstrapWireVersion) return "wrong protocol version";
  if (h.secret != secret) return "wrong secret";
  if (h.kind != kind) return "unexpected kind of hello";
  if (h.nranks < 1 || h.nranks > kBootstrapMaxRanks) return "nranks out of range";
  if (h.rank < 0 || h.rank >= h.nranks) return "rank out of range";
  if (kind == kHelloRoot && !bootstrapAddressUsable(h.addr)) return "bad address";
  return nullptr;
}

const char* bootstrapTableProblem(const BootstrapTableHeader& th, int nranks, const net::SocketAddress* next) {
  if (th.magic != kBootstrapTableMagic) return "not the root's answer";
  if (th.nranks != nranks) return "an answer for another number of ranks";
  if (next != nullptr && !bootstrapAddressUsable(*next)) return "an address of neither IPv4 nor IPv6";
  return nullptr;
}

const char* bootstrapOpProblem(const BootstrapOpHeader& theirs, uint32_t kind, uint64_t bytes) {
  if (theirs.magic != kBootstrapOpMagic) return "not an operation header";
  if (theirs.kind != kind) return "another operation";
  if (theirs.bytes != bytes) return "another size";
  return nullptr;
}

}  // namespace host
}  // namespace signlion
