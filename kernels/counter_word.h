// The bit-sliced counter algebra one word at a time: what a GPU thread does
// for its word (W = uint64_t) or half-word (W = uint32_t) in the add, sumVotes,
// decide and fused kernels. Built from src/bits/bitslice.h exactly as the CPU
// kernels (src/bits/kernels_portable.cc) use it, and host-device so the CPU
// tests compare every body here with the CPU kernels. Planes are read through
// callables, plane(p) -> W, so one body serves every memory layout.
#pragma once

#include <cstdint>

#include "bits/bitslice.h"
#include "nccl_sign.h"

namespace signlion {
namespace kernels {

// Planes addWord reads before it stores any of them.
constexpr int kAddBatch = 4;

// out = a + b (widths wa, wb; wout planes written through store(p, word)).
// Carries past wout are lost, as in bits::Kernels::add. The planes are read
// kAddBatch at a time before the batch is stored: out may be a (a store
// cannot change a plane not yet read), and since the compiler cannot move a
// load of a past a store that may alias it, batching is what keeps several
// loads in flight per thread.
template <typename W, typename PlaneA, typename PlaneB, typename Store>
SIGNLION_HD void addWord(PlaneA a, int wa, PlaneB b, int wb, Store store, int wout) {
  W carry = 0;
  for (int p0 = 0; p0 < wout; p0 += kAddBatch) {
    W x[kAddBatch], y[kAddBatch];
    SIGNLION_UNROLL
    for (int k = 0; k < kAddBatch; k++) {
      const int p = p0 + k;
      x[k] = p < wa && p < wout ? a(p) : W(0);
      y[k] = p < wb && p < wout ? b(p) : W(0);
    }
    SIGNLION_UNROLL
    for (int k = 0; k < kAddBatch; k++) {
      if (p0 + k < wout) store(p0 + k, bits::fullAdd(x[k], y[k], carry));
    }
  }
}

// The most vote slots sumVotesWord adds in registers: counts up to 65535.
constexpr int kMaxSumVotesWidth = 16;

// count = the sum of nslots 1-bit votes (vote(r) -> W), in kMaxSumVotesWidth
// planes of which the first widthFor(nslots) may be non-zero. Adding vote r
// ripples through widthFor(r + 1) planes only: no count can be larger yet.
template <typename W, typename Vote>
SIGNLION_HD void sumVotesWord(Vote vote, int nslots, W (&count)[kMaxSumVotesWidth]) {
  SIGNLION_UNROLL
  for (int p = 0; p < kMaxSumVotesWidth; p++) count[p] = 0;
  int width = 1;  // widthFor(r + 1)
  for (int r = 0; r < nslots; r++) {
    if (((r + 1) >> width) != 0) width++;
    W carry = vote(r);
    SIGNLION_UNROLL
    for (int p = 0; p < kMaxSumVotesWidth; p++) {
      if (p < width) count[p] = bits::fullAdd(count[p], W(0), carry);
    }
  }
}

// sumVotesWord with the votes of kBatch slots loaded before any is added: a
// thread then has kBatch independent loads in flight instead of one (the
// adds of a slot wait for its load; the loads of a batch do not wait for
// each other). The counts have kWidth planes: nslots < 2^kWidth. Same counts
// as sumVotesWord.
template <int kBatch, int kWidth, typename W, typename Vote>
SIGNLION_HD void sumVotesBatched(Vote vote, int nslots, W (&count)[kWidth]) {
  SIGNLION_UNROLL
  for (int p = 0; p < kWidth; p++) count[p] = W(0);
  int width = 1;  // widthFor(r + 1)
  for (int r0 = 0; r0 < nslots; r0 += kBatch) {
    W v[kBatch];
    SIGNLION_UNROLL
    for (int k = 0; k < kBatch; k++) v[k] = r0 + k < nslots ? vote(r0 + k) : W(0);
    SIGNLION_UNROLL
    for (int k = 0; k < kBatch; k++) {
      const int r = r0 + k;
      if (r >= nslots) break;
      if (((r + 1) >> width) != 0) width++;
      W carry = v[k];
      SIGNLION_UNROLL
      for (int p = 0; p < kWidth; p++) {
        if (p < width) count[p] = bits::fullAdd(count[p], W(0), carry);
      }
    }
  }
}

// Two consecutive uint64 words handled as one, lane by lane: what a thread
// that reads 16 bytes per plane adds and compares (W of the bodies above).
struct WordPair {
  uint64_t lo, hi;
  SIGNLION_HD WordPair() : lo(0), hi(0) {}
  SIGNLION_HD explicit WordPair(uint64_t both) : lo(both), hi(both) {}
  SIGNLION_HD WordPair(uint64_t l, uint64_t h) : lo(l), hi(h) {}
  SIGNLION_HD friend WordPair operator^(WordPair a, WordPair b) { return WordPair(a.lo ^ b.lo, a.hi ^ b.hi); }
  SIGNLION_HD friend WordPair operator&(WordPair a, WordPair b) { return WordPair(a.lo & b.lo, a.hi & b.hi); }
  SIGNLION_HD friend WordPair operator|(WordPair a, WordPair b) { return WordPair(a.lo | b.lo, a.hi | b.hi); }
  SIGNLION_HD friend WordPair operator~(WordPair a) { return WordPair(~a.lo, ~a.hi); }
};

// The majority comparison of bits::Kernels::decideBits for one word: P against
// M (ternary), else P against floor(N / 2), where 2P - N == 0 only for even N.
template <typename W, typename PlaneP, typename PlaneM>
SIGNLION_HD void compareMajority(PlaneP P, int wp, PlaneM M, int wm, bool ternary, int nranks, W& gt, W& eq) {
  const W ones = ~W(0);
  if (ternary) {
    bits::compareCounters<W>(P, wp, M, wm, ones, gt, eq);
  } else {
    bits::compareWithConstant<W>(P, wp, (uint64_t)(nranks / 2), ones, gt, eq);
    if (nranks % 2 == 1) eq = 0;
  }
}

// The result planes of a comparison: (+1, -1) planes = (gt, lt) when two
// planes are kept, else one plane where a tie takes the tie rule's side.
template <typename W>
SIGNLION_HD void resultPlanes(W gt, W eq, bool twoPlanes, ncclSignTieRule_t tie, W& r0, W& r1) {
  if (twoPlanes) {
    r0 = gt;
    r1 = ~(gt | eq);
  } else {
    r0 = tie == ncclSignTiePositive ? (gt | eq) : gt;
    r1 = 0;
  }
}

// The fused last step's majority for one word: the sum of two counters (each
// P, and M when ternary; sumWidth planes, carries past it lost, as add()
// would store it) compared as compareMajority compares a stored sum, without
// storing it: the ripple yields the sum's planes from the lowest up and
// bits::compareStep consumes them in that order.
template <typename W, typename AccP, typename InP, typename AccM, typename InM>
SIGNLION_HD void addCompareMajority(AccP accP, int accPw, InP inP, int inPw, AccM accM, int accMw, InM inM, int inMw,
                                    bool ternary, int sumWidth, int nranks, W& gt, W& eq) {
  const W zero = 0, ones = ~W(0);
  const uint64_t half = (uint64_t)(nranks / 2);
  // compareWithConstant looks at every plane of the constant, even above the
  // counter's width (where the counter is zero).
  int top = sumWidth;
  if (!ternary) {
    while (top < 64 && (half >> top) != 0) top++;
  }
  W carryP = zero, carryM = zero;
  gt = zero;
  eq = ones;
  for (int p = 0; p < top; p++) {
    W s = zero, other;
    if (p < sumWidth) s = bits::fullAdd(p < accPw ? accP(p) : zero, p < inPw ? inP(p) : zero, carryP);
    if (ternary) {
      other = bits::fullAdd(p < accMw ? accM(p) : zero, p < inMw ? inM(p) : zero, carryM);
    } else {
      other = ((half >> p) & 1) ? ones : zero;
    }
    bits::compareStep(s, other, gt, eq);
  }
  if (!ternary && nranks % 2 == 1) eq = zero;
}

// addCompareMajority with the plane loop unrolled kMaxTop times, for planes
// held in registers (accP(p) ... read arrays at constant indices). The
// caller guarantees sumWidth <= kMaxTop and, without M, nranks / 2 <
// 2^kMaxTop (every plane of the constant below kMaxTop). Same gt and eq.
template <int kMaxTop, typename W, typename AccP, typename InP, typename AccM, typename InM>
SIGNLION_HD void addCompareMajorityUnrolled(AccP accP, int accPw, InP inP, int inPw, AccM accM, int accMw, InM inM,
                                            int inMw, bool ternary, int sumWidth, int nranks, W& gt, W& eq) {
  const W zero = 0, ones = ~W(0);
  const uint64_t half = (uint64_t)(nranks / 2);
  int top = sumWidth;
  if (!ternary) {
    while (top < kMaxTop && (half >> top) != 0) top++;
  }
  W carryP = zero, carryM = zero;
  gt = zero;
  eq = ones;
  SIGNLION_UNROLL
  for (int p = 0; p < kMaxTop; p++) {
    if (p >= top) break;
    W s = zero, other;
    if (p < sumWidth) s = bits::fullAdd(p < accPw ? accP(p) : zero, p < inPw ? inP(p) : zero, carryP);
    if (ternary) {
      other = bits::fullAdd(p < accMw ? accM(p) : zero, p < inMw ? inM(p) : zero, carryM);
    } else {
      other = ((half >> p) & 1) ? ones : zero;
    }
    bits::compareStep(s, other, gt, eq);
  }
  if (!ternary && nranks % 2 == 1) eq = zero;
}

}  // namespace kernels
}  // namespace signlion
