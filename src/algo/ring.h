// One pass of a ring over N ranks (a reduce-scatter or an all-gather), shared
// by the ring algorithm and the field-sum all-reduce.
#pragma once

#include <utility>

#include "algo/schedule.h"

namespace signlion {
namespace algo {
namespace detail {

// Appends N-1 steps (one local-only step for N = 1). `units` units (blocks or
// words) are split into N shards; in step k rank r sends shard r+shift-k to
// rank r+1 and receives shard r+shift-1-k from rank r-1 (shift 0: a
// reduce-scatter that leaves shard r+1 complete on rank r; shift 1: the
// all-gather of those shards). `first` (its locals) becomes the first step.
// makeSend(range, k) / makeRecv(range, k) build the messages; empty shards
// travel not at all.
template <class SendFn, class RecvFn>
void appendRingPass(Schedule* s, int64_t units, int shift, Step first, SendFn makeSend, RecvFn makeRecv) {
  const int n = s->nranks, r = s->rank;
  auto shard = [&](int i) { return shardRange(units, n, ((i % n) + n) % n); };
  if (n == 1) s->steps.push_back(std::move(first));
  for (int k = 0; k < n - 1; k++) {
    Step st = k == 0 ? std::move(first) : Step();
    Range out = shard(r + shift - k), in = shard(r + shift - 1 - k);
    st.anyRankCommunicates = units > 0;  // every shard moves in every step
    if (!out.empty()) st.sends.push_back(makeSend(out, k));
    if (!in.empty()) st.recvs.push_back(makeRecv(in, k));
    s->steps.push_back(std::move(st));
  }
}

inline int ringNext(const Schedule& s) { return (s.rank + 1) % s.nranks; }
inline int ringPrev(const Schedule& s) { return (s.rank + s.nranks - 1) % s.nranks; }

}  // namespace detail
}  // namespace algo
}  // namespace signlion
