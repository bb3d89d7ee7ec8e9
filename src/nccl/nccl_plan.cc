#include "nccl/nccl_plan.h"

#include <algorithm>

#include "common/checks.h"

namespace signlion {
namespace nccl {

using algo::Buffer;
using algo::Range;

namespace {

bool overlaps(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

// Chunk k of each of `transfers` into group k (groups are added as needed).
template <class Transfers>
void appendChunks(const Transfers& transfers, int64_t chunkBytes, bool recv, std::vector<ChunkGroup>* groups) {
  for (size_t t = 0; t < transfers.size(); t++) {
    const algo::Transfer& x = transfers[t];
    const int64_t step = algo::chunkBlocks(x, chunkBytes);
    size_t k = 0;
    for (int64_t b = x.range.begin; b < x.range.end; b += step, k++) {
      if (groups->size() <= k) groups->resize(k + 1);
      Chunk c;
      c.index = static_cast<int>(t);
      c.begin = b;
      c.len = std::min(step, x.range.end - b);
      (recv ? (*groups)[k].recvs : (*groups)[k].sends).push_back(c);
    }
  }
}

// The chunk groups of one step, once its receives are known to be ones this
// executor runs (adds into the counter, stores of results or votes).
ncclResult_t planTransfers(const algo::Step& st, int64_t chunkBytes, StepPlan* sp) {
  for (const algo::Recv& r : st.recvs) {
    if (r.op == algo::RecvOp::kSumWords) {
      WARN("NCCL executor: step %d sums field words by messages; field-sum runs as one ncclAllReduce here", sp->step);
      return ncclInternalError;
    }
    if (r.op == algo::RecvOp::kStore && r.buf != Buffer::kResult && r.buf != Buffer::kVotes) {
      WARN("NCCL executor: step %d stores into buffer %d", sp->step, (int)r.buf);
      return ncclInternalError;
    }
  }
  appendChunks(st.sends, chunkBytes, false, &sp->groups);
  appendChunks(st.recvs, chunkBytes, true, &sp->groups);
  return ncclSuccess;
}

// Adding receives, and coded results both ways, get stage space, in group
// order, so that no two chunks of a step share any. Returns the step's stage
// words.
int64_t assignStage(const algo::Step& st, StepPlan* sp) {
  int64_t off = 0;
  for (ChunkGroup& g : sp->groups) {
    for (Chunk& c : g.sends) {
      const algo::Send& x = st.sends[c.index];
      if (x.coding != algo::Coding::kTrits) continue;
      c.stage = off;
      off += x.wireBytes(c.len) / 8;
    }
    for (Chunk& c : g.recvs) {
      const algo::Recv& r = st.recvs[c.index];
      if (r.op != algo::RecvOp::kAdd && r.coding != algo::Coding::kTrits) continue;
      c.stage = off;
      off += r.wireBytes(c.len) / 8;
      g.hasActions = true;
    }
  }
  return off;
}

// Whether the add of step i's only receive can run fused with the decide
// that opens step i + 1: same range, the sum is the full count the decide
// reads, nothing after step i reads or adds to the counter there, and no
// later step packs (in place, the output the fused kernel writes is the
// input).
bool canFuse(const algo::Schedule& s, size_t i) {
  const algo::Step& st = s.steps[i];
  if (i + 1 >= s.steps.size() || st.recvs.size() != 1) return false;
  const algo::Recv& r = st.recvs[0];
  const algo::Step& next = s.steps[i + 1];
  if (r.op != algo::RecvOp::kAdd || r.range.empty() || next.locals.empty()) return false;
  const algo::Local& d = next.locals[0];
  if (d.op != algo::LocalOp::kDecide || d.src != Buffer::kCounter || !(d.range == r.range) ||
      d.maxCount != r.resultMax || d.width != r.resultWidth)
    return false;
  // The fused kernel's result planes: majorityPlanes, or the sum's planes
  // (P then M) for average; both must be the result buffer's layout.
  if (s.spec.op == ncclSignAverage && r.resultWidth * s.counters != s.resultPlanes) return false;
  for (size_t j = i + 1; j < s.steps.size(); j++) {
    for (const algo::Send& x : s.steps[j].sends)
      if (x.buf == Buffer::kCounter && overlaps(x.range, r.range)) return false;
    for (const algo::Recv& x : s.steps[j].recvs)
      if (x.buf == Buffer::kCounter && overlaps(x.range, r.range)) return false;
    for (size_t l = (j == i + 1 ? 1 : 0); l < s.steps[j].locals.size(); l++) {
      const algo::Local& x = s.steps[j].locals[l];
      if ((x.src == Buffer::kCounter || x.dst == Buffer::kCounter) && overlaps(x.range, r.range)) return false;
      if (x.op == algo::LocalOp::kPackVotes || x.op == algo::LocalOp::kPackFields) return false;
    }
  }
  return true;
}

}  // namespace

ncclResult_t makePlan(const algo::Schedule& s, int64_t chunkBytes, Plan* out) {
  Plan p;
  const int64_t nb = s.nblocks;
  const size_t nsteps = s.steps.size();
  if (nsteps == 0 || chunkBytes < 8) {
    WARN("NCCL executor: cannot plan a schedule of %zu steps with %lld-byte chunks", nsteps, (long long)chunkBytes);
    return ncclInternalError;
  }

  int64_t stageWords = 0;
  if (algo::runsAsOneCollective(s.algo)) {
    // The first step's locals pack, the last one's sum and decide; the ring
    // steps in between only move what one collective moves.
    for (size_t i = 1; i + 1 < nsteps; i++) {
      if (!s.steps[i].locals.empty()) {
        WARN("NCCL executor: %s step %zu has locals; expected a pure exchange",
             s.algo == ncclSignAlgoAllGather ? "allgather" : "field-sum", i);
        return ncclInternalError;
      }
    }
    if (nsteps < 2 || s.steps.back().communicates()) {
      WARN("NCCL executor: the last of %zu steps must be local", nsteps);
      return ncclInternalError;
    }
    for (size_t i : {size_t{0}, nsteps - 1}) {
      StepPlan sp;
      sp.step = static_cast<int>(i);
      for (size_t l = 0; l < s.steps[i].locals.size(); l++) sp.locals.push_back(static_cast<int>(l));
      if (i == 0 && s.nranks > 1 && nb > 0)
        sp.exchange = s.algo == ncclSignAlgoAllGather ? Exchange::kAllGather : Exchange::kAllReduce;
      p.steps.push_back(std::move(sp));
    }
  } else {
    for (size_t i = 0; i < nsteps; i++) {
      StepPlan sp;
      sp.step = static_cast<int>(i);
      for (size_t l = 0; l < s.steps[i].locals.size(); l++) sp.locals.push_back(static_cast<int>(l));
      NCCLCHECK(planTransfers(s.steps[i], chunkBytes, &sp));
      stageWords = std::max(stageWords, assignStage(s.steps[i], &sp));
      p.steps.push_back(std::move(sp));
    }
    for (size_t i = 0; i + 1 < nsteps; i++) {
      if (!canFuse(s, i)) continue;
      p.steps[i].fusedRecv = 0;
      p.steps[i + 1].locals.erase(p.steps[i + 1].locals.begin());
      p.fused = s.steps[i].recvs[0].range;
      for (size_t j = i + 1; j < nsteps; j++)
        for (const algo::Send& x : s.steps[j].sends)
          p.fusedStoresPlanes = p.fusedStoresPlanes || x.buf == Buffer::kResult;
      break;  // ring and halving-doubling decide once
    }
  }

  if (p.fused.empty()) {
    if (nb > 0) p.unpack.push_back(Range{0, nb});
  } else {
    if (p.fused.begin > 0) p.unpack.push_back(Range{0, p.fused.begin});
    if (p.fused.end < nb) p.unpack.push_back(Range{p.fused.end, nb});
  }

  p.layout = algo::layoutScratch(s, stageWords, kScratchAlignWords);
  p.stageWords = stageWords;
  *out = std::move(p);
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
