#include "algo/topology.h"

#include <algorithm>
#include <map>

namespace signlion {
namespace algo {

std::vector<std::vector<int>> Topology::members(int nranks) const {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < nranks; r++) {
    int n = nodeOf(r);
    if ((int)out.size() <= n) out.resize(n + 1);
    out[n].push_back(r);
  }
  return out;
}

std::string Topology::describe(int nranks) const {
  auto m = members(nranks);
  size_t lo = nranks, hi = 0;
  for (const auto& g : m) {
    lo = std::min(lo, g.size());
    hi = std::max(hi, g.size());
  }
  std::string out = std::to_string(m.size()) + (m.size() == 1 ? " node" : " nodes");
  return out + (lo == hi ? " x " + std::to_string(lo) : " of " + std::to_string(lo) + ".." + std::to_string(hi)) +
         " ranks";
}

Topology topologyFromHostHashes(const std::vector<uint64_t>& hostHash) {
  Topology t;
  std::map<uint64_t, int> index;
  for (uint64_t h : hostHash) {
    auto it = index.emplace(h, (int)index.size()).first;
    t.node.push_back(it->second);
  }
  return t;
}

uint64_t hostIdHash(const std::string& hostId) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : hostId) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace algo
}  // namespace signlion
