// Which node (machine) each rank of a communicator runs on: what the
// hierarchical algorithm groups by and what the cost model tells intra-node
// links from inter-node links by. Plain data, the same on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/host_id.h"

namespace signlion {
namespace algo {

struct Topology {
  // node[r]: the node of rank r, numbered 0, 1, ... in the order of each
  // node's lowest rank. Empty: unknown, every rank counts as its own node
  // (all links inter-node), which is what the flat cost model assumed.
  std::vector<int> node;

  bool known() const { return !node.empty(); }
  int nodeOf(int rank) const { return node.empty() ? rank : node[rank]; }
  // The ranks of every node, ascending: members(n)[i] is local rank i of node n.
  std::vector<std::vector<int>> members(int nranks) const;
  bool sameNode(int a, int b) const { return nodeOf(a) == nodeOf(b); }
  // "2 nodes x 4" or "3 nodes of 1..4 ranks", for log lines.
  std::string describe(int nranks) const;
};

// The topology of ranks whose host identities hash to hostHash[r] (ranks
// with equal hashes share a node).
Topology topologyFromHostHashes(const std::vector<uint64_t>& hostHash);

// A 64-bit hash (FNV-1a) of a host identity string.
uint64_t hostIdHash(const std::string& hostId);

// This process's host identity when no per-rank one is given:
// defaultHostId(), common/host_id.h.

}  // namespace algo
}  // namespace signlion
