#include "bits/fields.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "bits/element_codes.h"

namespace signlion {
namespace bits {

namespace {

// Spreads the votes of one packed vote plane (bit e = vote of element e) into
// fields: the vote bits are read a word at a time, written a field at a time.
void spread(const uint64_t* votes, size_t count, int fieldBits, uint64_t* out) {
  const size_t per = (size_t)(64 / fieldBits);
  const size_t nwords = fieldWordsFor(count, fieldBits);
  for (size_t w = 0; w < nwords; w++) {
    uint64_t word = 0;
    size_t e0 = w * per, n = std::min(per, count - e0);
    for (size_t i = 0; i < n; i++) {
      size_t e = e0 + i;
      word |= ((votes[e / kBlockElems] >> (e % kBlockElems)) & 1) << (i * fieldBits);
    }
    out[w] = word;
  }
}

#if defined(__x86_64__)
// SIGNLION_BITS_ISA=portable (the portable kernels) turns BMI2 off as well.
bool haveBmi2() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("bmi2") != 0 && strcmp(kernels().name, "portable") != 0;
  }();
  return have;
}
#else
bool haveBmi2() { return false; }
#endif

}  // namespace

// fields_bmi2.cc: the same conversions with pdep/pext.
void spreadBmi2(const uint64_t* votes, size_t count, int fieldBits, uint64_t* out);
void fieldsToPlanesBmi2(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                        size_t planeStride);

void packFields(const Kernels& k, const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero,
                int fieldBits, uint64_t* out, size_t stride) {
  // Pack to bits a tile at a time (in L1), then spread the tile into fields.
  // A tile starts both a vote word and a field word: its length is a
  // multiple of lcm(64, fields per word), which is at most 64 * 21 here.
  constexpr size_t kTileElems = 64 * 256;
  uint64_t tile[2 * kTileElems / 64];
  const size_t per = (size_t)(64 / fieldBits);
  const size_t unit = 64 / std::gcd((size_t)64, per) * per;
  const size_t tileElems = kTileElems / unit * unit;
  const size_t es = typeSize(dt);
  const int planes = votePlanes(zero);
  for (size_t first = 0; first < count; first += tileElems) {
    size_t n = std::min(tileElems, count - first);
    size_t tw = numWords(n);
    k.pack(static_cast<const char*>(src) + first * es, dt, n, zero, tile, tw);
    for (int p = 0; p < planes; p++) {
      uint64_t* dst = out + (size_t)p * stride + first / per;
      if (haveBmi2()) {
        spreadBmi2(tile + p * tw, n, fieldBits, dst);
      } else {
        spread(tile + p * tw, n, fieldBits, dst);
      }
    }
  }
}

void fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                    size_t planeStride) {
  const size_t per = (size_t)(64 / fieldBits);
  const uint64_t mask = lowBits((unsigned)fieldBits);
  const size_t nblocks = numWords(n);
  for (int p = 0; p < width; p++) memset(planes + (size_t)p * planeStride, 0, nblocks * 8);
  if (haveBmi2()) return fieldsToPlanesBmi2(words, fieldBits, first, n, planes, width, planeStride);
  for (size_t i = 0; i < n; i++) {
    size_t e = first + i;
    uint64_t v = (words[e / per] >> ((e % per) * fieldBits)) & mask;
    for (int p = 0; p < width; p++) planes[(size_t)p * planeStride + i / 64] |= ((v >> p) & 1) << (i % 64);
  }
}

}  // namespace bits
}  // namespace signlion
