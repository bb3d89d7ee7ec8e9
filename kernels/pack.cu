// pack: votes of fp32 / fp16 / bf16 / int8 elements into 1 or 2 bit planes.
//
// Vector path (source 16-byte aligned): a warp reads 32 vectors of V
// elements, one per lane, coalesced. Each lane classifies its V elements into
// a V-bit mask; the 32 / V lanes that share an output half-word OR their
// shifted masks together with log2(32 / V) xor-shuffles, and one lane of
// each group stores the half-word. V = 4, 8, 16 for 4-, 2-, 1-byte types, so
// a warp's tile of 32V elements is V/2 whole uint64 words.
//
// Element path (what the tiles leave: the tail, or everything when the source
// is not 16-byte aligned): lane l reads element 32g + l and one ballot gives
// half-word g. Elements past count are not read and give zero bits, up to the
// end of the last uint64 word.
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/warp_layout.h"

namespace signlion {
namespace kernels {

namespace {

// Half-words a warp handles per step of the element path: independent loads
// in flight before the ballots.
constexpr int kElemPathUnroll = 4;

template <typename E, ncclSignZeroRule_t kRule>
SIGNLION_KERNEL packKernel(const char* __restrict__ src, size_t count, size_t tiles, uint32_t* __restrict__ out,
                           size_t stride32, size_t nhw) {
  constexpr int V = E::kVec;
  using S = LaneSlice<V>;
  constexpr bool kTwoPlanes = kRule == ncclSignZeroAbstain;
  const int lane = (int)laneId();

  for (size_t t = globalWarp(); t < tiles; t += warpCount()) {
    const uint4 x = reinterpret_cast<const uint4*>(src)[t * 32 + lane];
    const uint32_t v[4] = {x.x, x.y, x.z, x.w};
    uint32_t pos, neg;
    voteMasks<E>(v, pos, neg);
    uint32_t p0 = firstVotePlane(kRule, pos, neg, S::mask()) << S::shift(lane);
    uint32_t p1 = neg << S::shift(lane);
    SIGNLION_UNROLL
    for (int m = 1; m < S::kLanesPerWord; m *= 2) {
      p0 |= warpShflXor(p0, m);
      if (kTwoPlanes) p1 |= warpShflXor(p1, m);
    }
    if (S::shift(lane) == 0) {
      const size_t hw = t * V + S::word(lane);
      out[hw] = p0;
      if (kTwoPlanes) out[stride32 + hw] = p1;
    }
  }

  const typename E::Raw* elems = reinterpret_cast<const typename E::Raw*>(src);
  const size_t step = (size_t)kElemPathUnroll * warpCount();
  for (size_t g = tiles * V + (size_t)kElemPathUnroll * globalWarp(); g < nhw; g += step) {
    uint32_t raw[kElemPathUnroll];
    SIGNLION_UNROLL
    for (int u = 0; u < kElemPathUnroll; u++) {
      const size_t e = (g + u) * 32 + lane;
      raw[u] = e < count ? (uint32_t)elems[e] : 0u;  // 0 votes like nothing under every rule below
    }
    SIGNLION_UNROLL
    for (int u = 0; u < kElemPathUnroll; u++) {
      if (g + u >= nhw) break;  // warp-uniform
      const bool valid = (g + u) * 32 + lane < count;
      const bool pos = E::positive(raw[u]), neg = E::negative(raw[u]);
      const uint32_t p0 = warpBallot(firstVotePlane(kRule, pos, neg, valid) != 0);
      if (lane == 0) out[g + u] = p0;
      if (kTwoPlanes) {
        const uint32_t p1 = warpBallot(neg);
        if (lane == 1) out[stride32 + g + u] = p1;
      }
    }
  }
}

template <typename E, ncclSignZeroRule_t kRule>
cudaError_t launchPack(const void* src, size_t count, uint64_t* out, size_t stride, cudaStream_t stream) {
  constexpr size_t kTileElems = 32 * E::kVec;
  const size_t tiles = aligned16(src) ? count / kTileElems : 0;
  const size_t nhw = 2 * bits::numWords(count);  // whole uint64 words
  const size_t elemWarps = (nhw - tiles * E::kVec + kElemPathUnroll - 1) / kElemPathUnroll;
  const size_t warps = tiles > elemWarps ? tiles : elemWarps;
  return launchFor(warps * 32, packKernel<E, kRule>, stream, static_cast<const char*>(src), count, tiles,
                   reinterpret_cast<uint32_t*>(out), 2 * stride, nhw);
}

}  // namespace

cudaError_t pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
                 size_t stride, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return withElemTraits(dt, [&](auto traits) {
    using E = decltype(traits);
    switch (rule) {
      case ncclSignZeroPositive: return launchPack<E, ncclSignZeroPositive>(src, count, out, stride, stream);
      case ncclSignZeroNegative: return launchPack<E, ncclSignZeroNegative>(src, count, out, stride, stream);
      case ncclSignZeroAbstain: return launchPack<E, ncclSignZeroAbstain>(src, count, out, stride, stream);
      default: return cudaErrorInvalidValue;
    }
  });
}

}  // namespace kernels
}  // namespace signlion
