// All-gather of votes: a ring all-gather of every rank's 1-bit vote vector
// (both planes in ternary mode), then every rank adds all N and decides the
// whole message locally. N-1 message steps of 1 bit per element; no result
// travels. See docs/ALGORITHMS.md.
#include "algo/ring.h"

namespace signlion {
namespace algo {
namespace detail {

void buildAllGather(Schedule* s) {
  const int n = s->nranks, r = s->rank, next = ringNext(*s), prev = ringPrev(*s);
  const Range all{0, s->nblocks};
  s->counterMax = n;
  s->counterWidth = counterWidth(n);
  s->voteSlots = n;

  // Slot i holds rank i's votes. In step k rank r forwards slot r-k, the one
  // it packed (k = 0) or received in the step before: a ring pass over N
  // one-slot units, whose unit index names the slot.
  auto slotOf = [&](int i) { return ((i % n) + n) % n; };
  Step pack;
  pack.locals.push_back(packVotes(Buffer::kVotes, r, s->nblocks));
  appendRingPass(
      s, n, 0, std::move(pack),
      [&](Range out, int) {
        Send m = makeSend(next, Buffer::kVotes, all, s->counters, 1);
        m.slot = slotOf(static_cast<int>(out.begin));
        return m;
      },
      [&](Range in, int) {
        Recv m = makeStoreRecv(prev, Buffer::kVotes, all, s->counters);
        m.slot = slotOf(static_cast<int>(in.begin));
        m.width = 1;
        m.maxCount = 1;
        return m;
      });
  for (Step& st : s->steps) {  // an empty message carries nothing: drop it
    st.anyRankCommunicates = st.anyRankCommunicates && s->nblocks > 0;
    auto dropEmpty = [](auto& v) {
      for (size_t i = v.size(); i-- > 0;)
        if (v[i].range.empty()) v.erase(v.begin() + i);
    };
    dropEmpty(st.sends);
    dropEmpty(st.recvs);
  }

  Step local;
  Local sum;
  sum.op = LocalOp::kSumVotes;
  sum.dst = Buffer::kCounter;
  sum.range = all;
  sum.maxCount = n;
  sum.width = counterWidth(n);
  local.locals.push_back(sum);
  local.locals.push_back(decide(Buffer::kCounter, all, n, counterWidth(n)));
  s->steps.push_back(std::move(local));
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
