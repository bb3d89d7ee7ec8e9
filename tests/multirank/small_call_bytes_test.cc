// What a small call puts on the wire besides its votes: one 8-byte socket
// header per message and one 16-byte call header per peer (the call check).
// On a 6k-parameter model the vote vector is ~750 bytes, so these fixed costs
// decide whether a worker sends 16x fewer bytes than an fp32 all-reduce
// (docs/CONVERGENCE.md); this pins them down, exactly, per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "algo/schedule.h"
#include "common/config.h"
#include "common/ranks.h"
#include "common/vote_inputs.h"
#include "host/host_params.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;
using test::withRanks;

constexpr uint64_t kSocketHeader = 8;  // per message (plugin/socket/socket_wire.h, SocketWireMsg)
constexpr uint64_t kCallHeader = 16;   // per peer and call (src/host/call_check.h, CallHeader)

// The bytes rank s.rank sends in one call of schedule s: the planes, a socket
// header per message (a transfer cut into chunks, or a call header alone to a
// peer whose first transfer is empty) and a call header per peer.
uint64_t expectedBytes(const algo::Schedule& s) {
  uint64_t bytes = 0;
  std::set<int> peers;
  for (const algo::Step& st : s.steps) {
    for (const algo::Send& x : st.sends) {
      const bool first = peers.insert(x.peer).second;
      const int64_t step = algo::chunkBlocks(x, host::hostChunkBytes());
      int64_t messages = (x.range.size() + step - 1) / step;
      if (first) {
        bytes += kCallHeader;
        if (messages == 0) messages = 1;  // the header alone
      }
      bytes += (uint64_t)x.bytes() + kSocketHeader * (uint64_t)messages;
    }
  }
  return bytes;
}

ncclSignConfig_t configFor(ncclSignAlgo_t algo) {
  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.algorithm = algo;
  return c;
}

// The study's model (5994 parameters) and a few other small counts, every
// algorithm that runs on its own links. The transport also sends, once per
// send comm, up to two 16-byte pairing headers (an offer, a switch marker;
// socket_pairing.h), at a message boundary when they fall due, which depends
// on timing: each rank makes more calls than its send comms can carry pairing
// headers, so at least one call has none, and the fewest bytes of a call must
// be exactly the votes and headers.
TEST(SmallCallWire, VotesPlusEightBytesPerMessageAndSixteenPerPeer) {
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoDirect,
                              ncclSignAlgoTree}) {
    for (int n : {2, 3, 4, 8, 16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{65}, size_t{5994}}) {
        std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 5);
        withRanks(n, configFor(algo), [&](int rank, ncclSignComm_t comm) {
          algo::Schedule s;
          const int64_t nblocks = std::max<int64_t>(1, algo::blocksForCount(count));
          ASSERT_EQ(algo::buildSchedule(algo, n, rank, nblocks, algo::OpSpec{}, &s), ncclSuccess);
          const uint64_t expected = expectedBytes(s);
          const int calls = 2 * (n - 1) + 1;  // more than the pairing headers of this rank's send comms
          Bytes out(count * 4 + 4);
          uint64_t fewest = UINT64_MAX;
          for (int i = 0; i < calls; i++)
            fewest = std::min(fewest, test::bytesSentByOneCall(comm, in[rank].data(), out.data(), count));
          EXPECT_EQ(fewest, expected) << algoName(algo) << " N=" << n << " count " << count << " rank " << rank
                                      << " (votes " << s.bytesSent() << ")";
        });
      }
    }
  }
}

}  // namespace
}  // namespace signlion
