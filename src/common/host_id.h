// This process's host identity: what tells ranks on one machine from ranks
// on another (the topology in src/algo/topology.h groups ranks by it, and a
// communicator's config may name one per rank).
#pragma once

#include <string>

namespace signlion {

// The host identity when no per-rank one is given, NCCL's rule with
// signlion's override in front: SIGNLION_HOSTID if set, else NCCL_HOSTID if
// set, else the hostname plus the kernel's boot id. So containers on one
// machine share a node, and network namespaces (or processes sharing a GPU)
// are told apart only by setting one of the two.
std::string defaultHostId();

}  // namespace signlion
