// The host communicator paces its links to other nodes (host/send_pacing.h):
// each link capped at 95 % of the link rate over the peers the call's
// schedule sends to at once (direct: N-1; ring, halving-doubling and the sum
// all-reduce: 1), never within a node, never with SIGNLION_HOST_PACING=0 or
// an unknown rate.
// Read back from the sockets (SO_MAX_PACING_RATE) after each call.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/param.h"
#include "common/ranks.h"
#include "host/communicator.h"
#include "host/send_pacing.h"
#include "nccl_sign.h"
#include "net/socket_net.h"

namespace {

using signlion::test::withRanks;

constexpr int kRanks = 4;
constexpr int64_t kBetaMBps = 12;  // SIGNLION_COST_BETA_MBPS: a 96 Mbit/s link, 12e6 bytes/s
const char* const kHostIds[kRanks] = {"pace-a", "pace-b", "pace-c", "pace-d"};

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
    signlion::paramResetCache();
  }
  ~ScopedEnv() {
    unsetenv(name_);
    signlion::paramResetCache();
  }
  const char* name_;
};

// Every link's cap (bytes/s summed over its data streams; 0: none) to the
// other ranks, as the sockets report it.
std::vector<uint64_t> capsOf(ncclSignComm_t comm, int rank) {
  std::vector<uint64_t> caps;
  for (int p = 0; p < kRanks; p++)
    if (p != rank) caps.push_back(signlion::net::commPacing(comm->links.peer(p).sendComm));
  EXPECT_EQ(caps.size(), (size_t)kRanks - 1);
  return caps;
}

void majority(ncclSignComm_t comm, int rank) {
  std::vector<float> in(4096), out(4096);
  for (size_t i = 0; i < in.size(); i++) in[i] = (i + rank) % 3 ? 1.0f : -1.0f;
  ASSERT_EQ(ncclSignHostAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSignMajority, comm), ncclSuccess);
}

void sum(ncclSignComm_t comm) {
  std::vector<float> in(4096, 1.0f), out(4096);
  ASSERT_EQ(ncclSignHostSumAllReduce(in.data(), out.data(), in.size(), ncclFloat32, comm), ncclSuccess);
}

ncclSignConfig_t configOf(int rank, ncclSignAlgo_t algo, bool ownNodes) {
  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.algorithm = algo;
  c.timeoutMs = 10000;
  c.hostId = ownNodes ? kHostIds[rank] : "pace-one-node";
  return c;
}

const uint64_t kLink = (uint64_t)kBetaMBps * 1000000 * signlion::host::kPacedPercent / 100;
const uint64_t kShare = kLink / (kRanks - 1);

TEST(SendPacing, DirectCapsEachRemoteLinkAtItsShareTheSumAtTheWholeRate) {
  ScopedEnv beta("SIGNLION_COST_BETA_MBPS", std::to_string(kBetaMBps).c_str());
  withRanks(
      kRanks, [](int r) { return configOf(r, ncclSignAlgoDirect, true); },
      [](int rank, ncclSignComm_t comm) {
        int64_t mbits = -1;
        ASSERT_EQ(ncclSignCommGetLinkRate(comm, &mbits), ncclSuccess);
        EXPECT_EQ(mbits, kBetaMBps * 8) << "rank " << rank;
        for (uint64_t cap : capsOf(comm, rank)) EXPECT_EQ(cap, 0u) << "rank " << rank << " before any call";
        majority(comm, rank);
        // Split evenly over a link's streams, so the sum may fall short by
        // less than one byte per stream.
        for (uint64_t cap : capsOf(comm, rank)) {
          EXPECT_LE(cap, kShare) << "rank " << rank;
          EXPECT_GE(cap + 16, kShare) << "rank " << rank;
        }
        sum(comm);
        for (uint64_t cap : capsOf(comm, rank)) {
          EXPECT_LE(cap, kLink) << "rank " << rank << " after the sum all-reduce";
          EXPECT_GE(cap + 16, kLink) << "rank " << rank << " after the sum all-reduce";
        }
        majority(comm, rank);
        for (uint64_t cap : capsOf(comm, rank)) EXPECT_GE(cap + 16, kShare) << "rank " << rank << " direct again";
      });
}

TEST(SendPacing, OnePeerAtATimeTakesTheWholeRate) {
  ScopedEnv beta("SIGNLION_COST_BETA_MBPS", std::to_string(kBetaMBps).c_str());
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling}) {
    withRanks(
        kRanks, [algo](int r) { return configOf(r, algo, true); },
        [](int rank, ncclSignComm_t comm) {
          majority(comm, rank);
          for (int p = 0; p < kRanks; p++) {
            void* send = comm->links.peer(p).sendComm;  // hd at N = 4 links 2 of the 3 peers
            if (p != rank && send != nullptr) {
              EXPECT_LE(signlion::net::commPacing(send), kLink) << "rank " << rank;
              EXPECT_GE(signlion::net::commPacing(send) + 16, kLink) << "rank " << rank;
            }
          }
        });
  }
}

TEST(SendPacing, NeverWithinANodeNorWhenTurnedOffNorWithoutARate) {
  {
    ScopedEnv beta("SIGNLION_COST_BETA_MBPS", std::to_string(kBetaMBps).c_str());
    withRanks(
        kRanks, [](int r) { return configOf(r, ncclSignAlgoDirect, false); },
        [](int rank, ncclSignComm_t comm) {
          majority(comm, rank);
          for (uint64_t cap : capsOf(comm, rank)) EXPECT_EQ(cap, 0u) << "rank " << rank << ", one node";
        });
    // Two nodes of two ranks: which ranks send across at once depends on the
    // algorithm, so no share of the node's link is right for all: uncapped.
    withRanks(
        kRanks, [](int r) { return configOf(r % 2 == 0 ? 0 : 1, ncclSignAlgoDirect, true); },
        [](int rank, ncclSignComm_t comm) {
          majority(comm, rank);
          for (int p = 0; p < kRanks; p++) {
            void* send = comm->links.peer(p).sendComm;
            if (p != rank && send != nullptr) {
              EXPECT_EQ(signlion::net::commPacing(send), 0u) << "rank " << rank << ", two ranks a node";
            }
          }
        });
    ScopedEnv off("SIGNLION_HOST_PACING", "0");
    withRanks(
        kRanks, [](int r) { return configOf(r, ncclSignAlgoDirect, true); },
        [](int rank, ncclSignComm_t comm) {
          majority(comm, rank);
          for (uint64_t cap : capsOf(comm, rank)) EXPECT_EQ(cap, 0u) << "rank " << rank << ", SIGNLION_HOST_PACING=0";
        });
  }
  // Loopback and no rate set: nothing is learned, so nothing is capped.
  withRanks(
      kRanks, [](int r) { return configOf(r, ncclSignAlgoDirect, true); },
      [](int rank, ncclSignComm_t comm) {
        int64_t mbits = -1;
        ASSERT_EQ(ncclSignCommGetLinkRate(comm, &mbits), ncclSuccess);
        EXPECT_EQ(mbits, 0) << "rank " << rank << ": nothing to learn over loopback";
        majority(comm, rank);
        for (uint64_t cap : capsOf(comm, rank)) EXPECT_EQ(cap, 0u) << "rank " << rank << ", no link rate";
      });
}

TEST(SendPacing, LinkRateQueryRefusesBadArguments) {
  int64_t mbits = 7;
  EXPECT_EQ(ncclSignCommGetLinkRate(nullptr, &mbits), ncclInvalidArgument);
  EXPECT_EQ(mbits, 7);
  withRanks(
      1, [](int r) { return configOf(r, ncclSignAlgoDirect, true); },
      [](int, ncclSignComm_t comm) { EXPECT_EQ(ncclSignCommGetLinkRate(comm, nullptr), ncclInvalidArgument); });
}

}  // namespace
