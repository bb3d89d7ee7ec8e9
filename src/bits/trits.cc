// The portable trit coder (trits.h) and the reference it is tested against.
// Word-parallel over the 8 byte lanes of a uint64 (SWAR): a group's byte j
// takes bit j of 5 words, so 8 bytes at a time take one byte of each word.
#include "bits/trits.h"

#include <cstring>

namespace signlion {
namespace bits {
namespace {

// Byte x spread to 8 byte lanes: lane i = bit i of x (0 or 1).
struct SpreadTable {
  uint64_t lanes[256];
  constexpr SpreadTable() : lanes() {
    for (unsigned x = 0; x < 256; x++)
      for (unsigned i = 0; i < 8; i++) lanes[x] |= static_cast<uint64_t>((x >> i) & 1) << (8 * i);
  }
};
constexpr SpreadTable kSpread;

// A byte's 5 digits: bit k (k < 5) set when digit k is 1 (+1), bit 5 + k
// when it is 2 (-1); kBad for a byte above kTritMaxByte.
constexpr uint16_t kBad = 0x8000;
struct DigitTable {
  uint16_t digits[256];
  constexpr DigitTable() : digits() {
    for (unsigned x = 0; x < 256; x++) {
      if (x > kTritMaxByte) {
        digits[x] = kBad;
        continue;
      }
      unsigned v = x;
      for (unsigned k = 0; k < 5; k++, v /= 3) {
        if (v % 3 == 1) digits[x] |= static_cast<uint16_t>(1u << k);
        if (v % 3 == 2) digits[x] |= static_cast<uint16_t>(1u << (5 + k));
      }
    }
  }
};
constexpr DigitTable kDigits;

constexpr uint64_t kPow3[5] = {1, 3, 9, 27, 81};
constexpr uint64_t kLaneLsb = 0x0101010101010101ull;
// Multiplying 8 lanes of 0/1 by this puts lane i's bit at bit 56 + i.
constexpr uint64_t kGatherLsbs = 0x0102040810204080ull;

}  // namespace

void encodeTritTail(const uint64_t* pos, const uint64_t* neg, size_t first, size_t rest, uint8_t* out) {
  if (rest == 0) return;  // an empty range may come with null pointers, which memcpy must not see
  memcpy(out, pos + first, rest * 8);
  for (size_t w = 0; w < rest; w++) {
    const uint64_t m = neg[first + w] & ~pos[first + w];  // +1 wins over both, as in a group
    memcpy(out + (rest + w) * 8, &m, 8);
  }
}

bool decodeTritTail(const uint8_t* in, size_t first, size_t rest, uint64_t* pos, uint64_t* neg) {
  if (rest == 0) return true;  // as above: nothing to decode, and no pointer to trust
  memcpy(pos + first, in, rest * 8);
  memcpy(neg + first, in + rest * 8, rest * 8);
  uint64_t both = 0;
  for (size_t w = first; w < first + rest; w++) both |= pos[w] & neg[w];
  return both == 0;
}

void encodeTritsPortable(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out) {
  const size_t groups = nblocks / kTritGroupBlocks;
  for (size_t g = 0; g < groups; g++) {
    const uint64_t* p = pos + g * kTritGroupBlocks;
    const uint64_t* m = neg + g * kTritGroupBlocks;
    uint64_t mOnly[5];
    for (int k = 0; k < 5; k++) mOnly[k] = m[k] & ~p[k];  // +1 wins over a malformed both
    for (unsigned j = 0; j < 64; j += 8) {
      // Byte lanes j..j+7: sum_k (p_k + 2 m_k) 3^k, at most 242: no lane carries.
      uint64_t acc = 0;
      for (int k = 0; k < 5; k++)
        acc += kSpread.lanes[(p[k] >> j) & 0xff] * kPow3[k] + kSpread.lanes[(mOnly[k] >> j) & 0xff] * (2 * kPow3[k]);
      memcpy(out + g * kTritGroupBytes + j, &acc, 8);
    }
  }
  encodeTritTail(pos, neg, groups * kTritGroupBlocks, nblocks % kTritGroupBlocks, out + groups * kTritGroupBytes);
}

bool decodeTritsPortable(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg) {
  const size_t groups = nblocks / kTritGroupBlocks;
  uint16_t bad = 0;
  for (size_t g = 0; g < groups; g++) {
    uint64_t p[5] = {0, 0, 0, 0, 0}, m[5] = {0, 0, 0, 0, 0};
    const uint8_t* src = in + g * kTritGroupBytes;
    for (unsigned j = 0; j < 64; j += 8) {
      // Lanes of the 8 bytes' +1 digit bits and -1 digit bits (5 each).
      uint64_t lp = 0, lm = 0;
      for (unsigned i = 0; i < 8; i++) {
        const uint16_t d = kDigits.digits[src[j + i]];
        bad |= d;
        lp |= static_cast<uint64_t>(d & 31) << (8 * i);
        lm |= static_cast<uint64_t>((d >> 5) & 31) << (8 * i);
      }
      for (int k = 0; k < 5; k++) {
        p[k] |= (((lp >> k) & kLaneLsb) * kGatherLsbs >> 56) << j;
        m[k] |= (((lm >> k) & kLaneLsb) * kGatherLsbs >> 56) << j;
      }
    }
    memcpy(pos + g * kTritGroupBlocks, p, sizeof p);
    memcpy(neg + g * kTritGroupBlocks, m, sizeof m);
  }
  const bool tailOk = decodeTritTail(in + groups * kTritGroupBytes, groups * kTritGroupBlocks,
                                     nblocks % kTritGroupBlocks, pos, neg);
  return (bad & kBad) == 0 && tailOk;
}

int tritReference(const uint8_t* in, size_t nblocks, size_t e) {
  const size_t block = e / 64, bit = e % 64;
  const size_t groups = nblocks / kTritGroupBlocks;
  if (block < groups * kTritGroupBlocks) {
    const size_t g = block / kTritGroupBlocks, k = block % kTritGroupBlocks;
    unsigned v = in[g * kTritGroupBytes + bit];
    if (v > kTritMaxByte) return 2;
    for (size_t i = 0; i < k; i++) v /= 3;
    return v % 3 == 0 ? 0 : v % 3 == 1 ? 1 : -1;
  }
  const size_t rest = nblocks % kTritGroupBlocks, w = block - groups * kTritGroupBlocks;
  uint64_t p, m;
  memcpy(&p, in + groups * kTritGroupBytes + w * 8, 8);
  memcpy(&m, in + groups * kTritGroupBytes + (rest + w) * 8, 8);
  const int pb = (int)((p >> bit) & 1), mb = (int)((m >> bit) & 1);
  return pb && mb ? 2 : pb - mb;
}

}  // namespace bits
}  // namespace signlion
