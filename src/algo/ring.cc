// Ring: a reduce-scatter in which the counter width grows with the number of
// votes it holds, a decide on the owned shard, then an all-gather of the
// decided result planes. 2(N-1) message steps; see docs/ALGORITHMS.md.
#include "algo/ring.h"

namespace signlion {
namespace algo {
namespace detail {

void buildRing(Schedule* s) {
  const int n = s->nranks, next = ringNext(*s), prev = ringPrev(*s);
  s->counterMax = n;
  s->counterWidth = counterWidth(n);

  // Reduce-scatter: in step k a shard carrying k+1 votes moves one hop and the
  // receiver adds its own vote; afterwards rank r owns shard r+1 with all N.
  Step pack;
  pack.locals.push_back(packVotes(Buffer::kCounter, 0, s->nblocks));
  appendRingPass(
      s, s->nblocks, 0, std::move(pack),
      [&](Range out, int k) { return makeSend(next, Buffer::kCounter, out, s->counters, k + 1); },
      [&](Range in, int k) { return makeAddRecv(prev, in, s->counters, k + 1, 1); });

  // All-gather of the decided shards; the decide runs first in its first step.
  Step gather;
  gather.locals.push_back(decide(Buffer::kCounter, shardRange(s->nblocks, n, (s->rank + 1) % n), n, s->counterWidth));
  appendRingPass(
      s, s->nblocks, 1, std::move(gather), [&](Range out, int) { return makeResultSend(next, out, s->resultPlanes); },
      [&](Range in, int) { return makeStoreRecv(prev, Buffer::kResult, in, s->resultPlanes); });
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
