// The data links of a host communicator: for every peer a schedule may talk
// to, one ncclNet send comm (to it) and one recv comm (from it). Made once at
// init: each rank listens once per peer, the handles travel through the
// bootstrap, then connect and accept run non-blocking, as NCCL's proxy does.
#pragma once

#include <memory>
#include <vector>

#include "algo/topology.h"
#include "host/bootstrap.h"
#include "host/net.h"

namespace signlion {
namespace host {

struct Link {
  void* sendComm = nullptr;
  void* recvComm = nullptr;
};

class Links {
 public:
  // peers: the ranks this rank exchanges data with (the relation must be
  // symmetric across ranks: q in peers(p) iff p in peers(q)).
  // nodeRanks: as passed to maxPeerSlots (every rank must pass the same).
  ncclResult_t connect(const Net& net, Bootstrap& bootstrap, const std::vector<int>& peers, int timeoutMs,
                       int nodeRanks = 0);
  // Closes every comm. Safe to call twice.
  void close(const Net& net);
  // Ends every comm as a crash would (Net::abortComm), all of them before
  // any is closed: each peer's pending operations on its link to this rank
  // fail at once, whatever its place in the order of closes (closing one
  // link may wait). The comms must still be closed.
  void abort(const Net& net);

  const Link& peer(int rank) const { return links_[rank]; }
  const std::vector<int>& peers() const { return peers_; }

 private:
  std::vector<Link> links_;
  std::vector<int> peers_;
};

// The peers the sign all-reduce schedules of `rank` use, plus the ring
// neighbours of the sum all-reduce: with `configured` Auto, every algorithm's
// (the hierarchical one, over `topo`, only when withHier), since the cost
// model may pick any; with an algorithm forced (config or SIGNLION_ALGO),
// that one's only, since no call runs another: a forced ring connects 2
// peers, not halving-doubling's log2 N partners as well. The direct
// algorithm's N-1 peers only up to algo::kMaxDirectRanks ranks.
std::vector<int> schedulePeers(int nranks, int rank, const algo::Topology& topo, bool withHier,
                               ncclSignAlgo_t configured = ncclSignAlgoAuto);

// The hierarchical algorithm talks to every rank of its node: its links are
// made only where it can be of use and the handle table stays small.
constexpr int kMaxHierNodeRanks = 16;
// The largest node's rank count when the hierarchical algorithm gets its
// links on a communicator over topo: the topology has several nodes or
// `configured` forces it, and no node has more than kMaxHierNodeRanks ranks.
// 0 otherwise (the cost model then leaves it out; forcing it fails).
int hierarchicalNodeRanks(const algo::Topology& topo, int nranks, ncclSignAlgo_t configured);

// Handle slots each rank publishes at link setup: 2 ceil(log2 N) + 4, above the
// ring's 2 neighbours, halving-doubling's ceil(log2 N) partners and fold
// partner and the tree's at most 4 (parent and children in one tree, parent in
// the other) together from N = 8 on (below, N-1 covers every peer).
// nodeRanks: hierarchicalNodeRanks (its intra-node peers come on top). At
// least N-1 up to algo::kMaxDirectRanks ranks (the direct algorithm's peers).
int maxPeerSlots(int nranks, int nodeRanks = 0);

}  // namespace host
}  // namespace signlion
