// The bootstrap's messages (src/host/bootstrap_wire.h) as a rank and the root
// read them: a unique id handed to ncclSignCommInitRank, a hello (to the root,
// to a ring neighbour, the neighbour's acknowledgement), the root's address
// table, and a ring operation's header. Each reads the input from its start.
#include <vector>

#include "fuzz_bytes.h"
#include "host/bootstrap_wire.h"

using namespace signlion;
using namespace signlion::host;

namespace {
constexpr uint64_t kSecret = 0x5eed5eed5eed5eedull;  // what the listener expects
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  {  // ncclSignCommInitRank's id, then the ring's first hello made from it
    ncclSignUniqueId id = fuzz::Bytes(data, size).take<ncclSignUniqueId>();
    BootstrapId parsed;
    if (bootstrapParseId(id, "fuzz", &parsed) == ncclSuccess) {
      ncclSignUniqueId again;
      bootstrapWriteId(parsed, &again);
      BootstrapId twice;
      if (bootstrapParseId(again, "fuzz", &twice) != ncclSuccess || twice.secret != parsed.secret) __builtin_trap();
    }
  }
  {  // a hello as each of its three readers checks it
    BootstrapHello h = fuzz::Bytes(data, size).take<BootstrapHello>();
    for (uint16_t kind : {kHelloRoot, kHelloRing, kHelloRingAck}) {
      if (bootstrapHelloProblem(h, kind, kSecret) == nullptr) {
        // What the root does with an accepted hello: a slot per rank.
        if (h.rank < 0 || h.rank >= h.nranks || h.nranks > kBootstrapMaxRanks) __builtin_trap();
      }
    }
  }
  {  // the root's answer (header, successor's address) to a rank of `nranks` ranks (the rank's own value: 1..64)
    fuzz::Bytes in(data, size);
    int nranks = 1 + in.take<uint8_t>() % 64;
    BootstrapTableHeader th = in.take<BootstrapTableHeader>();
    if (bootstrapTableProblem(th, nranks, nullptr) == nullptr) {
      net::SocketAddress next = in.take<net::SocketAddress>();
      (void)bootstrapTableProblem(th, nranks, &next);
    }
  }
  {  // a ring neighbour's operation header against this rank's allGather / barrier
    fuzz::Bytes in(data, size);
    uint64_t bytes = in.take<uint64_t>() % 4096;
    BootstrapOpHeader theirs = in.take<BootstrapOpHeader>();
    (void)bootstrapOpProblem(theirs, kOpAllGather, bytes);
    (void)bootstrapOpProblem(theirs, kOpBarrier, 1);
  }
  return 0;
}
