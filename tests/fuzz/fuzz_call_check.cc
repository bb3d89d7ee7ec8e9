// The host communicator's per-call check (src/host/call_check.h): the 16-byte
// header at the front of a call's first message from a peer, checked against
// this rank's own signature (also taken from the input: any call a rank may
// make), a whole signature as the NCCL path's check gathers it
// (src/nccl/call_agreement.h), and the settings table every rank sends at
// ncclSignCommInitRank.
#include <cstring>
#include <vector>

#include "algo/topology.h"
#include "fuzz_bytes.h"
#include "host/call_check.h"

using namespace signlion;
using namespace signlion::host;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  {
    fuzz::Bytes in(data, size);
    CallSignature mine = in.take<CallSignature>();
    mine.rank = 0;
    uint32_t payload = in.take<uint32_t>() % 4096;
    uint32_t msgSize = in.take<uint32_t>() % 8192;
    CallHeader h = in.take<CallHeader>();
    (void)verifyCallHeader(mine, 0, 1, &h, msgSize, payload, "fuzz");
    // A header that says mine comes back as mine, whatever mine is.
    CallHeader own = CallHeader::encode(mine);
    if (verifyCallHeader(mine, 0, 1, &own, kHeaderBytes + payload, payload, "fuzz") != ncclSuccess) {
      // Only fields wider than the header's are not carried whole.
      CallSignature back;
      if (!own.decode(mine, 0, &back)) __builtin_trap();
    }
  }
  {  // ncclSignAllReduce under SIGNLION_CHECK=1 compares whole signatures from the peers' table
    fuzz::Bytes in(data, size);
    CallSignature mine = in.take<CallSignature>();
    CallSignature theirs = in.take<CallSignature>();
    (void)compareSignatures(theirs, mine, "fuzz");
  }
  {
    fuzz::Bytes in(data, size);
    int nranks = 1 + in.take<uint8_t>() % 16;
    int rank = in.take<uint8_t>() % nranks;
    std::vector<uint8_t> rows(nranks * settingsRowBytes());
    size_t n = in.left() < rows.size() ? in.left() : rows.size();
    if (n > 0) memcpy(rows.data(), in.data(), n);
    algo::Topology topo;
    (void)compareSettingsRows(rows.data(), nranks, rank, &topo);
    if ((int)topo.node.size() != nranks) __builtin_trap();
    (void)topo.describe(nranks);
    (void)topo.members(nranks);
  }
  return 0;
}
