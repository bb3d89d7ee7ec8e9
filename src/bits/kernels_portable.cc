// The portable implementation: plain uint64 words, one element at a time where
// an element must be read or written. The AVX2 one must match it bit for bit.
#include <cstring>

#include "bits/bits.h"
#include "bits/bitslice.h"
#include "bits/element_codes.h"
#include "bits/float16.h"

namespace signlion {
namespace bits {
namespace {

// Sign bits of up to 64 elements starting at element `first`: pos / neg
// masks; zero and NaN set neither.
struct SignMasks {
  uint64_t pos = 0, neg = 0;
};

SignMasks classifyWord(const void* src, ncclDataType_t dt, size_t first, unsigned n) {
  SignMasks m;
  const char* base = static_cast<const char*>(src);
  for (unsigned i = 0; i < n; i++) {
    bool signBit, valid;
    switch (dt) {
      case ncclFloat32: {
        uint32_t u;
        memcpy(&u, base + 4 * (first + i), 4);
        uint32_t a = u & 0x7fffffffu;
        valid = a != 0 && a <= kF32AbsInf;
        signBit = (u >> 31) != 0;
        break;
      }
      case ncclFloat16:
      case ncclBfloat16: {
        uint16_t h;
        memcpy(&h, base + 2 * (first + i), 2);
        uint16_t a = h & 0x7fffu;
        valid = a != 0 && a <= (dt == ncclFloat16 ? kF16AbsInf : kBf16AbsInf);
        signBit = (h >> 15) != 0;
        break;
      }
      default: {  // ncclInt8
        int8_t x = static_cast<int8_t>(base[first + i]);
        valid = x != 0;
        signBit = x < 0;
        break;
      }
    }
    m.pos |= (uint64_t)(valid && !signBit) << i;
    m.neg |= (uint64_t)(valid && signBit) << i;
  }
  return m;
}

void pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out, size_t stride) {
  size_t nwords = numWords(count);
  for (size_t w = 0; w < nwords; w++) {
    unsigned n = (unsigned)(count - w * kBlockElems < kBlockElems ? count - w * kBlockElems : kBlockElems);
    SignMasks m = classifyWord(src, dt, w * kBlockElems, n);
    switch (rule) {
      case ncclSignZeroPositive: out[w] = ~m.neg & lowBits(n); break;
      case ncclSignZeroNegative: out[w] = m.pos; break;
      default:
        out[w] = m.pos;
        out[stride + w] = m.neg;
        break;
    }
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

void unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst) {
  char* d = static_cast<char*>(dst);
  for (size_t j = 0; j < count; j++) {
    size_t w = j / kBlockElems;
    unsigned bit = (unsigned)(j % kBlockElems);
    bool pos = (planes[w] >> bit) & 1;
    bool neg = nplanes == 2 ? ((planes[stride + w] >> bit) & 1) : !pos;
    switch (dt) {
      case ncclFloat32: {
        uint32_t v = pos ? kF32One : neg ? kF32MinusOne : 0;
        memcpy(d + 4 * j, &v, 4);
        break;
      }
      case ncclFloat16:
      case ncclBfloat16: {
        uint16_t one = dt == ncclFloat16 ? kF16One : kBf16One;
        uint16_t minus = dt == ncclFloat16 ? kF16MinusOne : kBf16MinusOne;
        uint16_t v = pos ? one : neg ? minus : 0;
        memcpy(d + 2 * j, &v, 2);
        break;
      }
      default: d[j] = (char)(pos ? kI8One : neg ? kI8MinusOne : 0); break;
    }
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
  static const Kernels k = {"portable", pack, add, decideBits, unpack, average};
  return k;
}

}  // namespace bits
}  // namespace signlion
