// Direct: every rank sends its 1-bit votes of shard j straight to rank j, the
// owner of shard j, which counts the N votes and decides; then every owner
// sends its decided shard straight to every other rank. Each vote and each
// result crosses one link once, so a rank sends (N-1)/N of its votes at one
// bit per element and (N-1)/N of the result planes: the least any schedule
// of votes can send. The price is N-1 peers per rank and 2(N-1) message
// steps. See docs/ALGORITHMS.md.
//
// Both phases go in pairwise order: in step k = 1..N-1 rank r sends to rank
// r+k and receives from rank r-k (mod N), so step by step every rank sends to
// one peer and receives from one other: on a switch no rank's link is shared
// by two senders. (The host executor overlaps steps: it posts a send as soon
// as its blocks are ready, and the reduce-scatter's sends read only the
// rank's own votes, so they may all be in flight at once.) The all-gather is pairwise rather than a ring: the bytes and the
// number of steps are the same, but every result shard travels one hop from
// its owner, so no step waits for the step before to forward what it
// received (the executors may post every shard as soon as it is decided),
// and the links it needs are the ones the reduce-scatter made anyway.
#include "algo/direct.h"

#include <algorithm>

#include "algo/schedule.h"

namespace signlion {
namespace algo {
namespace detail {

void buildDirect(Schedule* s) {
  const int n = s->nranks, r = s->rank;
  const bool anyData = s->nblocks > 0;
  auto shard = [&](int i) { return shardRange(s->nblocks, n, ((i % n) + n) % n); };
  const Range own = shard(r);
  // Rank r's counter holds N votes over its own shard, one elsewhere.
  s->counterMax = n;
  s->counterWidth = counterWidth(n);
  s->concurrentSendPeers = std::max(1, n - 1);  // every send of a phase reads final blocks

  // Reduce-scatter. The pack runs in the first message step (its locals run
  // before its sends): with one rank there is no message step, and the pack
  // and the decide run alone.
  Step pack;
  pack.locals.push_back(packVotes(Buffer::kCounter, 0, s->nblocks));
  if (n == 1) s->steps.push_back(std::move(pack));
  for (int k = 1; k < n; k++) {
    Step st = k == 1 ? std::move(pack) : Step();
    st.anyRankCommunicates = anyData;  // every shard but the owner's moves in every step
    const Range out = shard(r + k);
    // Shard r+k holds this rank's own vote only (nothing adds there).
    if (!out.empty()) st.sends.push_back(makeSend((r + k) % n, Buffer::kCounter, out, s->counters, 1));
    // Before step k the owner's counter holds its own vote and those of
    // ranks r-1 .. r-k+1: k votes; the add makes it k+1.
    if (!own.empty()) st.recvs.push_back(makeAddRecv((r - k + n) % n, own, s->counters, 1, k));
    s->steps.push_back(std::move(st));
  }

  // Decide the own shard, then all-gather the decided shards pairwise. The
  // decide runs first in the first all-gather step.
  Step gather;
  if (!own.empty()) gather.locals.push_back(decide(Buffer::kCounter, own, n, s->counterWidth));
  if (n == 1) s->steps.push_back(std::move(gather));
  for (int k = 1; k < n; k++) {
    Step st = k == 1 ? std::move(gather) : Step();
    st.anyRankCommunicates = anyData;
    const Range in = shard(r - k);
    if (!own.empty()) st.sends.push_back(makeResultSend((r + k) % n, own, s->resultPlanes));
    if (!in.empty()) st.recvs.push_back(makeStoreRecv((r - k + n) % n, Buffer::kResult, in, s->resultPlanes));
    s->steps.push_back(std::move(st));
  }
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
