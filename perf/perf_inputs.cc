#include "perf_inputs.h"

#include <cstring>
#include <vector>

#include "bits/bits.h"
#include "bits/float16.h"
#include "bits/vote_reference.h"

namespace signlion {
namespace perf {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The sign and zero masks of one block of one rank: bit j is element 64b+j.
struct BlockMasks {
  uint64_t negative;  // negative and not zero
  uint64_t zero;      // one element in eight
};

uint64_t rankKey(uint64_t seed, int rank) { return mix(seed * 0xD1B54A32D192ED03ull + (uint64_t)rank + 1); }

BlockMasks blockMasks(uint64_t key, size_t block) {
  uint64_t h = mix(key ^ (block * 0xC2B2AE3D27D4EB4Full));
  uint64_t z = mix(h ^ 1) & mix(h ^ 2) & mix(h ^ 3);
  return {h & ~z, z};
}

int magnitude(size_t i, uint64_t seed) {
  return 1 + (int)(((uint64_t)i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull) >> 62);
}

// The raw bits of element i (at most 4 bytes).
uint32_t loadBits(const void* buf, size_t esize, size_t i) {
  uint32_t v = 0;
  memcpy(&v, static_cast<const char*>(buf) + i * esize, esize);
  return v;
}

uint32_t encode(float v, ncclDataType_t dt) {
  uint32_t bits = 0;
  bits::storeFloatAs(v, dt, &bits, 0);
  return bits;
}

// Per element of a block: how many ranks hold a negative, and a zero.
void countBlock(const std::vector<uint64_t>& keys, size_t block, int* negatives, int* zeros) {
  memset(negatives, 0, 64 * sizeof(int));
  memset(zeros, 0, 64 * sizeof(int));
  for (uint64_t key : keys) {
    BlockMasks m = blockMasks(key, block);
    for (uint64_t w = m.negative; w != 0; w &= w - 1) negatives[__builtin_ctzll(w)]++;
    for (uint64_t w = m.zero; w != 0; w &= w - 1) zeros[__builtin_ctzll(w)]++;
  }
}

}  // namespace

void fillInput(void* buf, size_t count, ncclDataType_t dt, int rank, uint64_t seed) {
  const size_t esize = bits::typeSize(dt);
  const uint64_t key = rankKey(seed, rank);
  char* out = static_cast<char*>(buf);
  for (size_t b = 0; b * 64 < count; b++) {
    BlockMasks m = blockMasks(key, b);
    size_t end = std::min(count, b * 64 + 64);
    for (size_t i = b * 64; i < end; i++) {
      int j = (int)(i % 64);
      float v = (m.zero >> j) & 1 ? 0.0f : (float)magnitude(i, seed) * ((m.negative >> j) & 1 ? -1.0f : 1.0f);
      uint32_t bits = encode(v, dt);
      memcpy(out + i * esize, &bits, esize);
    }
  }
}

size_t countWrong(const void* out, size_t count, ncclDataType_t dt, Reduction red, int nranks, uint64_t seed,
                  ncclSignTieRule_t tie) {
  const size_t esize = bits::typeSize(dt);
  std::vector<uint64_t> keys(nranks);
  for (int r = 0; r < nranks; r++) keys[r] = rankKey(seed, r);

  // Sign reductions: the output for k negative votes (a zero votes +1).
  std::vector<uint32_t> byNegatives(nranks + 1, 0);
  if (red != Reduction::kSum) {
    ncclSignOp_t op = red == Reduction::kAverage ? ncclSignAverage : ncclSignMajority;
    for (int k = 0; k <= nranks; k++)
      bits::referenceResult(nranks - 2 * k, nranks, op, tie, dt, &byNegatives[k], 0);
  }

  size_t wrong = 0;
  int negatives[64], zeros[64];
  for (size_t b = 0; b * 64 < count; b++) {
    countBlock(keys, b, negatives, zeros);
    size_t end = std::min(count, b * 64 + 64);
    for (size_t i = b * 64; i < end; i++) {
      int j = (int)(i % 64);
      uint32_t want;
      if (red == Reduction::kSum)
        want = encode((float)(magnitude(i, seed) * (nranks - zeros[j] - 2 * negatives[j])), dt);
      else
        want = byNegatives[negatives[j]];
      wrong += loadBits(out, esize, i) != want;
    }
  }
  return wrong;
}

}  // namespace perf
}  // namespace signlion
