// add and sumVotes: bit-sliced counter sums, one uint64 word per thread
// (kernels/counter_word.h), grid-stride. Every plane access of a warp is 32
// consecutive words, so each plane is read and written coalesced.
#include "kernels/counter_word.h"
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"

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
  return launchFor(nwords, sumVotesKernel, stream, votes, nslots, slotStride, out, wout, so, nwords);
}

}  // namespace kernels
}  // namespace signlion
