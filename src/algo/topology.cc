#include "algo/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "common/param.h"

SIGNLION_STRING_PARAM(HostId, "HOSTID", "")

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

std::string defaultHostId() {
  std::string env = signlionParamHostId();
  if (!env.empty()) return env;
  // Read as NCCL reads it: from the environment, at the time of the call.
  const char* nccl = getenv("NCCL_HOSTID");
  if (nccl != nullptr && nccl[0] != '\0') return nccl;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = 0;
  std::string bootId;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, bootId);
  return std::string(name) + bootId;
}

}  // namespace algo
}  // namespace signlion
