// The AVX2 (+F16C) implementation. Compiled with -mavx2 -mf16c; everything
// here has internal linkage so no AVX2 code can leak into the portable path
// through an inline function. Only reached after bits.cc checked the CPU.
#include <immintrin.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "bits/bits.h"
#include "bits/bitslice.h"
#include "bits/element_codes.h"

namespace signlion {
namespace bits {
namespace {

using V = __m256i;

inline V loadu(const void* p) { return _mm256_loadu_si256(static_cast<const V*>(p)); }
inline void storeu(void* p, V v) { _mm256_storeu_si256(static_cast<V*>(p), v); }

// Outputs larger than this go around the caches (non-temporal stores): a
// result far bigger than L2 would otherwise be read in (read-for-ownership)
// only to be overwritten, a third more memory traffic on the output pass.
constexpr size_t kStreamingStoreBytes = 4u << 20;

// A 32-byte store to a 16-byte aligned address, cached or not.
template <bool kStream>
inline void storeOut(char* p, V v) {
  if (kStream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(v));
    _mm_stream_si128(reinterpret_cast<__m128i*>(p + 16), _mm256_extracti128_si256(v, 1));
  } else {
    storeu(p, v);
  }
}
inline size_t minSize(size_t a, size_t b) { return a < b ? a : b; }

// ---- pack ------------------------------------------------------------------

struct Masks64 {
  uint64_t pos, neg;
};

// Which masks a zero rule needs: ZeroPositive only "negative", ZeroNegative
// only "positive", Abstain both. Everything is done on the raw bits as
// integers, so DAZ/FTZ in the caller's MXCSR cannot change a vote:
//   positive <=> 0 < bits <= +inf        negative <=> -0 < bits <= -inf
// (NaN lies above infinity; -0 is the most negative integer). With both masks
// needed it is cheaper to test "valid" (0 < |bits| <= inf) once and split it
// by the sign bit: |bits| + INT_MAX wraps 0 to INT_MAX and (0, inf] below
// INT_MIN + inf, so one compare against that bound decides it.
enum Need { kNeedNeg = 1, kNeedPos = 2, kNeedBoth = 3 };

// 4 x 8 32-bit lane masks -> 32 bits in element order (one movemask instead
// of four, plus the shifts and ors to join them).
inline uint32_t movemask32x4(V m0, V m1, V m2, V m3) {
  V b = _mm256_packs_epi16(_mm256_packs_epi32(m0, m1), _mm256_packs_epi32(m2, m3));
  // Bytes now hold 4-element groups in the order m0lo m1lo m2lo m3lo m0hi m1hi m2hi m3hi.
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return (uint32_t)_mm256_movemask_epi8(b);
}

// 32 x 16-bit lane masks (two registers) -> 32 bits in element order.
inline uint32_t movemask16x2(V m0, V m1) {
  V packed = _mm256_packs_epi16(m0, m1);  // per 128-bit lane: m0 lo, m1 lo | m0 hi, m1 hi
  packed = _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0));
  return (uint32_t)_mm256_movemask_epi8(packed);
}

// Signed integer bounds of the "negative" range for each element type.
constexpr int kF32NegInfInt = (int)0xff800000u, kF16NegInfInt = (int16_t)0xfc00u, kBf16NegInfInt = (int16_t)0xff80u;

template <int kNeed>
inline Masks64 classifyF32(const char* p) {
  const V zero = _mm256_setzero_si256(), posHi = _mm256_set1_epi32((int)kF32AbsInf + 1);
  const V negLo = _mm256_set1_epi32(INT32_MIN), negHi = _mm256_set1_epi32(kF32NegInfInt + 1);
  const V absMask = _mm256_set1_epi32(INT32_MAX), validBound = _mm256_set1_epi32(INT32_MIN + (int)kF32AbsInf);
  uint64_t pos = 0, neg = 0;
  for (int half = 0; half < 2; half++) {
    V m[4], sgn[4];
    for (int k = 0; k < 4; k++) {
      V u = loadu(p + 128 * half + 32 * k);
      if (kNeed == kNeedBoth) {
        V x = _mm256_add_epi32(_mm256_and_si256(u, absMask), absMask);
        m[k] = _mm256_cmpgt_epi32(validBound, x);  // valid: INT_MIN + inf > x, see above
        sgn[k] = _mm256_srai_epi32(u, 31);
      } else if (kNeed == kNeedPos) {
        m[k] = _mm256_and_si256(_mm256_cmpgt_epi32(u, zero), _mm256_cmpgt_epi32(posHi, u));
      } else {
        m[k] = _mm256_and_si256(_mm256_cmpgt_epi32(u, negLo), _mm256_cmpgt_epi32(negHi, u));
      }
    }
    uint64_t bits = movemask32x4(m[0], m[1], m[2], m[3]);
    if (kNeed == kNeedBoth) {
      uint64_t sign = movemask32x4(sgn[0], sgn[1], sgn[2], sgn[3]);
      pos |= (bits & ~sign) << (32 * half);
      neg |= (bits & sign) << (32 * half);
    } else if (kNeed == kNeedPos) {
      pos |= bits << (32 * half);
    } else {
      neg |= bits << (32 * half);
    }
  }
  return {pos, neg};
}

template <uint16_t kAbsInf, int kNegInfInt, int kNeed>
inline Masks64 classify16(const char* p) {
  const V zero = _mm256_setzero_si256(), posHi = _mm256_set1_epi16((short)(kAbsInf + 1));
  const V negLo = _mm256_set1_epi16(INT16_MIN), negHi = _mm256_set1_epi16((short)(kNegInfInt + 1));
  const V absMask = _mm256_set1_epi16(INT16_MAX), validBound = _mm256_set1_epi16((short)(INT16_MIN + kAbsInf));
  uint64_t pos = 0, neg = 0;
  for (int k = 0; k < 2; k++) {
    V u0 = loadu(p + 64 * k), u1 = loadu(p + 64 * k + 32);
    if (kNeed == kNeedBoth) {
      V v0 = _mm256_cmpgt_epi16(validBound, _mm256_add_epi16(_mm256_and_si256(u0, absMask), absMask));
      V v1 = _mm256_cmpgt_epi16(validBound, _mm256_add_epi16(_mm256_and_si256(u1, absMask), absMask));
      uint64_t bits = movemask16x2(v0, v1);
      uint64_t sign = movemask16x2(_mm256_srai_epi16(u0, 15), _mm256_srai_epi16(u1, 15));
      pos |= (bits & ~sign) << (32 * k);
      neg |= (bits & sign) << (32 * k);
    } else if (kNeed == kNeedPos) {
      V m0 = _mm256_and_si256(_mm256_cmpgt_epi16(u0, zero), _mm256_cmpgt_epi16(posHi, u0));
      V m1 = _mm256_and_si256(_mm256_cmpgt_epi16(u1, zero), _mm256_cmpgt_epi16(posHi, u1));
      pos |= (uint64_t)movemask16x2(m0, m1) << (32 * k);
    } else {
      V m0 = _mm256_and_si256(_mm256_cmpgt_epi16(u0, negLo), _mm256_cmpgt_epi16(negHi, u0));
      V m1 = _mm256_and_si256(_mm256_cmpgt_epi16(u1, negLo), _mm256_cmpgt_epi16(negHi, u1));
      neg |= (uint64_t)movemask16x2(m0, m1) << (32 * k);
    }
  }
  return {pos, neg};
}

template <int kNeed>
inline Masks64 classifyI8(const char* p) {
  const V zero = _mm256_setzero_si256();
  uint64_t pos = 0, neg = 0;
  for (int k = 0; k < 2; k++) {
    V x = loadu(p + 32 * k);
    if (kNeed & kNeedPos) pos |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(x, zero)) << (32 * k);
    if (kNeed & kNeedNeg) neg |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(zero, x)) << (32 * k);
  }
  return {pos, neg};
}

template <Masks64 (*Classify)(const char*), size_t kSize>
void packT(const void* src, size_t count, ncclSignZeroRule_t rule, uint64_t* out, size_t stride) {
  const char* s = static_cast<const char*>(src);
  size_t full = count / kBlockElems;
  auto emit = [&](size_t w, Masks64 m, uint64_t valid) {
    if (rule == ncclSignZeroPositive) {
      out[w] = ~m.neg & valid;
    } else if (rule == ncclSignZeroNegative) {
      out[w] = m.pos;
    } else {
      out[w] = m.pos;
      out[stride + w] = m.neg;
    }
  };
  for (size_t w = 0; w < full; w++) {
    // Two blocks ahead: keeps more loads in flight than the hardware
    // prefetcher alone on one core.
    _mm_prefetch(s + (w + 4) * kBlockElems * kSize, _MM_HINT_T0);
    emit(w, Classify(s + w * kBlockElems * kSize), ~0ull);
  }
  size_t rest = count - full * kBlockElems;
  if (rest) {
    // Zero padding classifies as zero: neither mask bit, and `valid` clears
    // the ~neg bits a ZeroPositive rule would set there.
    alignas(32) char tail[kBlockElems * kSize] = {};
    memcpy(tail, s + full * kBlockElems * kSize, rest * kSize);
    emit(full, Classify(tail), lowBits((unsigned)rest));
  }
}

template <int kNeed>
void packNeed(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
              size_t stride) {
  switch (dt) {
    case ncclFloat32: packT<classifyF32<kNeed>, 4>(src, count, rule, out, stride); break;
    case ncclFloat16: packT<classify16<kF16AbsInf, kF16NegInfInt, kNeed>, 2>(src, count, rule, out, stride); break;
    case ncclBfloat16: packT<classify16<kBf16AbsInf, kBf16NegInfInt, kNeed>, 2>(src, count, rule, out, stride); break;
    default: packT<classifyI8<kNeed>, 1>(src, count, rule, out, stride); break;
  }
}

void pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out, size_t stride) {
  switch (rule) {
    case ncclSignZeroPositive: packNeed<kNeedNeg>(src, dt, count, rule, out, stride); break;
    case ncclSignZeroNegative: packNeed<kNeedPos>(src, dt, count, rule, out, stride); break;
    default: packNeed<kNeedBoth>(src, dt, count, rule, out, stride); break;
  }
}

// ---- add -------------------------------------------------------------------

void add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
         size_t so, size_t nwords) {
  const V zero = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 4 <= nwords; i += 4) {
    V carry = zero;
    for (int p = 0; p < wout; p++) {
      V x = p < wa ? loadu(a + p * sa + i) : zero;
      V y = p < wb ? loadu(b + p * sb + i) : zero;
      storeu(out + p * so + i, fullAdd(x, y, carry));
    }
  }
  for (; i < nwords; i++) {
    uint64_t carry = 0;
    for (int p = 0; p < wout; p++) {
      uint64_t x = p < wa ? a[p * sa + i] : 0;
      uint64_t y = p < wb ? b[p * sb + i] : 0;
      out[p * so + i] = fullAdd(x, y, carry);
    }
  }
}

// ---- decide ----------------------------------------------------------------

// Loads 4 words at `i`, or the n < 4 words left, zero-filled.
inline V loadWords(const uint64_t* p, size_t n) {
  if (n >= 4) return loadu(p);
  alignas(32) uint64_t t[4] = {0, 0, 0, 0};
  for (size_t k = 0; k < n; k++) t[k] = p[k];
  return loadu(t);
}
inline void storeWords(uint64_t* p, V v, size_t n) {
  if (n >= 4) return storeu(p, v);
  alignas(32) uint64_t t[4];
  storeu(t, v);
  for (size_t k = 0; k < n; k++) p[k] = t[k];
}

void decideBits(const Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so, size_t nwords) {
  const V ones = _mm256_set1_epi64x(-1);
  bool ternary = c.neg != nullptr;
  bool twoPlanes = tie == ncclSignTieZero && (ternary || nranks % 2 == 0);
  for (size_t i = 0; i < nwords; i += 4) {
    size_t n = minSize(4, nwords - i);
    auto P = [&](int p) { return loadWords(c.pos + p * c.posStride + i, n); };
    V gt, eq;
    if (ternary) {
      auto M = [&](int p) { return loadWords(c.neg + p * c.negStride + i, n); };
      compareCounters<V>(P, c.posWidth, M, c.negWidth, ones, gt, eq);
    } else {
      compareWithConstant<V>(P, c.posWidth, (uint64_t)(nranks / 2), ones, gt, eq);
      if (nranks % 2 == 1) eq = _mm256_setzero_si256();
    }
    if (twoPlanes) {
      storeWords(out + i, gt, n);
      storeWords(out + so + i, ~(gt | eq), n);
    } else {
      storeWords(out + i, tie == ncclSignTiePositive ? (gt | eq) : gt, n);
    }
  }
}

// ---- unpack ----------------------------------------------------------------

// Lane masks (all ones where the bit is set) for 8 x 32-bit, 16 x 16-bit and
// 32 x 8-bit lanes, from the low bits of `bits`.
inline V expand8x32(uint32_t bits) {
  const V sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), sel), sel);
}
inline V expand16x16(uint32_t bits) {
  const V sel = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                  (short)0x8000);
  return _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16((short)bits), sel), sel);
}
inline V expand32x8(uint32_t bits) {
  const V shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                  3, 3, 3, 3);
  const V sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  V rep = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel);
}

// One word of results (64 elements) into `dst` as dt, given +1 and -1 masks.
template <bool kStream>
inline void unpackWord(uint64_t pos, uint64_t neg, ncclDataType_t dt, char* dst) {
  switch (dt) {
    case ncclFloat32: {
      const V one = _mm256_set1_epi32((int)kF32One), minus = _mm256_set1_epi32((int)kF32MinusOne);
      for (int k = 0; k < 8; k++) {
        V pm = expand8x32((uint32_t)(pos >> (8 * k)) & 0xff), nm = expand8x32((uint32_t)(neg >> (8 * k)) & 0xff);
        storeOut<kStream>(dst + 32 * k, _mm256_or_si256(_mm256_and_si256(pm, one), _mm256_and_si256(nm, minus)));
      }
      break;
    }
    case ncclFloat16:
    case ncclBfloat16: {
      const V one = _mm256_set1_epi16((short)(dt == ncclFloat16 ? kF16One : kBf16One));
      const V minus = _mm256_set1_epi16((short)(dt == ncclFloat16 ? kF16MinusOne : kBf16MinusOne));
      for (int k = 0; k < 4; k++) {
        V pm = expand16x16((uint32_t)(pos >> (16 * k)) & 0xffff), nm = expand16x16((uint32_t)(neg >> (16 * k)) & 0xffff);
        storeOut<kStream>(dst + 32 * k, _mm256_or_si256(_mm256_and_si256(pm, one), _mm256_and_si256(nm, minus)));
      }
      break;
    }
    default: {
      const V one = _mm256_set1_epi8((char)kI8One), minus = _mm256_set1_epi8((char)kI8MinusOne);
      for (int k = 0; k < 2; k++) {
        V pm = expand32x8((uint32_t)(pos >> (32 * k))), nm = expand32x8((uint32_t)(neg >> (32 * k)));
        storeOut<kStream>(dst + 32 * k, _mm256_or_si256(_mm256_and_si256(pm, one), _mm256_and_si256(nm, minus)));
      }
      break;
    }
  }
}

template <bool kStream>
void unpackWords(const uint64_t* planes, int nplanes, size_t stride, size_t nwords, ncclDataType_t dt, char* d,
                 size_t esize) {
  for (size_t w = 0; w < nwords; w++) {
    uint64_t pos = planes[w];
    uint64_t neg = nplanes == 2 ? planes[stride + w] & ~pos : ~pos;  // +1 wins, as in the portable path
    unpackWord<kStream>(pos, neg, dt, d + w * kBlockElems * esize);
  }
  if (kStream) _mm_sfence();  // order the streaming stores before whatever the caller does next
}

void unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst) {
  char* d = static_cast<char*>(dst);
  size_t esize = dt == ncclFloat32 ? 4 : (dt == ncclInt8 ? 1 : 2);
  size_t full = count / kBlockElems;
  if (count * esize >= kStreamingStoreBytes && (reinterpret_cast<uintptr_t>(d) & 15) == 0) {
    unpackWords<true>(planes, nplanes, stride, full, dt, d, esize);
  } else {
    unpackWords<false>(planes, nplanes, stride, full, dt, d, esize);
  }
  size_t rest = count - full * kBlockElems;
  if (rest) {
    alignas(32) char tail[kBlockElems * 4];
    uint64_t pos = planes[full];
    uint64_t neg = nplanes == 2 ? planes[stride + full] & ~pos : ~pos;
    unpackWord<false>(pos, neg, dt, tail);
    memcpy(d + full * kBlockElems * esize, tail, rest * esize);
  }
}

// ---- average ---------------------------------------------------------------

// Counts of 8 elements (bits 8k..8k+7 of word w) as 32-bit lanes.
inline V counts8(const uint64_t* planes, int width, size_t stride, size_t w, int k) {
  V cnt = _mm256_setzero_si256();
  for (int p = 0; p < width; p++) {
    uint32_t bits = (uint32_t)(planes[p * stride + w] >> (8 * k)) & 0xff;
    cnt = _mm256_or_si256(cnt, _mm256_and_si256(expand8x32(bits), _mm256_set1_epi32(1 << p)));
  }
  return cnt;
}

// One word (64 elements) of averages into dst as dt.
inline void averageWord(const Counts& c, int nranks, size_t w, ncclDataType_t dt, char* dst) {
  const __m256 fn = _mm256_set1_ps((float)nranks);
  const V vn = _mm256_set1_epi32(nranks);
  for (int k = 0; k < 8; k++) {
    V p = counts8(c.pos, c.posWidth, c.posStride, w, k);
    V s = c.neg ? _mm256_sub_epi32(p, counts8(c.neg, c.negWidth, c.negStride, w, k))
                : _mm256_sub_epi32(_mm256_add_epi32(p, p), vn);
    // IEEE division is correctly rounded: bit-identical to the scalar path.
    __m256 f = _mm256_div_ps(_mm256_cvtepi32_ps(s), fn);
    if (dt == ncclFloat32) {
      _mm256_storeu_ps(reinterpret_cast<float*>(dst + 32 * k), f);
    } else if (dt == ncclFloat16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * k),
                       _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else {  // bf16, round to nearest even; no NaN can occur here
      V u = _mm256_castps_si256(f);
      V lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      u = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
      __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * k), h);
    }
  }
}

void average(const Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) {
  // The vector path writes fp32/fp16/bf16 only (checkVoteArgs refuses an int8
  // average at every entry point); anything else takes the portable path
  // rather than being written with the wrong element size.
  if (dt != ncclFloat32 && dt != ncclFloat16 && dt != ncclBfloat16) {
    portableKernels().average(c, nranks, count, dt, dst);
    return;
  }
  char* d = static_cast<char*>(dst);
  size_t esize = dt == ncclFloat32 ? 4 : 2;
  size_t full = count / kBlockElems;
  for (size_t w = 0; w < full; w++) averageWord(c, nranks, w, dt, d + w * kBlockElems * esize);
  size_t rest = count - full * kBlockElems;
  if (rest) {
    alignas(32) char tail[kBlockElems * 4];
    averageWord(c, nranks, full, dt, tail);
    memcpy(d + full * kBlockElems * esize, tail, rest * esize);
  }
}

}  // namespace

// trits_avx2.cc
void encodeTritsAvx2(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out);
bool decodeTritsAvx2(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg);

namespace {
const Kernels kAvx2 = {"avx2", pack, add, decideBits, unpack, average, encodeTritsAvx2, decodeTritsAvx2};
}  // namespace

// Declared in bits.cc, which calls it only on a CPU with AVX2 and F16C.
const Kernels& avx2KernelsUnchecked() { return kAvx2; }

}  // namespace bits
}  // namespace signlion
