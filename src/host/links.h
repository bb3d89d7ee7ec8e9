// The data links of a host communicator: for every peer a schedule may talk
// to, one ncclNet send comm (to it) and one recv comm (from it). Made once at
// init: each rank listens once per peer, the handles travel through the
// bootstrap, then connect and accept run non-blocking, as NCCL's proxy does.
#pragma once

#include <memory>
#include <vector>

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
  ncclResult_t connect(const Net& net, Bootstrap& bootstrap, const std::vector<int>& peers, int timeoutMs);
  // Closes every comm. Safe to call twice.
  void close(const Net& net);

  const Link& peer(int rank) const { return links_[rank]; }
  const std::vector<int>& peers() const { return peers_; }

 private:
  std::vector<Link> links_;
  std::vector<int> peers_;
};

// The peers the sign all-reduce schedules of `rank` use (every algorithm),
// plus the ring neighbours of the sum all-reduce.
std::vector<int> schedulePeers(int nranks, int rank);

// Handle slots each rank publishes at link setup: generously above the ring's
// 2 neighbours plus halving-doubling's ceil(log2 N) partners and fold partner.
int maxPeerSlots(int nranks);

}  // namespace host
}  // namespace signlion
