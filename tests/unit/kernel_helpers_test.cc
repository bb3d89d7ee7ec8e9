// The host-device helpers of the CUDA kernels (kernels/*.h) on the CPU,
// against the CPU vote algebra and plain definitions: classification of raw
// bits, the lane <-> bit layout of the pack and unpack paths (a warp
// simulated lane by lane), counter words (add, sumVotes, decide, the fused
// add-and-compare), and the field-sum index math. The kernels themselves run
// on the SIMT emulator (tests/simt/) and on a GPU (tests/gpu/).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "bits/bits.h"
#include "bits/fields.h"
#include "bits/vote_reference.h"
#include "common/vote_inputs.h"
#include "kernels/counter_word.h"
#include "kernels/elem_traits.h"
#include "kernels/field_layout.h"
#include "kernels/warp_layout.h"

namespace signlion {
namespace kernels {
namespace {

using test::Bytes;

const bits::Kernels& cpu() { return bits::kernels(); }

std::vector<uint64_t> randomWords(size_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> w(n);
  for (uint64_t& x : w) x = rng();
  return w;
}

// Element i of a buffer as the zero-extended raw integer of its type.
uint32_t rawAt(const Bytes& b, size_t es, size_t i) {
  uint32_t r = 0;
  memcpy(&r, b.data() + i * es, es);
  return r;
}

// ---- elem_traits.h ---------------------------------------------------------

template <typename E>
void expectClassification(ncclDataType_t dt, uint32_t raw) {
  Bytes one(4);
  memcpy(one.data(), &raw, E::kBytes);
  int vote = bits::referenceVote(one.data(), dt, 0, ncclSignZeroAbstain);
  ASSERT_EQ(E::positive(raw), vote == 1) << bits::typeName(dt) << " raw 0x" << std::hex << raw;
  ASSERT_EQ(E::negative(raw), vote == -1) << bits::typeName(dt) << " raw 0x" << std::hex << raw;
}

TEST(KernelHelpers, ClassificationEqualsReference) {
  for (uint32_t r = 0; r < 0x100; r++) expectClassification<I8Traits>(ncclInt8, r);
  for (uint32_t r = 0; r < 0x10000; r++) {
    expectClassification<F16Traits>(ncclFloat16, r);
    expectClassification<Bf16Traits>(ncclBfloat16, r);
  }
  // fp32: every exponent and sign with edge and random mantissas.
  std::mt19937 rng(1);
  for (uint32_t top = 0; top < 0x200; top++) {
    for (uint32_t man : {0u, 1u, 2u, 0x400000u, 0x7fffffu, 0x7ffffeu, (uint32_t)rng() & 0x7fffffu})
      expectClassification<F32Traits>(ncclFloat32, (top << 23) | man);
  }
}

TEST(KernelHelpers, VectorElementsRoundTrip) {
  std::mt19937 rng(2);
  for (int t = 0; t < 1000; t++) {
    uint32_t v[4] = {(uint32_t)rng(), (uint32_t)rng(), (uint32_t)rng(), (uint32_t)rng()}, w[4] = {0, 0, 0, 0};
    for (int k = 0; k < Bf16Traits::kVec; k++) Bf16Traits::put(w, k, Bf16Traits::get(v, k));
    ASSERT_EQ(memcmp(v, w, 16), 0);
    uint32_t x[4] = {0, 0, 0, 0};
    for (int k = 0; k < I8Traits::kVec; k++) I8Traits::put(x, k, I8Traits::get(v, k));
    ASSERT_EQ(memcmp(v, x, 16), 0);
    uint8_t bytes[16];
    memcpy(bytes, v, 16);
    ASSERT_EQ(I8Traits::get(v, 5), bytes[5]);  // little-endian element order
  }
}

// ---- warp_layout.h: the pack vector path, one warp simulated ---------------

// What packKernel's vector path computes: for every tile of 32 vectors, lane
// l's V-bit mask shifted to LaneSlice::shift(l) and OR-ed into half-word
// LaneSlice::word(l) (the xor-shuffles OR exactly the lanes that share it).
template <typename E>
std::vector<uint64_t> simulatePackTiles(const Bytes& in, size_t tiles, ncclSignZeroRule_t zero) {
  using S = LaneSlice<E::kVec>;
  std::vector<uint32_t> hw(2 * tiles * E::kVec, 0);
  const size_t plane1 = tiles * E::kVec;
  for (size_t t = 0; t < tiles; t++) {
    for (int lane = 0; lane < 32; lane++) {
      uint32_t v[4];
      memcpy(v, in.data() + (t * 32 + lane) * 16, 16);
      uint32_t pos, neg;
      voteMasks<E>(v, pos, neg);
      hw[t * E::kVec + S::word(lane)] |= firstVotePlane(zero, pos, neg, S::mask()) << S::shift(lane);
      hw[plane1 + t * E::kVec + S::word(lane)] |= neg << S::shift(lane);
    }
  }
  std::vector<uint64_t> words(hw.size() / 2);
  memcpy(words.data(), hw.data(), hw.size() * 4);
  return words;
}

template <typename E>
void expectPackTilesEqualCpu(ncclDataType_t dt) {
  const size_t tiles = 7, count = tiles * 32 * E::kVec, nw = bits::numWords(count);
  Bytes in = test::randomVoteInputs(1, count, dt, 3)[0];
  for (size_t i = 0; i < count; i += 13) in[i * E::kBytes + E::kBytes - 1] ^= 0x80;  // flip some signs of NaN/0
  for (ncclSignZeroRule_t zero : {ncclSignZeroPositive, ncclSignZeroNegative, ncclSignZeroAbstain}) {
    std::vector<uint64_t> want(2 * nw, 0);
    cpu().pack(in.data(), dt, count, zero, want.data(), nw);
    std::vector<uint64_t> got = simulatePackTiles<E>(in, tiles, zero);
    int planes = bits::votePlanes(zero);
    for (size_t i = 0; i < planes * nw; i++) ASSERT_EQ(got[i], want[i]) << bits::typeName(dt) << " word " << i;
  }
}

TEST(KernelHelpers, PackTileLayoutEqualsCpuPack) {
  expectPackTilesEqualCpu<F32Traits>(ncclFloat32);
  expectPackTilesEqualCpu<F16Traits>(ncclFloat16);
  expectPackTilesEqualCpu<Bf16Traits>(ncclBfloat16);
  expectPackTilesEqualCpu<I8Traits>(ncclInt8);
}

// ---- warp_layout.h + elem_traits.h: the unpack vector path -----------------

// What storeMajorityChunk's vector path writes: round j, lane l takes bits
// [shift(l), shift(l) + V) of the chunk's half-word jV + word(l).
template <typename E>
Bytes simulateUnpack(const std::vector<uint64_t>& planes, int nplanes, size_t stride, size_t count) {
  using S = LaneSlice<E::kVec>;
  const uint32_t* plus = reinterpret_cast<const uint32_t*>(planes.data());
  const uint32_t* minus = plus + 2 * stride;
  Bytes out(count * E::kBytes);
  for (size_t chunk = 0; chunk * 1024 < count; chunk++) {
    for (int j = 0; j < S::kLanesPerWord; j++) {
      for (int lane = 0; lane < 32; lane++) {
        const size_t hw = chunk * 32 + j * E::kVec + S::word(lane);
        const uint32_t pos = (plus[hw] >> S::shift(lane)) & S::mask();
        const uint32_t neg = nplanes == 2 ? (minus[hw] >> S::shift(lane)) & S::mask() : ~pos & S::mask();
        const size_t e = chunk * 1024 + (size_t)(j * 32 + lane) * E::kVec;
        uint32_t v[4];
        resultVector<E>(pos, neg, v);
        for (int k = 0; k < E::kVec && e + k < count; k++) {
          uint32_t raw = E::get(v, k);
          memcpy(out.data() + (e + k) * E::kBytes, &raw, E::kBytes);
        }
      }
    }
  }
  return out;
}

template <typename E>
void expectUnpackEqualsCpu(ncclDataType_t dt) {
  std::mt19937_64 rng(4);
  for (size_t count : {(size_t)1, (size_t)100, (size_t)1024, (size_t)3000}) {
    const size_t nw = bits::numWords(count), stride = (nw + 15) / 16 * 16;  // whole chunks readable
    std::vector<uint64_t> planes = randomWords(2 * stride, rng);
    for (int nplanes : {1, 2}) {
      Bytes want(count * E::kBytes);
      cpu().unpack(planes.data(), nplanes, stride, count, dt, want.data());
      ASSERT_EQ(simulateUnpack<E>(planes, nplanes, stride, count), want) << bits::typeName(dt) << " " << count;
    }
  }
}

TEST(KernelHelpers, UnpackLayoutEqualsCpuUnpack) {
  expectUnpackEqualsCpu<F32Traits>(ncclFloat32);
  expectUnpackEqualsCpu<F16Traits>(ncclFloat16);
  expectUnpackEqualsCpu<Bf16Traits>(ncclBfloat16);
  expectUnpackEqualsCpu<I8Traits>(ncclInt8);
}

TEST(KernelHelpers, BitRangeAndPlaneCounts) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 10000; t++) {
    uint32_t lo = (uint32_t)rng(), hi = (uint32_t)rng();
    unsigned off = (unsigned)(rng() % 32), n = 1 + (unsigned)(rng() % (64 - off));
    uint64_t want = 0;
    for (unsigned i = 0; i < n; i++) {
      unsigned b = off + i;
      want |= (uint64_t)((b < 32 ? lo >> b : hi >> (b - 32)) & 1) << i;
    }
    ASSERT_EQ(bitRange(lo, hi, off, n), want);
  }
  const int width = 5;
  const size_t nw = 3, stride = nw + 1;
  std::vector<uint64_t> planes = randomWords(width * stride, rng);
  PlaneWords pw = PlaneWords::of(planes.data(), width, stride);
  for (size_t e = 0; e < nw * 64; e += 4) {
    int c[4];
    pw.counts(e, c);
    for (int k = 0; k < 4; k++) {
      int want = 0;
      for (int p = 0; p < width; p++) want |= (int)((planes[p * stride + (e + k) / 64] >> ((e + k) % 64)) & 1) << p;
      ASSERT_EQ(c[k], want) << "element " << e + k;
    }
  }
}

// ---- counter_word.h --------------------------------------------------------

TEST(KernelHelpers, AddAndSumVotesWordsEqualCpu) {
  std::mt19937_64 rng(6);
  const size_t nw = 9;
  for (int wa = 0; wa <= 5; wa++) {
    for (int wb = 1; wb <= 5; wb++) {
      const int wout = std::max(wa, wb) + (int)(rng() % 2);
      std::vector<uint64_t> a = randomWords(std::max(wa, 1) * nw, rng), b = randomWords(wb * nw, rng);
      std::vector<uint64_t> want(wout * nw), got(wout * nw);
      cpu().add(a.data(), wa, nw, b.data(), wb, nw, want.data(), wout, nw, nw);
      for (size_t i = 0; i < nw; i++)
        addWord<uint64_t>([&](int p) { return a[p * nw + i]; }, wa, [&](int p) { return b[p * nw + i]; }, wb,
                          [&](int p, uint64_t w) { got[p * nw + i] = w; }, wout);
      ASSERT_EQ(got, want) << wa << "+" << wb << "->" << wout;
    }
  }
  for (int nslots : {0, 1, 2, 5, 16, 17, 100, 255, 1000}) {
    const int width = bits::widthFor((uint64_t)nslots);
    std::vector<uint64_t> votes = randomWords(std::max(nslots, 1) * nw, rng), want(width * nw, 0);
    for (int r = 0; r < nslots; r++)
      cpu().add(want.data(), width, nw, votes.data() + r * nw, 1, nw, want.data(), width, nw, nw);
    for (size_t i = 0; i < nw; i++) {
      uint64_t count[kMaxSumVotesWidth];
      sumVotesWord<uint64_t>([&](int r) { return votes[r * nw + i]; }, nslots, count);
      for (int p = 0; p < kMaxSumVotesWidth; p++)
        ASSERT_EQ(count[p], p < width ? want[p * nw + i] : 0) << nslots << " slots, plane " << p;
    }
    // The batched variants' body (8 planes: up to 255 slots), a word and a
    // pair of words at a time.
    if (nslots > 255) continue;
    for (size_t i = 0; i < nw; i++) {
      uint64_t count[8];
      sumVotesBatched<8, 8, uint64_t>([&](int r) { return votes[r * nw + i]; }, nslots, count);
      for (int p = 0; p < 8; p++)
        ASSERT_EQ(count[p], p < width ? want[p * nw + i] : 0) << nslots << " slots batched, plane " << p;
    }
    for (size_t i = 0; i + 1 < nw; i += 2) {
      WordPair count[8];
      sumVotesBatched<8, 8, WordPair>([&](int r) { return WordPair(votes[r * nw + i], votes[r * nw + i + 1]); },
                                      nslots, count);
      for (int p = 0; p < 8; p++) {
        ASSERT_EQ(count[p].lo, p < width ? want[p * nw + i] : 0) << nslots << " slots paired, plane " << p;
        ASSERT_EQ(count[p].hi, p < width ? want[p * nw + i + 1] : 0) << nslots << " slots paired, plane " << p;
      }
    }
  }
}

// decideBits' result for counters P (and M), one uint64 word at a time and
// as its two uint32 halves (the GPU's half-words).
TEST(KernelHelpers, DecideWordsEqualCpu) {
  std::mt19937_64 rng(7);
  const size_t nw = 5;
  for (int n = 1; n <= 17; n++) {
    const int wp = bits::widthFor((uint64_t)n), wm = wp + (n % 3 == 0);
    std::vector<uint64_t> P = randomWords(wp * nw, rng), M = randomWords(wm * nw, rng);
    for (bool ternary : {false, true}) {
      for (ncclSignTieRule_t tie : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
        bits::Counts c{P.data(), wp, nw};
        if (ternary) c = bits::Counts{P.data(), wp, nw, M.data(), wm, nw};
        const bool two = bits::majorityPlanes(n, ternary ? ncclSignZeroAbstain : ncclSignZeroPositive, tie) == 2;
        std::vector<uint64_t> want(2 * nw, 0);
        cpu().decideBits(c, n, tie, want.data(), nw, nw);
        for (size_t i = 0; i < nw; i++) {
          uint64_t gt, eq, r0, r1;
          compareMajority<uint64_t>([&](int p) { return P[p * nw + i]; }, wp, [&](int p) { return M[p * nw + i]; },
                                    wm, ternary, n, gt, eq);
          resultPlanes(gt, eq, two, tie, r0, r1);
          ASSERT_EQ(r0, want[i]);
          if (two) {
            ASSERT_EQ(r1, want[nw + i]);
          }
          for (int h = 0; h < 2; h++) {
            auto half = [&](const std::vector<uint64_t>& v, int p) { return (uint32_t)(v[p * nw + i] >> (32 * h)); };
            uint32_t g32, e32, a32, b32;
            compareMajority<uint32_t>([&](int p) { return half(P, p); }, wp, [&](int p) { return half(M, p); }, wm,
                                      ternary, n, g32, e32);
            resultPlanes(g32, e32, two, tie, a32, b32);
            ASSERT_EQ(a32, (uint32_t)(want[i] >> (32 * h)));
            if (two) {
              ASSERT_EQ(b32, (uint32_t)(want[nw + i] >> (32 * h)));
            }
          }
        }
      }
    }
  }
}

// The fused step's add-and-compare from the lowest plane against add, then
// decideBits on the stored sum; compareStep against compareCounters.
TEST(KernelHelpers, AddCompareMajorityEqualsAddThenDecide) {
  std::mt19937_64 rng(8);
  const size_t nw = 4;
  for (int n = 1; n <= 40; n++) {
    const int n1 = n / 3, n2 = n - n1;
    const int w1 = bits::widthFor((uint64_t)n1), w2 = bits::widthFor((uint64_t)n2);
    // The width that holds N, and one plane less (carries lost, as add() loses them).
    const int full = bits::widthFor((uint64_t)n);
    for (int sumWidth : {full, full > 1 ? full - 1 : 1}) {
      std::vector<uint64_t> aP = randomWords(w1 * nw, rng), aM = randomWords(w1 * nw, rng);
      std::vector<uint64_t> bP = randomWords(w2 * nw, rng), bM = randomWords(w2 * nw, rng);
      std::vector<uint64_t> sP(sumWidth * nw), sM(sumWidth * nw);
      cpu().add(aP.data(), w1, nw, bP.data(), w2, nw, sP.data(), sumWidth, nw, nw);
      cpu().add(aM.data(), w1, nw, bM.data(), w2, nw, sM.data(), sumWidth, nw, nw);
      for (bool ternary : {false, true}) {
        for (ncclSignTieRule_t tie : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
          bits::Counts c{sP.data(), sumWidth, nw};
          if (ternary) c = bits::Counts{sP.data(), sumWidth, nw, sM.data(), sumWidth, nw};
          const bool two = bits::majorityPlanes(n, ternary ? ncclSignZeroAbstain : ncclSignZeroPositive, tie) == 2;
          std::vector<uint64_t> want(2 * nw, 0);
          cpu().decideBits(c, n, tie, want.data(), nw, nw);
          for (size_t i = 0; i < nw; i++) {
            uint64_t gt, eq, r0, r1;
            addCompareMajority<uint64_t>([&](int p) { return aP[p * nw + i]; }, w1,
                                         [&](int p) { return bP[p * nw + i]; }, w2,
                                         [&](int p) { return aM[p * nw + i]; }, w1,
                                         [&](int p) { return bM[p * nw + i]; }, w2, ternary, sumWidth, n, gt, eq);
            resultPlanes(gt, eq, two, tie, r0, r1);
            ASSERT_EQ(r0, want[i]) << "N=" << n << " sumWidth=" << sumWidth << " ternary=" << ternary;
            if (two) {
              ASSERT_EQ(r1, want[nw + i]);
            }
            // The prefetch variant's unrolled body (planes in registers, up to 8).
            uint64_t gtU, eqU;
            addCompareMajorityUnrolled<8, uint64_t>([&](int p) { return aP[p * nw + i]; }, w1,
                                                    [&](int p) { return bP[p * nw + i]; }, w2,
                                                    [&](int p) { return aM[p * nw + i]; }, w1,
                                                    [&](int p) { return bM[p * nw + i]; }, w2, ternary, sumWidth, n,
                                                    gtU, eqU);
            ASSERT_EQ(gtU, gt) << "N=" << n << " sumWidth=" << sumWidth << " ternary=" << ternary << " unrolled";
            ASSERT_EQ(eqU, eq) << "N=" << n << " sumWidth=" << sumWidth << " ternary=" << ternary << " unrolled";
          }
        }
      }
    }
  }
  for (int t = 0; t < 1000; t++) {
    const int wa = 1 + (int)(rng() % 6), wb = 1 + (int)(rng() % 6);
    std::vector<uint64_t> a = randomWords(wa, rng), b = randomWords(wb, rng);
    uint64_t gt, eq, gt2 = 0, eq2 = ~0ull;
    bits::compareCounters<uint64_t>([&](int p) { return a[p]; }, wa, [&](int p) { return b[p]; }, wb, ~0ull, gt, eq);
    for (int p = 0; p < std::max(wa, wb); p++)
      bits::compareStep<uint64_t>(p < wa ? a[p] : 0, p < wb ? b[p] : 0, gt2, eq2);
    ASSERT_EQ(gt2, gt);
    ASSERT_EQ(eq2, eq);
  }
}

// ---- field_layout.h --------------------------------------------------------

// packFieldsKernel's group of 32 words, simulated: ballot r of the group
// holds the votes of its elements [32r, 32r + 32); lane l's word spreads the
// per bits of ballots first()..last() from offset().
TEST(KernelHelpers, FieldLanesEqualCpuPackFields) {
  for (int f : {1, 2, 3, 4, 5, 7, 8, 13, 21, 32, 33, 64}) {
    const int per = 64 / f;
    for (size_t count : {(size_t)1, (size_t)70, (size_t)32 * per, (size_t)32 * per * 3 + 17}) {
      Bytes in = test::randomVoteInputs(1, count, ncclFloat32, (uint32_t)(f * 1000 + count))[0];
      const size_t nfw = bits::fieldWordsFor(count, f);
      std::vector<uint64_t> want(nfw);
      bits::packFields(cpu(), in.data(), ncclFloat32, count, ncclSignZeroNegative, f, want.data(), nfw);
      for (size_t g = 0; g * 32 < nfw; g++) {
        std::vector<uint32_t> ballots(per, 0);
        for (int r = 0; r < per; r++) {
          for (int lane = 0; lane < 32; lane++) {
            size_t e = g * 32 * per + (size_t)r * 32 + lane;
            if (e < count) ballots[r] |= (uint32_t)F32Traits::positive(rawAt(in, 4, e)) << lane;
          }
        }
        for (int lane = 0; lane < 32 && g * 32 + lane < nfw; lane++) {
          FieldLane fl(lane, per);
          uint64_t word = spreadToFields(bitRange(ballots[fl.first()], ballots[fl.last()], fl.offset(), per), per, f);
          ASSERT_EQ(word, want[g * 32 + lane]) << "f=" << f << " count=" << count << " word " << g * 32 + lane;
        }
      }
    }
  }
}

TEST(KernelHelpers, FieldCursorEqualsDivision) {
  for (unsigned per : {1u, 2u, 3u, 5u, 7u, 21u, 32u, 64u}) {
    for (size_t start : {(size_t)0, (size_t)64, (size_t)12345}) {
      for (size_t stride : {(size_t)32, (size_t)96, (size_t)4096, (size_t)1000000}) {
        FieldCursor c(start, stride, per);
        for (size_t e = start; e < start + 50 * stride; e += stride, c.advance()) {
          for (unsigned lane : {0u, 1u, 31u}) {
            size_t w;
            unsigned fld;
            c.at(lane, w, fld);
            ASSERT_EQ(w, (e + lane) / per);
            ASSERT_EQ(fld, (e + lane) % per);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace signlion
