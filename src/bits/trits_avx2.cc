// The AVX2 trit coder (trits.h). Compiled with -mavx2; internal linkage
// except the table entries, reached only after bits.cc checked the CPU.
// 32 byte lanes at a time: a group's 64 bytes are two halves, bits 0..31 and
// 32..63 of its 5 plane words.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "bits/trits.h"

namespace signlion {
namespace bits {
namespace {

using V = __m256i;

// 32 bits to 32 byte lanes: lane i = 0xff when bit i of x is set, else 0.
inline V expandBits(uint32_t x) {
  const V bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)),
                                      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                       2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const V bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

// x >= c per unsigned byte lane, as a mask.
inline V atLeast(V x, V c) { return _mm256_cmpeq_epi8(_mm256_max_epu8(x, c), x); }

constexpr int kPow3[5] = {1, 3, 9, 27, 81};

// Half h (bits 32h .. 32h + 31) of a group's 5 words, into 32 bytes.
inline V encodeHalf(const uint64_t* p, const uint64_t* m, int h) {
  V acc = _mm256_setzero_si256();
  for (int k = 0; k < 5; k++) {
    const uint32_t pb = static_cast<uint32_t>(p[k] >> (32 * h));
    const uint32_t mb = static_cast<uint32_t>((m[k] & ~p[k]) >> (32 * h));  // +1 wins over a malformed both
    acc = _mm256_add_epi8(acc, _mm256_and_si256(expandBits(pb), _mm256_set1_epi8(static_cast<char>(kPow3[k]))));
    acc = _mm256_add_epi8(acc, _mm256_and_si256(expandBits(mb), _mm256_set1_epi8(static_cast<char>(2 * kPow3[k]))));
  }
  return acc;
}

void encode(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out) {
  const size_t groups = nblocks / kTritGroupBlocks;
  for (size_t g = 0; g < groups; g++) {
    const uint64_t* p = pos + g * kTritGroupBlocks;
    const uint64_t* m = neg + g * kTritGroupBlocks;
    uint8_t* o = out + g * kTritGroupBytes;
    _mm256_storeu_si256(reinterpret_cast<V*>(o), encodeHalf(p, m, 0));
    _mm256_storeu_si256(reinterpret_cast<V*>(o + 32), encodeHalf(p, m, 1));
  }
  encodeTritTail(pos, neg, groups * kTritGroupBlocks, nblocks % kTritGroupBlocks, out + groups * kTritGroupBytes);
}

// 32 coded bytes into bits 32h.. of the 5 +1 words and 5 -1 words; returns
// the mask of malformed lanes. Digits from the top: d_k = 2 when the rest is
// at least 2 * 3^k, 1 when at least 3^k.
inline V decodeHalf(V x, uint32_t* p, uint32_t* m) {
  const V bad = atLeast(x, _mm256_set1_epi8(static_cast<char>(kTritMaxByte + 1)));
  for (int k = 4; k >= 0; k--) {
    const V two = _mm256_set1_epi8(static_cast<char>(2 * kPow3[k]));
    const V one = _mm256_set1_epi8(static_cast<char>(kPow3[k]));
    const V ge2 = atLeast(x, two);
    x = _mm256_sub_epi8(x, _mm256_and_si256(ge2, two));
    const V ge1 = atLeast(x, one);
    x = _mm256_sub_epi8(x, _mm256_and_si256(ge1, one));
    p[k] = static_cast<uint32_t>(_mm256_movemask_epi8(ge1));
    m[k] = static_cast<uint32_t>(_mm256_movemask_epi8(ge2));
  }
  return bad;
}

bool decode(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg) {
  const size_t groups = nblocks / kTritGroupBlocks;
  V bad = _mm256_setzero_si256();
  for (size_t g = 0; g < groups; g++) {
    const uint8_t* src = in + g * kTritGroupBytes;
    uint32_t p0[5], m0[5], p1[5], m1[5];
    bad = _mm256_or_si256(bad, decodeHalf(_mm256_loadu_si256(reinterpret_cast<const V*>(src)), p0, m0));
    bad = _mm256_or_si256(bad, decodeHalf(_mm256_loadu_si256(reinterpret_cast<const V*>(src + 32)), p1, m1));
    uint64_t* p = pos + g * kTritGroupBlocks;
    uint64_t* m = neg + g * kTritGroupBlocks;
    for (int k = 0; k < 5; k++) {
      p[k] = p0[k] | static_cast<uint64_t>(p1[k]) << 32;
      m[k] = m0[k] | static_cast<uint64_t>(m1[k]) << 32;
    }
  }
  const bool tailOk = decodeTritTail(in + groups * kTritGroupBytes, groups * kTritGroupBlocks,
                                     nblocks % kTritGroupBlocks, pos, neg);
  return _mm256_testz_si256(bad, bad) && tailOk;
}

}  // namespace

// Declared in kernels_avx2.cc's table.
void encodeTritsAvx2(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out) {
  encode(pos, neg, nblocks, out);
}
bool decodeTritsAvx2(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg) {
  return decode(in, nblocks, pos, neg);
}

}  // namespace bits
}  // namespace signlion
