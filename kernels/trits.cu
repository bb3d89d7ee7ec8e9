// encodeTrits / decodeTrits: a decided result's 2 planes to and from its wire
// coding, 5 elements per byte (src/bits/trits.h defines the format; the CPU
// coders there are the reference, bit for bit).
//
// Encode: one thread per coded byte; byte j of group g reads bit j of the
// group's 5 +1 words and 5 -1 words (the 32 lanes of a warp read the same
// half-words: one broadcast load each) and a warp stores 32 consecutive
// bytes. Decode: one warp per 32 coded bytes (half a group); each lane splits
// its byte into 5 digits and one ballot per digit and sign gives a half-word
// of a plane. Threads past the groups copy the tail's half-words (and decode
// checks that no tail element is both +1 and -1). A malformed byte stores
// badValue in *bad (never cleared here): what the planes then hold must not
// be used.
//
// Variants (kernels/variants.h; neither has run on a GPU yet):
//  - encode 1 thread-word: a thread per 4 coded bytes, one 4-byte store; the
//    ten half-words it reads serve four bytes (a warp stores 128 bytes).
//  - decode 1 warp-x4: a warp takes 4 half-groups per step and loads their
//    bytes before the first ballot (4 loads in flight per lane, not 1).
#include "kernels/launch.cuh"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace signlion {
namespace kernels {

namespace {

constexpr uint32_t kGroupHalfWords = 2 * bits::kTritGroupBlocks;  // a group's uint32 half-words per plane

SIGNLION_KERNEL encodeTritsKernel(const uint32_t* __restrict__ pos, const uint32_t* __restrict__ neg, size_t groups,
                                  size_t rest, uint8_t* __restrict__ out) {
  const size_t groupBytes = groups * bits::kTritGroupBytes, total = groupBytes + 4 * rest;
  for (size_t u = globalThread(); u < total; u += threadCount()) {
    if (u < groupBytes) {
      const size_t g = u / bits::kTritGroupBytes;
      const unsigned j = (unsigned)(u % bits::kTritGroupBytes);
      const uint32_t* p = pos + g * kGroupHalfWords + j / 32;
      const uint32_t* m = neg + g * kGroupHalfWords + j / 32;
      unsigned v = 0, weight = 1;
      SIGNLION_UNROLL
      for (int k = 0; k < 5; k++) {
        const unsigned pb = (p[2 * k] >> (j % 32)) & 1u, mb = (m[2 * k] >> (j % 32)) & 1u;
        v += weight * (pb ? 1u : 2u * mb);  // +1 wins over a malformed both, as on the CPU
        weight *= 3;
      }
      out[u] = (uint8_t)v;
    } else {
      // The tail: rest words of plane 0, then rest of plane 1, as half-words.
      const size_t t = u - groupBytes, first = groups * kGroupHalfWords;
      const uint32_t w = t < 2 * rest ? pos[first + t] : neg[first + t - 2 * rest] & ~pos[first + t - 2 * rest];
      reinterpret_cast<uint32_t*>(out + groupBytes)[t] = w;
    }
  }
}

// The coded byte of one element of a group from its 5 blocks' +1 and -1
// bits: bit `bit` of pb[k] and mb[k] (block k's half-words, shifted).
SIGNLION_DEVICE unsigned tritByte(const uint32_t (&pb)[5], const uint32_t (&mb)[5], unsigned bit) {
  unsigned v = 0, weight = 1;
  SIGNLION_UNROLL
  for (int k = 0; k < 5; k++) {
    const unsigned p = (pb[k] >> bit) & 1u, m = (mb[k] >> bit) & 1u;
    v += weight * (p ? 1u : 2u * m);  // +1 wins over a malformed both, as on the CPU
    weight *= 3;
  }
  return v;
}

SIGNLION_KERNEL encodeTritsWordKernel(const uint32_t* __restrict__ pos, const uint32_t* __restrict__ neg,
                                      size_t groups, size_t rest, uint32_t* __restrict__ out) {
  constexpr size_t kGroupWords = bits::kTritGroupBytes / 4;
  const size_t groupWords = groups * kGroupWords, total = groupWords + 4 * rest;
  for (size_t u = globalThread(); u < total; u += threadCount()) {
    if (u < groupWords) {
      const size_t g = u / kGroupWords;
      const unsigned j = (unsigned)(u % kGroupWords) * 4;  // the word's first byte: bytes j .. j + 3, one half-word
      const uint32_t* p = pos + g * kGroupHalfWords + j / 32;
      const uint32_t* m = neg + g * kGroupHalfWords + j / 32;
      uint32_t pb[5], mb[5];
      SIGNLION_UNROLL
      for (int k = 0; k < 5; k++) {
        pb[k] = p[2 * k] >> (j % 32);
        mb[k] = m[2 * k] >> (j % 32);
      }
      uint32_t word = 0;
      SIGNLION_UNROLL
      for (unsigned b = 0; b < 4; b++) word |= tritByte(pb, mb, b) << (8 * b);
      out[u] = word;
    } else {
      // The tail as in encodeTritsKernel: rest words of plane 0, then of plane 1.
      const size_t t = u - groupWords, first = groups * kGroupHalfWords;
      out[u] = t < 2 * rest ? pos[first + t] : neg[first + t - 2 * rest] & ~pos[first + t - 2 * rest];
    }
  }
}

// Half-group h of a warp: lane l holds byte l of it (v), whose five digits
// go by ballots to the ten lanes that store half-word k of each plane. Every
// lane of the warp calls it (its ballots); a byte above kTritMaxByte marks *bad.
SIGNLION_DEVICE void decodeHalfGroup(unsigned v, size_t h, int lane, uint32_t* __restrict__ pos,
                                     uint32_t* __restrict__ neg, uint32_t* __restrict__ bad, uint32_t badValue) {
  const bool invalid = v > bits::kTritMaxByte;
  uint32_t mine = 0;  // lane k < 5: +1 half-word k; lane 5 + k: -1 half-word k
  SIGNLION_UNROLL
  for (int k = 0; k < 5; k++) {
    const unsigned d = v % 3;
    v /= 3;
    const uint32_t p = warpBallot(d == 1), m = warpBallot(d == 2);
    if (lane == k) mine = p;
    if (lane == 5 + k) mine = m;
  }
  const uint32_t anyInvalid = warpBallot(invalid);
  const size_t g = h / 2, half = h % 2;
  if (lane < 5) pos[g * kGroupHalfWords + 2 * lane + half] = mine;
  if (lane >= 5 && lane < 10) neg[g * kGroupHalfWords + 2 * (lane - 5) + half] = mine;
  if (lane == 0 && anyInvalid != 0) *bad = badValue;
}

// The tail after the whole groups: the two planes' half-words as they are
// (an element both +1 and -1 marks *bad).
SIGNLION_DEVICE void copyTritTail(const uint8_t* __restrict__ in, size_t groups, size_t rest,
                                  uint32_t* __restrict__ pos, uint32_t* __restrict__ neg, uint32_t* __restrict__ bad,
                                  uint32_t badValue) {
  const uint32_t* tail = reinterpret_cast<const uint32_t*>(in + groups * bits::kTritGroupBytes);
  const size_t first = groups * kGroupHalfWords;
  for (size_t t = globalThread(); t < 2 * rest; t += threadCount()) {
    const uint32_t p = tail[t], m = tail[2 * rest + t];
    pos[first + t] = p;
    neg[first + t] = m;
    if ((p & m) != 0) *bad = badValue;
  }
}

SIGNLION_KERNEL decodeTritsKernel(const uint8_t* __restrict__ in, size_t groups, size_t rest,
                                  uint32_t* __restrict__ pos, uint32_t* __restrict__ neg, uint32_t* __restrict__ bad,
                                  uint32_t badValue) {
  const int lane = (int)laneId();
  for (size_t h = globalWarp(); h < 2 * groups; h += warpCount())  // warp-uniform
    decodeHalfGroup(in[32 * h + lane], h, lane, pos, neg, bad, badValue);
  copyTritTail(in, groups, rest, pos, neg, bad, badValue);
}

// Half-groups a warp of the warp-x4 variant decodes per step.
constexpr int kDecodeHalves = 4;

SIGNLION_KERNEL decodeTritsX4Kernel(const uint8_t* __restrict__ in, size_t groups, size_t rest,
                                    uint32_t* __restrict__ pos, uint32_t* __restrict__ neg,
                                    uint32_t* __restrict__ bad, uint32_t badValue) {
  const int lane = (int)laneId();
  const size_t halves = 2 * groups;
  for (size_t h0 = globalWarp() * kDecodeHalves; h0 < halves; h0 += warpCount() * kDecodeHalves) {
    unsigned bytes[kDecodeHalves];
    SIGNLION_UNROLL
    for (int u = 0; u < kDecodeHalves; u++) bytes[u] = h0 + u < halves ? in[32 * (h0 + u) + lane] : 0u;
    SIGNLION_UNROLL
    for (int u = 0; u < kDecodeHalves; u++) {
      if (h0 + u >= halves) break;  // warp-uniform
      decodeHalfGroup(bytes[u], h0 + u, lane, pos, neg, bad, badValue);
    }
  }
  copyTritTail(in, groups, rest, pos, neg, bad, badValue);
}

}  // namespace

cudaError_t encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out, cudaStream_t stream) {
  if (nblocks == 0) return cudaSuccess;
  if (((uintptr_t)out & 3) != 0) return cudaErrorInvalidValue;
  const size_t groups = nblocks / bits::kTritGroupBlocks, rest = nblocks % bits::kTritGroupBlocks;
  if (currentVariant(Tuned::kEncodeTrits) == 1) {
    return launchFor(groups * bits::kTritGroupBytes / 4 + 4 * rest, encodeTritsWordKernel, stream,
                     reinterpret_cast<const uint32_t*>(pos), reinterpret_cast<const uint32_t*>(neg), groups, rest,
                     reinterpret_cast<uint32_t*>(out));
  }
  return launchFor(groups * bits::kTritGroupBytes + 4 * rest, encodeTritsKernel, stream,
                   reinterpret_cast<const uint32_t*>(pos), reinterpret_cast<const uint32_t*>(neg), groups, rest, out);
}

cudaError_t decodeTrits(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg, uint32_t* bad,
                        uint32_t badValue, cudaStream_t stream) {
  if (nblocks == 0) return cudaSuccess;
  if (((uintptr_t)in & 3) != 0 || bad == nullptr) return cudaErrorInvalidValue;
  const size_t groups = nblocks / bits::kTritGroupBlocks, rest = nblocks % bits::kTritGroupBlocks;
  // Threads for both loops: a warp per half-group, a thread per tail half-word.
  const size_t threads = 64 * groups > 2 * rest ? 64 * groups : 2 * rest;
  if (currentVariant(Tuned::kDecodeTrits) == 1) {
    const size_t x4 = (2 * groups + kDecodeHalves - 1) / kDecodeHalves * 32;
    return launchFor(x4 > 2 * rest ? x4 : 2 * rest, decodeTritsX4Kernel, stream, in, groups, rest,
                     reinterpret_cast<uint32_t*>(pos), reinterpret_cast<uint32_t*>(neg), bad, badValue);
  }
  return launchFor(threads, decodeTritsKernel, stream, in, groups, rest, reinterpret_cast<uint32_t*>(pos),
                   reinterpret_cast<uint32_t*>(neg), bad, badValue);
}

}  // namespace kernels
}  // namespace signlion
