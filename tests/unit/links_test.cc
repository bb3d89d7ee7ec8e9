// The link set of the host communicator: symmetric, and small enough for the
// O(N log N) handle table at any communicator size.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "algo/direct.h"
#include "host/links.h"

namespace signlion {
namespace host {
namespace {

bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(Links, PeersAreSymmetric) {
  for (int n = 1; n <= 24; n++) {
    std::vector<std::vector<int>> peers(n);
    for (int r = 0; r < n; r++) peers[r] = schedulePeers(n, r, algo::Topology(), false);
    for (int p = 0; p < n; p++) {
      EXPECT_FALSE(has(peers[p], p)) << "N=" << n << " rank " << p << " is its own peer";
      for (int q : peers[p]) EXPECT_TRUE(has(peers[q], p)) << "N=" << n << ": " << p << "->" << q << " only";
    }
  }
}

TEST(Links, PeerCountFitsTheHandleSlots) {
  for (int n : {1, 2, 3, 5, 8, 16, 17, 31, 64, 100, 255, 256, 257, 1000}) {
    for (int r : {0, 1, n / 2, n - 1}) {
      if (r >= n) continue;
      EXPECT_LE((int)schedulePeers(n, r, algo::Topology(), false).size(), maxPeerSlots(n)) << "N=" << n << " rank " << r;
    }
  }
}

// The direct algorithm talks to every other rank, on at most
// algo::kMaxDirectRanks ranks: there auto and a forced direct connect all
// N - 1 peers; past it neither does (a forced direct gets the ring
// neighbours of the sum all-reduce only), so the peers stay logarithmic.
TEST(Links, DirectPeersOnlyUpToItsRankLimit) {
  for (int n = 2; n <= 40; n++) {
    for (int r : {0, n / 2, n - 1}) {
      const size_t forced = schedulePeers(n, r, algo::Topology(), false, ncclSignAlgoDirect).size();
      const size_t automatic = schedulePeers(n, r, algo::Topology(), false).size();
      const size_t ring = schedulePeers(n, r, algo::Topology(), false, ncclSignAlgoRing).size();
      if (n <= algo::kMaxDirectRanks) {
        EXPECT_EQ(forced, size_t(n - 1)) << "N=" << n << " rank " << r;
        EXPECT_EQ(automatic, size_t(n - 1)) << "N=" << n << " rank " << r;
      } else {
        EXPECT_EQ(forced, ring) << "N=" << n << " rank " << r;
        EXPECT_LT(automatic, size_t(n - 1)) << "N=" << n << " rank " << r;
        EXPECT_LE((int)automatic, maxPeerSlots(n)) << "N=" << n << " rank " << r;
      }
    }
  }
  EXPECT_EQ(maxPeerSlots(16), 15);
  EXPECT_EQ(maxPeerSlots(17), 2 * 5 + 4);  // the logarithmic sets' slots again
}

}  // namespace
}  // namespace host
}  // namespace signlion
