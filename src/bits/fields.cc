#include "bits/fields.h"

#include <algorithm>
#include <cstring>
#include <numeric>

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

}  // namespace

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
    for (int p = 0; p < planes; p++) spread(tile + p * tw, n, fieldBits, out + (size_t)p * stride + first / per);
  }
}

void fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                    size_t planeStride) {
  const size_t per = (size_t)(64 / fieldBits);
  const uint64_t mask = fieldBits >= 64 ? ~0ull : ((1ull << fieldBits) - 1);
  const size_t nblocks = numWords(n);
  for (int p = 0; p < width; p++) memset(planes + (size_t)p * planeStride, 0, nblocks * 8);
  for (size_t i = 0; i < n; i++) {
    size_t e = first + i;
    uint64_t v = (words[e / per] >> ((e % per) * fieldBits)) & mask;
    for (int p = 0; p < width; p++) planes[(size_t)p * planeStride + i / 64] |= ((v >> p) & 1) << (i % 64);
  }
}

}  // namespace bits
}  // namespace signlion
