#include "bits/local_vote.h"

#include <cstring>

namespace signlion {
namespace bits {

size_t localVoteScratchWords(int nvotes, size_t count, ncclSignZeroRule_t zero) {
  return (size_t)votePlanes(zero) * (size_t)widthFor((uint64_t)nvotes) * numWords(count);
}

void voteLocally(const Kernels& k, const uint64_t* const* votes, int nvotes, size_t count, ncclDataType_t dt,
                 ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* scratch, void* dst) {
  size_t nw = numWords(count);
  int width = widthFor((uint64_t)nvotes);
  bool ternary = zero == ncclSignZeroAbstain;
  uint64_t* pos = scratch;
  uint64_t* neg = scratch + (size_t)width * nw;
  memset(scratch, 0, localVoteScratchWords(nvotes, count, zero) * sizeof(uint64_t));
  // Adding vote r needs only widthFor(r + 1) planes: the ripple stays short
  // while the counts are small.
  for (int r = 0; r < nvotes; r++) {
    int wOut = widthFor((uint64_t)r + 1);
    k.add(pos, wOut, nw, votes[r], 1, nw, pos, wOut, nw, nw);
    if (ternary) k.add(neg, wOut, nw, votes[r] + nw, 1, nw, neg, wOut, nw, nw);
  }
  Counts c{pos, width, nw};
  if (ternary) c = Counts{pos, width, nw, neg, width, nw};
  if (op == ncclSignAverage) {
    k.average(c, nvotes, count, dt, dst);
  } else {
    decideMajority(k, c, nvotes, zero, tie, count, dt, dst);
  }
}

}  // namespace bits
}  // namespace signlion
