// The bootstrap's wire formats (src/host/bootstrap.h) and the pure checks of
// what a peer sent: bytes in, a verdict out, no I/O. bootstrap.cc reads each
// message into its struct and asks these functions whether to accept it; the
// fuzz targets (tests/fuzz/) call the same functions with arbitrary bytes.
//
// Every struct here is plain bytes on a wire between processes of one build:
// fixed width, host byte order, compared field by field.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"
#include "net/socket_devices.h"

namespace signlion {
namespace host {

constexpr uint32_t kBootstrapIdMagic = 0x534c4249;     // "SLBI"
constexpr uint32_t kBootstrapHelloMagic = 0x534c4248;  // "SLBH"
constexpr uint32_t kBootstrapTableMagic = 0x534c4254;  // "SLBT"
constexpr uint32_t kBootstrapOpMagic = 0x534c424f;     // "SLBO"
constexpr uint16_t kBootstrapWireVersion = 2;  // 2: the root sends each rank its successor's address, not the table
constexpr int kBootstrapMaxRanks = 1 << 20;

enum BootstrapHelloKind : uint16_t { kHelloRoot = 1, kHelloRing = 2, kHelloRingAck = 3 };
enum BootstrapOpKind : uint32_t { kOpAllGather = 1, kOpBarrier = 2 };

// What the 128-byte unique id holds.
struct BootstrapIdWire {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t secret;
  net::SocketAddress root;
};
static_assert(sizeof(BootstrapIdWire) <= NCCL_SIGN_UNIQUE_ID_BYTES, "id must fit ncclSignUniqueId");

// First bytes on every bootstrap connection: rank -> root, rank -> rank+1,
// and back from rank+1 as the acknowledgement.
struct BootstrapHello {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint64_t secret;
  int32_t rank;
  int32_t nranks;
  net::SocketAddress addr;  // rank -> root: where this rank listens
};

// Root -> rank, followed by one SocketAddress: where rank+1 listens. That is
// all a rank needs to join the ring, so the root sends O(N) bytes in all and
// no rank holds an N-entry table (the whole table to every rank was N^2:
// 470 MB from the root at N = 4096).
struct BootstrapTableHeader {
  uint32_t magic;
  int32_t nranks;
};

// Sent to both ring neighbours before the payload of each operation, so that
// ranks calling different operations or sizes fail instead of desynchronising.
struct BootstrapOpHeader {
  uint32_t magic;
  uint32_t kind;
  uint64_t bytes;
};

// What an id carries, once checked.
struct BootstrapId {
  uint64_t secret = 0;
  net::SocketAddress root{};
};

// Whether `a` is an address a bootstrap socket can reach: IPv4 or IPv6.
bool bootstrapAddressUsable(const net::SocketAddress& a);

// Parses and validates an id (magic, version, address family):
// ncclInvalidArgument with a WARN (naming `caller`) for one not made by
// bootstrapCreateRoot.
ncclResult_t bootstrapParseId(const ncclSignUniqueId& id, const char* caller, BootstrapId* out);

// Writes an id carrying `id` (the inverse of bootstrapParseId).
void bootstrapWriteId(const BootstrapId& id, ncclSignUniqueId* out);

// Why a hello is not acceptable as `kind` under `secret`, or nullptr.
const char* bootstrapHelloProblem(const BootstrapHello& h, uint16_t kind, uint64_t secret);

// Why the root's answer (header, then the successor's address at `next`) is
// not what a rank of `nranks` ranks expects, or nullptr. `next` may be nullptr
// to check the header alone (the address is read after it).
const char* bootstrapTableProblem(const BootstrapTableHeader& th, int nranks, const net::SocketAddress* next);

// Why a ring neighbour's operation header does not match this rank's
// operation (`kind`, `bytes` per rank), or nullptr.
const char* bootstrapOpProblem(const BootstrapOpHeader& theirs, uint32_t kind, uint64_t bytes);

}  // namespace host
}  // namespace signlion
