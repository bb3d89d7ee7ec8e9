// Hierarchical (topology-aware) sign all-reduce: count inside each node over
// its fast links, exchange one widening counter per element between nodes,
// gather the decided result inside each node again. See docs/ALGORITHMS.md.
//
// The message is cut into S shards, S = the smallest node's rank count; local
// rank i < S of every node leads shard i. Three phases, every one a fixed
// number of steps on every rank:
//  1. intra-node reduce-scatter, G-1 rounds (G = the largest node's count):
//     in round k local rank l sends its 1-bit votes of shard (l+k) mod g to
//     that shard's leader (if it is one), and leader l adds the votes of
//     local rank (l-k) mod g; after round g-1 leader l holds its node's g
//     votes over shard l. Each leader adds one message per step.
//  2. inter-node: the leaders of shard i (one per node, node order) run
//     halving-doubling over shard i with counters that start at their node's
//     count and widen as they add; every leader ends with the decided result
//     over its shard.
//  3. intra-node all-gather, G-1 rounds: leader l sends its result shard to
//     local rank (l+k) mod g.
// Between nodes each node sends its counters once (reduce-scatter) and the
// result planes once (all-gather) over the whole message, whatever its rank
// count: the inter-node bytes of halving-doubling over the nodes.
#include <algorithm>

#include "algo/halving_doubling.h"
#include "algo/schedule.h"

namespace signlion {
namespace algo {
namespace detail {

void buildHierarchical(Schedule* s, const Topology& topo) {
  const int r = s->rank;
  const std::vector<std::vector<int>> nodes = topo.members(s->nranks);
  const int nnodes = (int)nodes.size();
  size_t smallest = nodes[0].size(), largest = nodes[0].size();
  for (const auto& m : nodes) {
    smallest = std::min(smallest, m.size());
    largest = std::max(largest, m.size());
  }
  const int shards = (int)smallest, rounds = (int)largest - 1;
  const std::vector<int>& mine = nodes[topo.nodeOf(r)];
  const int g = (int)mine.size(), l = (int)(std::find(mine.begin(), mine.end(), r) - mine.begin());
  auto shard = [&](int i) { return shardRange(s->nblocks, shards, i); };
  const bool anyData = s->nblocks > 0;
  const bool leader = l < shards;

  s->counterMax = leader ? s->nranks : 1;
  s->counterWidth = counterWidth(s->counterMax);

  // 1. Intra-node reduce-scatter of 1-bit votes into the leaders' counters.
  Step first;
  first.locals.push_back(packVotes(Buffer::kCounter, 0, s->nblocks));
  for (int k = 1; k <= rounds; k++) {
    Step st = k == 1 ? std::move(first) : Step();
    st.anyRankCommunicates = anyData;
    if (k < g) {
      const int to = (l + k) % g, from = (l - k + g) % g;
      if (to < shards && !shard(to).empty())
        st.sends.push_back(makeSend(mine[to], Buffer::kCounter, shard(to), s->counters, 1));
      if (leader && !shard(l).empty()) st.recvs.push_back(makeAddRecv(mine[from], shard(l), s->counters, 1, k));
    }
    s->steps.push_back(std::move(st));
  }

  // 2. Halving-doubling among the leaders of this rank's shard.
  HdGroup hd;
  for (int n = 0; n < nnodes; n++) {
    hd.ranks.push_back(nodes[n][leader ? l : 0]);
    hd.votes.push_back((int64_t)nodes[n].size());
  }
  hd.me = leader ? topo.nodeOf(r) : -1;
  hd.range = leader ? shard(l) : Range{};
  appendHalvingDoubling(s, hd, rounds == 0 ? std::move(first) : Step());

  // 3. Intra-node all-gather of the result shards.
  for (int k = 1; k <= rounds; k++) {
    Step st;
    st.anyRankCommunicates = anyData;
    if (k < g) {
      const int to = (l + k) % g, from = (l - k + g) % g;
      if (leader && !shard(l).empty()) st.sends.push_back(makeResultSend(mine[to], shard(l), s->resultPlanes));
      if (from < shards && !shard(from).empty())
        st.recvs.push_back(makeStoreRecv(mine[from], Buffer::kResult, shard(from), s->resultPlanes));
    }
    s->steps.push_back(std::move(st));
  }
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
