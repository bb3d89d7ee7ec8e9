#include "common/node_layouts.h"

namespace signlion {
namespace test {

std::vector<algo::Topology> nodeLayouts() {
  std::vector<algo::Topology> out;
  auto fromSizes = [](std::vector<int> sizes) {
    algo::Topology t;
    for (size_t n = 0; n < sizes.size(); n++) t.node.insert(t.node.end(), sizes[n], (int)n);
    return t;
  };
  for (int nodes = 1; nodes <= 4; nodes++)
    for (int per : {1, 2, 3, 4, 8}) out.push_back(fromSizes(std::vector<int>(nodes, per)));
  for (auto sizes : std::vector<std::vector<int>>{
           {1, 2}, {2, 1}, {3, 1, 4}, {2, 3}, {8, 1}, {4, 4, 3}, {1, 8, 2, 5}, {3, 5}, {2, 2, 2, 1}})
    out.push_back(fromSizes(sizes));
  for (int nranks : {5, 7, 12}) {  // rank r on node r % 3: no node's ranks are contiguous
    algo::Topology t;
    for (int r = 0; r < nranks; r++) t.node.push_back(r % 3);
    out.push_back(t);
  }
  return out;
}

std::string layoutName(const algo::Topology& t) {
  std::string s;
  for (int n : t.node) s += std::to_string(n);
  return s;
}

}  // namespace test
}  // namespace signlion
