// add and sumVotes: bit-sliced counter sums (kernels/counter_word.h),
// grid-stride. Every plane access of a warp is 32 consecutive words (or word
// pairs), so each plane is read and written coalesced.
// sumVotes has variants (kernels/variants.h), all with the counts in registers:
//  0 word:        one uint64 word per thread, one vote load in flight;
//  1 word-batch8: one word per thread, 8 slots' loads in flight at a time;
//  2 pair-batch8: two words per thread (a 16-byte load per slot when the
//                 planes allow it), 8 slots' loads in flight: 128 bytes.
// The batched variants count up to 255 slots; more take variant 0.
#include "kernels/counter_word.h"
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace signlion {
namespace kernels {

namespace {

// No __restrict__: out may be a.
SIGNLION_KERNEL addKernel(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out,
                          int wout, size_t so, size_t nwords) {
  for (size_t i = globalThread(); i < nwords; i += threadCount()) {
    addWord<uint64_t>([&](int p) { return a[p * sa + i]; }, wa, [&](int p) { return b[p * sb + i]; }, wb,
                      [&](int p, uint64_t w) { out[p * so + i] = w; }, wout);
  }
}

SIGNLION_KERNEL sumVotesKernel(const uint64_t* __restrict__ votes, int nslots, size_t slotStride,
                               uint64_t* __restrict__ out, int wout, size_t so, size_t nwords) {
  for (size_t i = globalThread(); i < nwords; i += threadCount()) {
    uint64_t count[kMaxSumVotesWidth];
    sumVotesWord<uint64_t>([&](int r) { return votes[r * slotStride + i]; }, nslots, count);
    SIGNLION_UNROLL
    for (int p = 0; p < kMaxSumVotesWidth; p++) {
      if (p < wout) out[p * so + i] = count[p];
    }
    for (int p = kMaxSumVotesWidth; p < wout; p++) out[p * so + i] = 0;
  }
}

// Slots loaded per batch by the batched variants, and the planes of their
// counts: up to 255 slots (more take variant 0). Half of kMaxSumVotesWidth's
// registers, so more threads fit on an SM.
constexpr int kSumVotesBatch = 8;
constexpr int kBatchedWidth = 8;

// The counts' planes of one word (or pair) stored: planes past kWidth are
// zero.
template <int kWidth, typename W, typename Store>
SIGNLION_DEVICE void storeCounts(const W (&count)[kWidth], int wout, Store store) {
  SIGNLION_UNROLL
  for (int p = 0; p < kWidth; p++) {
    if (p < wout) store(p, count[p]);
  }
  for (int p = kWidth; p < wout; p++) store(p, W(0));
}

SIGNLION_KERNEL sumVotesBatchKernel(const uint64_t* __restrict__ votes, int nslots, size_t slotStride,
                                    uint64_t* __restrict__ out, int wout, size_t so, size_t nwords) {
  for (size_t i = globalThread(); i < nwords; i += threadCount()) {
    uint64_t count[kBatchedWidth];
    sumVotesBatched<kSumVotesBatch, kBatchedWidth, uint64_t>([&](int r) { return votes[r * slotStride + i]; }, nslots,
                                                             count);
    storeCounts(count, wout, [&](int p, uint64_t w) { out[p * so + i] = w; });
  }
}

// Words 2j and 2j + 1 per thread, j < nwords / 2; the last word of an odd
// nwords by the first thread. vec: every slot's and plane's pair is 16-byte
// aligned (votes, out, slotStride and so allow it), read and written as one
// vector; else as two words.
SIGNLION_KERNEL sumVotesPairKernel(const uint64_t* __restrict__ votes, int nslots, size_t slotStride,
                                   uint64_t* __restrict__ out, int wout, size_t so, size_t nwords, bool vec) {
  const size_t pairs = nwords / 2;
  for (size_t j = globalThread(); j < pairs; j += threadCount()) {
    const size_t i = 2 * j;
    WordPair count[kBatchedWidth];
    sumVotesBatched<kSumVotesBatch, kBatchedWidth, WordPair>(
        [&](int r) {
          const uint64_t* p = votes + r * slotStride + i;
          if (vec) {
            const uint4 x = *reinterpret_cast<const uint4*>(p);
            return WordPair((uint64_t)x.x | (uint64_t)x.y << 32, (uint64_t)x.z | (uint64_t)x.w << 32);
          }
          return WordPair(p[0], p[1]);
        },
        nslots, count);
    storeCounts(count, wout, [&](int p, WordPair w) {
      uint64_t* q = out + p * so + i;
      if (vec) {
        uint4 x;
        x.x = (uint32_t)w.lo;
        x.y = (uint32_t)(w.lo >> 32);
        x.z = (uint32_t)w.hi;
        x.w = (uint32_t)(w.hi >> 32);
        *reinterpret_cast<uint4*>(q) = x;
      } else {
        q[0] = w.lo;
        q[1] = w.hi;
      }
    });
  }
  if (nwords % 2 == 1 && globalThread() == 0) {
    const size_t i = nwords - 1;
    uint64_t count[kBatchedWidth];
    sumVotesBatched<kSumVotesBatch, kBatchedWidth, uint64_t>([&](int r) { return votes[r * slotStride + i]; }, nslots,
                                                             count);
    storeCounts(count, wout, [&](int p, uint64_t w) { out[p * so + i] = w; });
  }
}

}  // namespace

cudaError_t add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
                size_t so, size_t nwords, cudaStream_t stream) {
  if (nwords == 0 || wout <= 0) return cudaSuccess;
  if (wa < 0 || wb < 0) return cudaErrorInvalidValue;
  return launchFor(nwords, addKernel, stream, a, wa, sa, b, wb, sb, out, wout, so, nwords);
}

cudaError_t sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout, size_t so,
                     size_t nwords, cudaStream_t stream) {
  if (nwords == 0 || wout <= 0) return cudaSuccess;
  // The counts live in kMaxSumVotesWidth registers per thread; out must hold them.
  if (nslots < 0 || nslots > (1 << kMaxSumVotesWidth) - 1 || wout < bits::widthFor((uint64_t)nslots))
    return cudaErrorInvalidValue;
  switch (nslots < (1 << kBatchedWidth) ? currentVariant(Tuned::kSumVotes) : 0) {
    case 1: return launchFor(nwords, sumVotesBatchKernel, stream, votes, nslots, slotStride, out, wout, so, nwords);
    case 2: {
      const bool vec = aligned16(votes) && aligned16(out) && slotStride % 2 == 0 && so % 2 == 0;
      const size_t threads = nwords / 2 > 0 ? nwords / 2 : 1;
      return launchFor(threads, sumVotesPairKernel, stream, votes, nslots, slotStride, out, wout, so, nwords, vec);
    }
    default: return launchFor(nwords, sumVotesKernel, stream, votes, nslots, slotStride, out, wout, so, nwords);
  }
}

}  // namespace kernels
}  // namespace signlion
