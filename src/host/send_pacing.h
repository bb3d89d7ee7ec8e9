// Paces the sends of a rank to other nodes at the rate its link can carry,
// shared by the peers it sends to at once, so that its own streams do not
// overflow the link's queue.
//
// A TCP stream probes for bandwidth by filling the queue in front of its
// bottleneck (a switch port, a NIC's qdisc) until it drops, and each new
// stream starts by overshooting; the host executor posts a send as soon as
// its blocks are ready, so the direct algorithm's N-1 sends of each phase are
// on the wire at once, each growing its window as if it had the link to
// itself. On a 100 Mbit/s link with 20 ms of queue, 4 ranks lost 15-40 % of
// their packets and a direct call took 1.3-1.45x the wire time of its bytes;
// halving-doubling, one peer a step, lost thousands of packets at 8 ranks.
// Capped at 95 % of the link rate over the number of peers (Linux's TCP
// pacing, SO_MAX_PACING_RATE), the streams share the link without a standing
// queue: almost no drops, direct at 1.07-1.1x its wire time. Only where the
// rate is the link's own (LearnedLink::lineRate), and only where every node
// holds one rank: ranks of one node share its link, and which of them send
// across at once depends on the algorithm and the layout (a ring crosses at
// one rank per node, direct at all of them), so no per-link share is right
// for all; such communicators run uncapped.
#pragma once

#include <cstdint>
#include <vector>

#include "common/param.h"
#include "host/links.h"
#include "host/net.h"

// 1 (the default): pace as above wherever the communicator knows its link's
// line rate (learned at init, or SIGNLION_COST_BETA_MBPS); 0: never.
SIGNLION_PARAM(HostPacing, "HOST_PACING", 1, 0, 1)

namespace signlion {
namespace host {

// The share of the line rate the paced streams of a rank fill together. A
// stream's pacing counts its IP packets, while the link also carries their
// Ethernet framing (1514 bytes a full frame for 1500) and the ACKs of what
// this rank receives (about 2 % more at full rate both ways): paced at the
// whole line rate, the queue still grew until it dropped (8 ranks, 100 Mbit/s).
constexpr uint64_t kPacedPercent = 95;
// The bytes per second all paced links of a rank may fill together for a
// link of linkMbits: 0 (no pacing) for an unknown rate or SIGNLION_HOST_PACING=0.
uint64_t pacedLinkBytesPerSec(int64_t linkMbits);

class SendPacing {
 public:
  // linkMbits: the rate of a link between nodes (0: unknown or not to be
  // paced, nothing is ever capped); remotePeers: the peers on other nodes,
  // whose links may be capped.
  void init(int64_t linkMbits, std::vector<int> remotePeers);
  // Before a call whose schedule sends to `fanout` peers at once
  // (Schedule::concurrentSendPeers; 1 for the sum all-reduce's ring): every
  // remote link capped at the paced rate / fanout. Touches the sockets only
  // when the fanout changes (a Lion step whose sum all-reduces alternate
  // with its sign all-reduces costs 2 x peers x streams setsockopt calls), so a warm
  // communicator running one algorithm costs nothing per call. A socket that
  // refuses the cap is left as it is (the call still runs, at TCP's pace).
  void follow(const Net& net, const Links& links, int fanout);

 private:
  uint64_t linkBytesPerSec_ = 0;
  std::vector<int> remote_;
  uint64_t current_ = 0;
  bool refusedLogged_ = false;
};

}  // namespace host
}  // namespace signlion
