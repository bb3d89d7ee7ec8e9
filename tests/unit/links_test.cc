// The link set of the host communicator: symmetric, and small enough for the
// O(N log N) handle table at any communicator size.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

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

}  // namespace
}  // namespace host
}  // namespace signlion
