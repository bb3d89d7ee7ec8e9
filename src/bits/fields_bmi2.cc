// The field <-> bit conversions with BMI2's pdep/pext: one instruction moves
// every vote of a field word, instead of one shift per element. Compiled with
// -mbmi2; fields.cc calls these only on a CPU that has BMI2. (pdep/pext are
// slow microcode on AMD before Zen 3, but still correct there.)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"
#include "bits/element_codes.h"

namespace signlion {
namespace bits {

namespace {

// Bit 0 of every field of a word: where pdep puts, and pext takes, the votes.
inline uint64_t fieldBase(int fieldBits, size_t per) {
  uint64_t m = 0;
  for (size_t i = 0; i < per; i++) m |= 1ull << (i * fieldBits);
  return m;
}

// n <= 64 bits of a bit array starting at bit `pos`.
inline uint64_t readBits(const uint64_t* a, size_t pos, unsigned n) {
  size_t w = pos / 64;
  unsigned off = (unsigned)(pos % 64);
  uint64_t v = a[w] >> off;
  if (off != 0 && off + n > 64) v |= a[w + 1] << (64 - off);
  return v & lowBits(n);
}

// ORs n <= 64 bits into a bit array at bit `pos`.
inline void orBits(uint64_t* a, size_t pos, uint64_t v, unsigned n) {
  size_t w = pos / 64;
  unsigned off = (unsigned)(pos % 64);
  a[w] |= v << off;
  if (off != 0 && off + n > 64) a[w + 1] |= v >> (64 - off);
}

}  // namespace

// Declared in fields.cc.
void spreadBmi2(const uint64_t* votes, size_t count, int fieldBits, uint64_t* out) {
  const size_t per = (size_t)(64 / fieldBits);
  const uint64_t base = fieldBase(fieldBits, per);
  const size_t nwords = (count + per - 1) / per;
  for (size_t w = 0; w < nwords; w++) {
    size_t e0 = w * per;
    unsigned n = (unsigned)(count - e0 < per ? count - e0 : per);
    out[w] = _pdep_u64(readBits(votes, e0, n), base);
  }
}

void fieldsToPlanesBmi2(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                        size_t planeStride) {
  const size_t per = (size_t)(64 / fieldBits);
  const uint64_t base = fieldBase(fieldBits, per);
  for (size_t e = first; e < first + n;) {
    size_t w = e / per;
    size_t skip = e - w * per;                               // fields of this word before `first`
    size_t take = per - skip < first + n - e ? per - skip : first + n - e;
    for (int p = 0; p < width; p++) {
      uint64_t bits = _pext_u64(words[w] >> p, base) >> skip;
      orBits(planes + (size_t)p * planeStride, e - first, bits & lowBits((unsigned)take), (unsigned)take);
    }
    e += take;
  }
}

}  // namespace bits
}  // namespace signlion
