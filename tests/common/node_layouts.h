// Node layouts the hierarchical algorithm is tested over, the same on every
// executor: equal nodes of 1, 2, 3, 4, 8 ranks for 1..4 nodes (ranks
// contiguous by node), unequal nodes, and nodes whose ranks interleave.
#pragma once

#include <string>
#include <vector>

#include "algo/topology.h"

namespace signlion {
namespace test {

std::vector<algo::Topology> nodeLayouts();

// "0011122" (the node of each rank), for trace lines and test names.
std::string layoutName(const algo::Topology& t);

}  // namespace test
}  // namespace signlion
