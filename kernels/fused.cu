// addDecideUnpack: the last step of a schedule in one pass, so the sum of the
// local counter and the received one is never stored (unless asked for).
//  - majority: a warp per chunk of 1024 elements; lane l adds and compares
//    half-word l of the two counters plane by plane from the lowest
//    (kernels/counter_word.h, addCompareMajority), the lanes then write the
//    chunk's elements from the result half-words (kernels/result_store.cuh).
//  - average: a thread per vector of elements adds the two counters' counts as
//    integers (mod 2^sumWidth, the width the sum would be stored with) and
//    divides; the sum's planes, when asked for, are a separate grid-stride
//    loop over half-words.
// Variants (kernels/variants.h; arguments a variant cannot take, as named
// below, run variant 0):
//  - majority 1 chunk-prefetch: each lane loads all its planes' half-words
//    before the first add (every load in flight at once), then adds and
//    compares in registers (sums of up to kPrefetchPlanes planes: N <= 255).
//  - average 1 chunk-table: lane l adds half-word l of the two counters in
//    bit-sliced form (the planes read once, coalesced), stores the sum's
//    planes when asked for (in the same pass: no second loop), shuffles
//    bring each lane the counts of its elements and a table of the results
//    of every sum the counters can make, spread over the warp, replaces the
//    divisions (kernels/result_store.cuh, storeAverageChunk; sums of more
//    than 64 values take variant 0).
#include "kernels/counter_word.h"
#include "kernels/launch.cuh"
#include "kernels/result_store.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace signlion {
namespace kernels {

namespace {

struct FusedArgs {
  PlaneWords accP, inP, accM, inM;  // M: width 0 unless ternary
  bool ternary;
  int sumWidth;
  uint32_t sumMask;  // low sumWidth bits
  int nranks;
  ncclSignTieRule_t tie;
  bool twoPlanes;
  uint32_t* planesOut;  // as half-words, or null
  size_t so;            // its plane stride in half-words
  size_t nhw;           // half-words of every plane: 2 * numWords(count)
  size_t count;
};

template <typename E>
SIGNLION_KERNEL fusedMajorityKernel(FusedArgs a, char* __restrict__ dst, bool vec) {
  const size_t chunks = (a.nhw + 31) / 32;
  for (size_t c = globalWarp(); c < chunks; c += warpCount()) {
    const size_t hw = c * 32 + laneId();
    uint32_t r0 = 0, r1 = 0;
    if (hw < a.nhw) {
      uint32_t gt, eq;
      addCompareMajority<uint32_t>([&](int p) { return a.accP.at(p, hw); }, a.accP.width,
                                   [&](int p) { return a.inP.at(p, hw); }, a.inP.width,
                                   [&](int p) { return a.accM.at(p, hw); }, a.accM.width,
                                   [&](int p) { return a.inM.at(p, hw); }, a.inM.width, a.ternary, a.sumWidth,
                                   a.nranks, gt, eq);
      resultPlanes(gt, eq, a.twoPlanes, a.tie, r0, r1);
      if (a.planesOut != nullptr) {
        a.planesOut[hw] = r0;
        if (a.twoPlanes) a.planesOut[a.so + hw] = r1;
      }
    }
    storeMajorityChunk<E>(r0, r1, a.twoPlanes, c * kChunkElems, a.count, dst, vec);
  }
}

template <typename E>
SIGNLION_KERNEL fusedAverageKernel(FusedArgs a, char* __restrict__ dst, bool vec) {
  if (a.planesOut != nullptr) {
    // The sum's planes: P at planes [0, sumWidth), M at [sumWidth, 2 sumWidth).
    for (size_t hw = globalThread(); hw < a.nhw; hw += threadCount()) {
      addWord<uint32_t>([&](int p) { return a.accP.at(p, hw); }, a.accP.width,
                        [&](int p) { return a.inP.at(p, hw); }, a.inP.width,
                        [&](int p, uint32_t w) { a.planesOut[p * a.so + hw] = w; }, a.sumWidth);
      if (a.ternary) {
        uint32_t* m = a.planesOut + (size_t)a.sumWidth * a.so;
        addWord<uint32_t>([&](int p) { return a.accM.at(p, hw); }, a.accM.width,
                          [&](int p) { return a.inM.at(p, hw); }, a.inM.width,
                          [&](int p, uint32_t w) { m[p * a.so + hw] = w; }, a.sumWidth);
      }
    }
  }
  storeAverages<E>(
      [&](size_t e, auto& s) {
        constexpr int N = sizeof(s) / sizeof(s[0]);
        int x[N], y[N];
        a.accP.counts(e, x);
        a.inP.counts(e, y);
        SIGNLION_UNROLL
        for (int k = 0; k < N; k++) s[k] = (int)(((uint32_t)x[k] + (uint32_t)y[k]) & a.sumMask);
        if (a.ternary) {
          a.accM.counts(e, x);
          a.inM.counts(e, y);
          SIGNLION_UNROLL
          for (int k = 0; k < N; k++) s[k] -= (int)(((uint32_t)x[k] + (uint32_t)y[k]) & a.sumMask);
        } else {
          SIGNLION_UNROLL
          for (int k = 0; k < N; k++) s[k] = 2 * s[k] - a.nranks;
        }
      },
      a.nranks, a.count, dst, vec);
}

// A lane's half-word hw of planes [0, min(width, kPlanes)) of a counter,
// zero above and past nhw.
template <int kPlanes>
SIGNLION_DEVICE void loadChunkPlanes(const PlaneWords& c, size_t hw, size_t nhw, uint32_t (&w)[kPlanes]) {
  SIGNLION_UNROLL
  for (int q = 0; q < kPlanes; q++) w[q] = q < c.width && hw < nhw ? c.at(q, hw) : 0u;
}

// Planes per counter the prefetch variant keeps in registers: 4 counters of
// 8 planes are 32 registers, which leaves room for more threads per SM
// than 16 would.
constexpr int kPrefetchPlanes = 8;

template <typename E>
SIGNLION_KERNEL fusedMajorityPrefetchKernel(FusedArgs a, char* __restrict__ dst, bool vec) {
  const size_t chunks = (a.nhw + 31) / 32;
  for (size_t c = globalWarp(); c < chunks; c += warpCount()) {
    const size_t hw = c * 32 + laneId();
    uint32_t accP[kPrefetchPlanes], inP[kPrefetchPlanes], accM[kPrefetchPlanes], inM[kPrefetchPlanes];
    loadChunkPlanes(a.accP, hw, a.nhw, accP);
    loadChunkPlanes(a.inP, hw, a.nhw, inP);
    loadChunkPlanes(a.accM, hw, a.nhw, accM);
    loadChunkPlanes(a.inM, hw, a.nhw, inM);
    uint32_t r0 = 0, r1 = 0;
    if (hw < a.nhw) {
      uint32_t gt, eq;
      addCompareMajorityUnrolled<kPrefetchPlanes, uint32_t>(
          [&](int p) { return accP[p]; }, a.accP.width, [&](int p) { return inP[p]; }, a.inP.width,
          [&](int p) { return accM[p]; }, a.accM.width, [&](int p) { return inM[p]; }, a.inM.width, a.ternary,
          a.sumWidth, a.nranks, gt, eq);
      resultPlanes(gt, eq, a.twoPlanes, a.tie, r0, r1);
      if (a.planesOut != nullptr) {
        a.planesOut[hw] = r0;
        if (a.twoPlanes) a.planesOut[a.so + hw] = r1;
      }
    }
    storeMajorityChunk<E>(r0, r1, a.twoPlanes, c * kChunkElems, a.count, dst, vec);
  }
}

// The sum of a lane's half-words of two counters, sumWidth planes (carries
// past it lost), zero above.
SIGNLION_DEVICE void addChunkPlanes(const PlaneWords& x, const PlaneWords& y, int sumWidth, size_t hw, size_t nhw,
                                    uint32_t (&sum)[kAveragePlanes]) {
  uint32_t a[kAveragePlanes], b[kAveragePlanes];
  loadChunkPlanes(x, hw, nhw, a);
  loadChunkPlanes(y, hw, nhw, b);
  uint32_t carry = 0;
  SIGNLION_UNROLL
  for (int q = 0; q < kAveragePlanes; q++) sum[q] = q < sumWidth ? bits::fullAdd(a[q], b[q], carry) : 0u;
}

template <typename E>
SIGNLION_KERNEL fusedAverageChunkKernel(FusedArgs a, AverageTableEntries entries, char* __restrict__ dst, bool vec) {
  const AverageTable table = spreadAverageTable(entries);
  const size_t chunks = (a.nhw + 31) / 32;
  for (size_t c = globalWarp(); c < chunks; c += warpCount()) {
    const size_t hw = c * 32 + laneId();
    uint32_t sp[kAveragePlanes], sm[kAveragePlanes];
    addChunkPlanes(a.accP, a.inP, a.sumWidth, hw, a.nhw, sp);
    if (a.ternary) {
      addChunkPlanes(a.accM, a.inM, a.sumWidth, hw, a.nhw, sm);
    } else {
      SIGNLION_UNROLL
      for (int q = 0; q < kAveragePlanes; q++) sm[q] = 0;
    }
    if (a.planesOut != nullptr && hw < a.nhw) {
      // The sum's planes: P at planes [0, sumWidth), M at [sumWidth, 2 sumWidth).
      uint32_t* m = a.planesOut + (size_t)a.sumWidth * a.so;
      SIGNLION_UNROLL
      for (int q = 0; q < kAveragePlanes; q++) {
        if (q >= a.sumWidth) break;
        a.planesOut[q * a.so + hw] = sp[q];
        if (a.ternary) m[q * a.so + hw] = sm[q];
      }
    }
    storeAverageChunk<E>(sp, a.sumWidth, sm, a.sumWidth, a.ternary, table, c * kChunkElems, a.count, dst, vec);
  }
}

}  // namespace

cudaError_t addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                            ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* planesOut,
                            size_t so, size_t count, ncclDataType_t dt, void* dst, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const bool ternary = acc.neg != nullptr;
  if (nranks < 1 || sumWidth < 1 || op < 0 || op >= ncclSignNumOps || tie < 0 || tie >= ncclSignNumTieRules ||
      (in.neg != nullptr) != ternary || (zero == ncclSignZeroAbstain) != ternary)
    return cudaErrorInvalidValue;

  FusedArgs a;
  a.accP = PlaneWords::of(acc.pos, acc.posWidth, acc.posStride);
  a.inP = PlaneWords::of(in.pos, in.posWidth, in.posStride);
  a.accM = PlaneWords::of(acc.neg, ternary ? acc.negWidth : 0, acc.negStride);
  a.inM = PlaneWords::of(in.neg, ternary ? in.negWidth : 0, in.negStride);
  a.ternary = ternary;
  a.sumWidth = sumWidth;
  a.sumMask = sumWidth >= 32 ? ~0u : (1u << sumWidth) - 1;
  a.nranks = nranks;
  a.tie = tie;
  a.twoPlanes = bits::majorityPlanes(nranks, zero, tie) == 2;
  a.planesOut = reinterpret_cast<uint32_t*>(planesOut);
  a.so = 2 * so;
  a.nhw = 2 * bits::numWords(count);
  a.count = count;
  const bool vec = aligned16(dst);
  char* out = static_cast<char*>(dst);
  const size_t warps = (a.nhw + 31) / 32;
  if (op == ncclSignMajority) {
    // The prefetch variant keeps each counter's planes in kPrefetchPlanes
    // registers; the sum and the constant N / 2 must fit them too.
    const bool prefetch = currentVariant(Tuned::kFusedMajority) == 1 && sumWidth <= kPrefetchPlanes &&
                          (nranks / 2) >> kPrefetchPlanes == 0;
    return withElemTraits(dt, [&](auto traits) {
      using E = decltype(traits);
      if (prefetch) return launchFor(warps * 32, fusedMajorityPrefetchKernel<E>, stream, a, out, vec);
      return launchFor(warps * 32, fusedMajorityKernel<E>, stream, a, out, vec);
    });
  }
  const bool chunk = currentVariant(Tuned::kFusedAverage) == 1;
  return withFloatTraits(dt, [&](auto traits) {
    using E = decltype(traits);
    AverageTableEntries table;
    if (chunk && makeAverageTable<E>(sumWidth, sumWidth, ternary, nranks, &table))
      return launchFor(warps * 32, fusedAverageChunkKernel<E>, stream, a, table, out, vec);
    const size_t vectors = vec ? (count + E::kVec - 1) / E::kVec : count;
    return launchFor(vectors > a.nhw ? vectors : a.nhw, fusedAverageKernel<E>, stream, a, out, vec);
  });
}

}  // namespace kernels
}  // namespace signlion
