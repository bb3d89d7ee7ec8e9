// decideBits, unpack and average: from counters to results.
//  - decideBits: one uint64 word per thread (kernels/counter_word.h).
//  - unpack: a warp per chunk of 1024 elements; each lane reads one result
//    half-word per plane, then kernels/result_store.cuh spreads them to the
//    lanes that write the elements. Variants (kernels/variants.h): 0 chunk,
//    one chunk per step; 1 chunk-x2 and 2 chunk-x4, the result half-words of
//    2 or 4 chunks loaded before any is written (more loads in flight).
//  - average: variant 0 vector, a thread per vector of elements, which reads
//    its bits of every counter plane (neighbouring lanes read the same
//    half-word: one transaction) and divides; variant 1 chunk-table, a warp
//    per chunk of 1024 elements: lane l reads half-word l of every plane
//    (coalesced, all loads in flight at once), shuffles bring each lane its
//    elements' bits, and the result of each sum is looked up in a table of
//    the results of every sum the counters can make, which the launcher
//    computes (result_store.cuh; counters that can make more than 64 sums
//    take variant 0).
#include "kernels/counter_word.h"
#include "kernels/launch.cuh"
#include "kernels/result_store.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace signlion {
namespace kernels {

namespace {

SIGNLION_KERNEL decideKernel(bits::Counts c, int nranks, ncclSignTieRule_t tie, bool two, uint64_t* __restrict__ out,
                             size_t so, size_t nwords) {
  const bool ternary = c.neg != nullptr;
  for (size_t i = globalThread(); i < nwords; i += threadCount()) {
    uint64_t gt, eq, r0, r1;
    compareMajority<uint64_t>([&](int p) { return c.pos[p * c.posStride + i]; }, c.posWidth,
                              [&](int p) { return c.neg[p * c.negStride + i]; }, c.negWidth, ternary, nranks, gt,
                              eq);
    resultPlanes(gt, eq, two, tie, r0, r1);
    out[i] = r0;
    if (two) out[so + i] = r1;
  }
}

template <typename E>
SIGNLION_KERNEL unpackKernel(const uint32_t* __restrict__ plus, const uint32_t* __restrict__ minus, size_t nhw,
                             size_t count, char* __restrict__ dst, bool vec) {
  const size_t chunks = (nhw + 31) / 32;
  for (size_t c = globalWarp(); c < chunks; c += warpCount()) {
    const size_t hw = c * 32 + laneId();
    const uint32_t r0 = hw < nhw ? plus[hw] : 0u;
    const uint32_t r1 = minus != nullptr && hw < nhw ? minus[hw] : 0u;
    storeMajorityChunk<E>(r0, r1, minus != nullptr, c * kChunkElems, count, dst, vec);
  }
}

// unpack, kChunks chunks per step of a warp: their loads first, then the stores.
template <typename E, int kChunks>
SIGNLION_KERNEL unpackChunksKernel(const uint32_t* __restrict__ plus, const uint32_t* __restrict__ minus, size_t nhw,
                                   size_t count, char* __restrict__ dst, bool vec) {
  const size_t chunks = (nhw + 31) / 32;
  for (size_t c0 = globalWarp() * kChunks; c0 < chunks; c0 += warpCount() * kChunks) {
    uint32_t r0[kChunks], r1[kChunks];
    SIGNLION_UNROLL
    for (int u = 0; u < kChunks; u++) {
      const size_t hw = (c0 + u) * 32 + laneId();
      r0[u] = hw < nhw ? plus[hw] : 0u;
      r1[u] = minus != nullptr && hw < nhw ? minus[hw] : 0u;
    }
    SIGNLION_UNROLL
    for (int u = 0; u < kChunks; u++) {
      if (c0 + u >= chunks) break;  // warp-uniform
      storeMajorityChunk<E>(r0[u], r1[u], minus != nullptr, (c0 + u) * kChunkElems, count, dst, vec);
    }
  }
}

template <typename E>
SIGNLION_KERNEL averageChunkKernel(PlaneWords pos, PlaneWords neg, bool ternary, AverageTableEntries entries, size_t nhw,
                                   size_t count, char* __restrict__ dst, bool vec) {
  const AverageTable table = spreadAverageTable(entries);
  const size_t chunks = (nhw + 31) / 32;
  for (size_t c = globalWarp(); c < chunks; c += warpCount()) {
    const size_t hw = c * 32 + laneId();
    uint32_t sp[kAveragePlanes], sm[kAveragePlanes];
    SIGNLION_UNROLL
    for (int q = 0; q < kAveragePlanes; q++) {
      sp[q] = q < pos.width && hw < nhw ? pos.at(q, hw) : 0u;
      sm[q] = ternary && q < neg.width && hw < nhw ? neg.at(q, hw) : 0u;
    }
    storeAverageChunk<E>(sp, pos.width, sm, neg.width, ternary, table, c * kChunkElems, count, dst, vec);
  }
}

template <typename E>
SIGNLION_KERNEL averageKernel(PlaneWords pos, PlaneWords neg, bool ternary, int nranks, size_t count,
                              char* __restrict__ dst, bool vec) {
  storeAverages<E>(
      [&](size_t e, auto& s) {
        constexpr int N = sizeof(s) / sizeof(s[0]);
        int p[N], m[N];
        pos.counts(e, p);
        if (ternary) neg.counts(e, m);
        SIGNLION_UNROLL
        for (int k = 0; k < N; k++) s[k] = ternary ? p[k] - m[k] : 2 * p[k] - nranks;
      },
      nranks, count, dst, vec);
}

}  // namespace

cudaError_t decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so,
                       size_t nwords, cudaStream_t stream) {
  if (nwords == 0) return cudaSuccess;
  if (nranks < 1 || tie < 0 || tie >= ncclSignNumTieRules) return cudaErrorInvalidValue;
  // The result's plane count is the launch's, not each thread's, to decide.
  const bool two =
      bits::majorityPlanes(nranks, c.neg != nullptr ? ncclSignZeroAbstain : ncclSignZeroPositive, tie) == 2;
  return launchFor(nwords, decideKernel, stream, c, nranks, tie, two, out, so, nwords);
}

cudaError_t unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst,
                   cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (nplanes != 1 && nplanes != 2) return cudaErrorInvalidValue;
  const uint32_t* plus = reinterpret_cast<const uint32_t*>(planes);
  const uint32_t* minus = nplanes == 2 ? plus + 2 * stride : nullptr;
  const size_t nhw = (count + 31) / 32;
  const size_t warps = (nhw + 31) / 32;
  const bool vec = aligned16(dst);
  return withElemTraits(dt, [&](auto traits) {
    using E = decltype(traits);
    char* out = static_cast<char*>(dst);
    switch (currentVariant(Tuned::kUnpack)) {
      case 1: return launchFor((warps + 1) / 2 * 32, unpackChunksKernel<E, 2>, stream, plus, minus, nhw, count, out, vec);
      case 2: return launchFor((warps + 3) / 4 * 32, unpackChunksKernel<E, 4>, stream, plus, minus, nhw, count, out, vec);
      default: return launchFor(warps * 32, unpackKernel<E>, stream, plus, minus, nhw, count, out, vec);
    }
  });
}

cudaError_t average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst,
                    cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (nranks < 1) return cudaErrorInvalidValue;
  const bool ternary = c.neg != nullptr;
  const PlaneWords pos = PlaneWords::of(c.pos, c.posWidth, c.posStride);
  const PlaneWords neg = PlaneWords::of(c.neg, ternary ? c.negWidth : 0, c.negStride);
  const bool vec = aligned16(dst);
  const bool chunk = currentVariant(Tuned::kAverage) == 1;
  return withFloatTraits(dt, [&](auto traits) {
    using E = decltype(traits);
    AverageTableEntries table;
    if (chunk && makeAverageTable<E>(pos.width, neg.width, ternary, nranks, &table)) {
      const size_t nhw = 2 * bits::numWords(count);
      return launchFor((nhw + 31) / 32 * 32, averageChunkKernel<E>, stream, pos, neg, ternary, table, nhw, count,
                       static_cast<char*>(dst), vec);
    }
    const size_t threads = vec ? (count + E::kVec - 1) / E::kVec : count;
    return launchFor(threads, averageKernel<E>, stream, pos, neg, ternary, nranks, count, static_cast<char*>(dst),
                     vec);
  });
}

}  // namespace kernels
}  // namespace signlion
