// Recursive halving-doubling on the largest power of two P <= N: a halving
// reduce-scatter (partner at distance P/2, P/4, ..., 1; each step halves the
// range and adds the kept half), a decide on the owned 1/P, then a doubling
// all-gather of the result planes. For N not a power of two the N-P extra
// ranks first fold their votes into a partner (rank P+i into rank i) and get
// the whole result back from it at the end. See docs/ALGORITHMS.md.
#include "algo/halving_doubling.h"

namespace signlion {
namespace algo {
namespace detail {

namespace {

int largestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace

int halvingDoublingSteps(int members) {
  int p = largestPowerOfTwo(members), logp = 0;
  while ((1 << logp) < p) logp++;
  return 1 + 2 * logp + 1 + (members > p ? 1 : 0);
}

void appendHalvingDoubling(Schedule* s, const HdGroup& g, Step first) {
  const int n = (int)g.ranks.size(), q = g.me;
  const int p = largestPowerOfTwo(n), extra = n - p;
  // Votes held by core member i after the fold: its own plus its extra's.
  auto own = [&](int i) { return g.votes[i] + (i < extra ? g.votes[p + i] : 0); };
  // Votes in the sum over core members congruent to i modulo m (a power of
  // two): what a counter holds once the members that differ from i in bits
  // >= log2(m) have been added into it.
  auto groupMax = [&](int i, int m) {
    int64_t sum = 0;
    for (int j = i % m; j < p; j += m) sum += own(j);
    return sum;
  };
  // Pieces are the p shards of the range; [a, a+cnt) pieces as blocks.
  auto pieces = [&](int a, int cnt) {
    return Range{g.range.begin + shardRange(g.range.size(), p, a).begin,
                 g.range.begin + shardRange(g.range.size(), p, a + cnt - 1).end};
  };
  const Range all = g.range;
  const bool member = q >= 0, isExtra = member && q >= p, isPartner = member && q < extra;
  const bool anyData = s->nblocks > 0;  // some group of the communicator has blocks
  auto rankOf = [&](int i) { return g.ranks[i]; };

  // Fold: member p+i adds its votes into member i.
  Step fold = std::move(first);
  if (isExtra && !all.empty())
    fold.sends.push_back(makeSend(rankOf(q - p), Buffer::kCounter, all, s->counters, g.votes[q]));
  if (isPartner && !all.empty())
    fold.recvs.push_back(makeAddRecv(rankOf(q + p), all, s->counters, g.votes[q + p], g.votes[q]));
  fold.anyRankCommunicates = fold.anyRankCommunicates || (extra > 0 && anyData);
  s->steps.push_back(std::move(fold));

  // Reduce-scatter by recursive halving. Before the step at distance d,
  // member i holds pieces [i & ~(2d-1), +2d) summed over the members
  // congruent to i mod 2d.
  for (int d = p / 2; d >= 1; d /= 2) {
    Step st;
    st.anyRankCommunicates = anyData;
    if (member && !isExtra) {
      const int peer = q ^ d, base = q & ~(2 * d - 1);
      Range keep = pieces(base + (q & d), d), give = pieces(base + (peer & d), d);
      if (!give.empty())
        st.sends.push_back(makeSend(rankOf(peer), Buffer::kCounter, give, s->counters, groupMax(q, 2 * d)));
      if (!keep.empty())
        st.recvs.push_back(makeAddRecv(rankOf(peer), keep, s->counters, groupMax(peer, 2 * d), groupMax(q, 2 * d)));
    }
    s->steps.push_back(std::move(st));
  }

  // Decide the owned piece (piece i), then all-gather by recursive doubling:
  // before the step at distance d, member i holds result pieces [i & ~(d-1), +d).
  Step decideStep;
  if (member && !isExtra)
    decideStep.locals.push_back(decide(Buffer::kCounter, pieces(q, 1), s->nranks, counterWidth(s->nranks)));
  s->steps.push_back(std::move(decideStep));
  for (int d = 1; d < p; d *= 2) {
    Step st;
    st.anyRankCommunicates = anyData;
    if (member && !isExtra) {
      const int peer = q ^ d;
      Range mine = pieces(q & ~(d - 1), d), theirs = pieces(peer & ~(d - 1), d);
      if (!mine.empty()) st.sends.push_back(makeResultSend(rankOf(peer), mine, s->resultPlanes));
      if (!theirs.empty()) st.recvs.push_back(makeStoreRecv(rankOf(peer), Buffer::kResult, theirs, s->resultPlanes));
    }
    s->steps.push_back(std::move(st));
  }

  // Unfold: member i hands the whole result to member p+i.
  if (extra > 0) {
    Step unfold;
    unfold.anyRankCommunicates = anyData;
    if (isPartner && !all.empty()) unfold.sends.push_back(makeResultSend(rankOf(q + p), all, s->resultPlanes));
    if (isExtra && !all.empty())
      unfold.recvs.push_back(makeStoreRecv(rankOf(q - p), Buffer::kResult, all, s->resultPlanes));
    s->steps.push_back(std::move(unfold));
  }
}

void buildHalvingDoubling(Schedule* s) {
  const int n = s->nranks, r = s->rank;
  HdGroup g;
  g.ranks.resize(n);
  for (int i = 0; i < n; i++) g.ranks[i] = i;
  g.votes.assign(n, 1);
  g.me = r;
  g.range = Range{0, s->nblocks};
  const int p = largestPowerOfTwo(n);
  s->counterMax = r >= p ? 1 : n;
  s->counterWidth = counterWidth(s->counterMax);
  Step first;
  first.locals.push_back(packVotes(Buffer::kCounter, 0, s->nblocks));
  appendHalvingDoubling(s, g, std::move(first));
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
