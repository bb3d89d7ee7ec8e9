// Recursive halving-doubling on the largest power of two P <= N: a halving
// reduce-scatter (partner at distance P/2, P/4, ..., 1; each step halves the
// range and adds the kept half), a decide on the owned 1/P, then a doubling
// all-gather of the result planes. For N not a power of two the N-P extra
// ranks first fold their votes into a partner (rank P+i into rank i) and get
// the whole result back from it at the end. See docs/ALGORITHMS.md.
#include "algo/schedule.h"

namespace signlion {
namespace algo {
namespace detail {

namespace {

struct Fold {
  int p;      // ranks in the halving-doubling core: the largest power of two <= N
  int extra;  // N - p ranks folded into ranks 0..extra-1

  // Votes held by core rank q after the fold: its own, plus its extra's.
  int64_t own(int q) const { return q < extra ? 2 : 1; }
  // Votes in the sum over core ranks congruent to q modulo m (a power of two):
  // what a counter holds once the ranks that differ from q in bits >= log2(m)
  // have been added into it.
  int64_t groupMax(int q, int m) const {
    int64_t lo = q % m;
    int64_t folded = extra > lo ? (extra - 1 - lo) / m + 1 : 0;
    return p / m + folded;
  }
};

}  // namespace

void buildHalvingDoubling(Schedule* s) {
  const int n = s->nranks, r = s->rank;
  Fold f{1, 0};
  while (f.p * 2 <= n) f.p *= 2;
  f.extra = n - f.p;
  // Pieces are the p shards of the message; [a, a+cnt) pieces as blocks.
  auto pieces = [&](int a, int cnt) {
    return Range{shardRange(s->nblocks, f.p, a).begin, shardRange(s->nblocks, f.p, a + cnt - 1).end};
  };
  const Range all{0, s->nblocks};
  const bool isExtra = r >= f.p;
  const bool isPartner = r < f.extra;

  s->counterMax = isExtra ? 1 : n;
  s->counterWidth = counterWidth(s->counterMax);

  // Fold: rank p+i adds its votes into rank i.
  Step fold;
  fold.locals.push_back(packVotes(Buffer::kCounter, 0, s->nblocks));
  if (isExtra && !all.empty()) fold.sends.push_back(makeSend(r - f.p, Buffer::kCounter, all, s->counters, 1));
  if (isPartner && !all.empty()) fold.recvs.push_back(makeAddRecv(r + f.p, all, s->counters, 1, 1));
  fold.anyRankCommunicates = f.extra > 0 && !all.empty();
  s->steps.push_back(fold);

  // Reduce-scatter by recursive halving. Before the step at distance d, rank q
  // holds pieces [q & ~(2d-1), +2d) summed over the ranks congruent to q mod 2d.
  for (int d = f.p / 2; d >= 1; d /= 2) {
    Step st;
    st.anyRankCommunicates = !all.empty();
    if (!isExtra) {
      const int q = r, peer = q ^ d, base = q & ~(2 * d - 1);
      Range keep = pieces(base + (q & d), d), give = pieces(base + (peer & d), d);
      if (!give.empty()) st.sends.push_back(makeSend(peer, Buffer::kCounter, give, s->counters, f.groupMax(q, 2 * d)));
      if (!keep.empty())
        st.recvs.push_back(makeAddRecv(peer, keep, s->counters, f.groupMax(peer, 2 * d), f.groupMax(q, 2 * d)));
    }
    s->steps.push_back(st);
  }

  // Decide the owned piece (piece q), then all-gather by recursive doubling:
  // before the step at distance d, rank q holds result pieces [q & ~(d-1), +d).
  Step decideStep;
  if (!isExtra) decideStep.locals.push_back(decide(Buffer::kCounter, pieces(r, 1), n, counterWidth(n)));
  s->steps.push_back(decideStep);
  for (int d = 1; d < f.p; d *= 2) {
    Step st;
    st.anyRankCommunicates = !all.empty();
    if (!isExtra) {
      const int q = r, peer = q ^ d;
      Range mine = pieces(q & ~(d - 1), d), theirs = pieces(peer & ~(d - 1), d);
      if (!mine.empty()) st.sends.push_back(makeResultSend(peer, mine, s->resultPlanes));
      if (!theirs.empty()) st.recvs.push_back(makeStoreRecv(peer, Buffer::kResult, theirs, s->resultPlanes));
    }
    s->steps.push_back(st);
  }

  // Unfold: rank i hands the whole result to rank p+i.
  if (f.extra > 0) {
    Step unfold;
    unfold.anyRankCommunicates = !all.empty();
    if (isPartner && !all.empty()) unfold.sends.push_back(makeResultSend(r + f.p, all, s->resultPlanes));
    if (isExtra && !all.empty()) unfold.recvs.push_back(makeStoreRecv(r - f.p, Buffer::kResult, all, s->resultPlanes));
    s->steps.push_back(unfold);
  }
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
