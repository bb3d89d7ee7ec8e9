// The portable implementation: plain uint64 words, one element at a time where
// an element must be read or written. The AVX2 one must match it bit for bit.
#include <cstring>
#include <limits>

#include "bits/bits.h"
#include "bits/bitslice.h"
#include "bits/element_codes.h"
#include "bits/float16.h"

namespace signlion {
namespace bits {
namespace {

// Raw bits of one element as a signed integer, and the signed bounds that
// classify it: positive <=> 0 < bits <= +inf, negative <=> -0 < bits <= -inf
// (NaN lies beyond infinity, -0 is the most negative integer).
template <typename Int, Int kPosInf, Int kNegInf>
struct RawClass {
  using type = Int;
  static bool pos(Int x) { return x > 0 && x <= kPosInf; }
  static bool neg(Int x) { return x > std::numeric_limits<Int>::min() && x <= kNegInf; }
};
using F32Class = RawClass<int32_t, (int32_t)kF32AbsInf, (int32_t)0xff800000u>;
using F16Class = RawClass<int16_t, (int16_t)kF16AbsInf, (int16_t)0xfc00u>;
using Bf16Class = RawClass<int16_t, (int16_t)kBf16AbsInf, (int16_t)0xff80u>;
// int8: any non-zero value has a sign (-128 too: there is no -0 to exclude).
struct I8Class {
  using type = int8_t;
  static bool pos(int8_t x) { return x > 0; }
  static bool neg(int8_t x) { return x < 0; }
};

template <typename Class>
void packT(const void* src, size_t count, ncclSignZeroRule_t rule, uint64_t* out, size_t stride) {
  using Int = typename Class::type;
  const char* base = static_cast<const char*>(src);
  size_t nwords = numWords(count);
  for (size_t w = 0; w < nwords; w++) {
    unsigned n = (unsigned)(count - w * kBlockElems < kBlockElems ? count - w * kBlockElems : kBlockElems);
    uint64_t pos = 0, neg = 0;
    for (unsigned i = 0; i < n; i++) {
      Int x;
      memcpy(&x, base + sizeof(Int) * (w * kBlockElems + i), sizeof(Int));
      pos |= (uint64_t)Class::pos(x) << i;
      neg |= (uint64_t)Class::neg(x) << i;
    }
    switch (rule) {
      case ncclSignZeroPositive: out[w] = ~neg & lowBits(n); break;
      case ncclSignZeroNegative: out[w] = pos; break;
      default:
        out[w] = pos;
        out[stride + w] = neg;
        break;
    }
  }
}

void pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out, size_t stride) {
  switch (dt) {
    case ncclFloat32: packT<F32Class>(src, count, rule, out, stride); break;
    case ncclFloat16: packT<F16Class>(src, count, rule, out, stride); break;
    case ncclBfloat16: packT<Bf16Class>(src, count, rule, out, stride); break;
    default: packT<I8Class>(src, count, rule, out, stride); break;
  }
}

void add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
         size_t so, size_t nwords) {
  for (size_t i = 0; i < nwords; i++) {
    uint64_t carry = 0;
    for (int p = 0; p < wout; p++) {
      uint64_t x = p < wa ? a[p * sa + i] : 0;
      uint64_t y = p < wb ? b[p * sb + i] : 0;
      out[p * so + i] = fullAdd(x, y, carry);
    }
  }
}

void decideBits(const Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so, size_t nwords) {
  bool ternary = c.neg != nullptr;
  bool twoPlanes = tie == ncclSignTieZero && (ternary || nranks % 2 == 0);
  for (size_t i = 0; i < nwords; i++) {
    auto P = [&](int p) { return c.pos[p * c.posStride + i]; };
    uint64_t gt, eq;
    if (ternary) {
      auto M = [&](int p) { return c.neg[p * c.negStride + i]; };
      compareCounters<uint64_t>(P, c.posWidth, M, c.negWidth, ~0ull, gt, eq);
    } else {
      // 2P - N > 0  <=>  P > floor(N / 2); == 0 only for even N at P = N / 2.
      compareWithConstant<uint64_t>(P, c.posWidth, (uint64_t)(nranks / 2), ~0ull, gt, eq);
      if (nranks % 2 == 1) eq = 0;
    }
    uint64_t lt = ~(gt | eq);
    if (twoPlanes) {
      out[i] = gt;
      out[so + i] = lt;
    } else {
      out[i] = tie == ncclSignTiePositive ? (gt | eq) : gt;
    }
  }
}

template <typename T>
void unpackT(const uint64_t* planes, int nplanes, size_t stride, size_t count, T one, T minus, void* dst) {
  char* d = static_cast<char*>(dst);
  for (size_t j = 0; j < count; j++) {
    size_t w = j / kBlockElems;
    unsigned bit = (unsigned)(j % kBlockElems);
    bool pos = (planes[w] >> bit) & 1;
    bool neg = nplanes == 2 ? ((planes[stride + w] >> bit) & 1) : !pos;
    T v = pos ? one : neg ? minus : T(0);
    memcpy(d + sizeof(T) * j, &v, sizeof(T));
  }
}

void unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst) {
  switch (dt) {
    case ncclFloat32: unpackT<uint32_t>(planes, nplanes, stride, count, kF32One, kF32MinusOne, dst); break;
    case ncclFloat16: unpackT<uint16_t>(planes, nplanes, stride, count, kF16One, kF16MinusOne, dst); break;
    case ncclBfloat16: unpackT<uint16_t>(planes, nplanes, stride, count, kBf16One, kBf16MinusOne, dst); break;
    default: unpackT<uint8_t>(planes, nplanes, stride, count, kI8One, kI8MinusOne, dst); break;
  }
}

uint32_t countAt(const uint64_t* planes, int width, size_t stride, size_t w, unsigned bit) {
  uint32_t v = 0;
  for (int p = 0; p < width; p++) v |= (uint32_t)((planes[p * stride + w] >> bit) & 1) << p;
  return v;
}

void average(const Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) {
  char* d = static_cast<char*>(dst);
  for (size_t j = 0; j < count; j++) {
    size_t w = j / kBlockElems;
    unsigned bit = (unsigned)(j % kBlockElems);
    int32_t p = (int32_t)countAt(c.pos, c.posWidth, c.posStride, w, bit);
    int32_t s = c.neg ? p - (int32_t)countAt(c.neg, c.negWidth, c.negStride, w, bit) : 2 * p - nranks;
    float v = (float)s / (float)nranks;
    storeFloatAs(v, dt, d, j);
  }
}

}  // namespace

const Kernels& portableKernels() {
  static const Kernels k = {"portable", pack, add, decideBits, unpack, average, encodeTritsPortable,
                             decodeTritsPortable};
  return k;
}

}  // namespace bits
}  // namespace signlion
