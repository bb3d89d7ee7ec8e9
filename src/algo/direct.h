// The direct algorithm (direct.cc) talks to every other rank. What that costs
// a rank grows with N: on the host communicator each peer is a send and a
// receive comm of the socket transport, a control stream and
// SIGNLION_NSOCKS (up to 4) data streams each, with SIGNLION_NTHREADS (2)
// helper threads per comm: about 10 sockets and 4 threads per peer
// (docs/SCALE.md). So the direct algorithm is offered only up to
// kMaxDirectRanks ranks: at 16, 15 peers, at most 152 sockets and 60 helper
// threads per rank (137 and 60 measured on loopback), the bound the hierarchical algorithm already holds a node to
// (host::kMaxHierNodeRanks); past it, auto leaves direct out and the host
// communicator makes no links for it, so a rank's sockets and threads stay
// those of the logarithmic schedules however large N grows.
#pragma once

namespace signlion {
namespace algo {

constexpr int kMaxDirectRanks = 16;

// Whether the direct algorithm may run on nranks ranks (nranks <= kMaxDirectRanks).
constexpr bool directAllowed(int nranks) { return nranks <= kMaxDirectRanks; }

}  // namespace algo
}  // namespace signlion
