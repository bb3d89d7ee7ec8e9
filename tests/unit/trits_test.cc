// The trit coding of decided results (src/bits/trits.h) against its plain
// reference, for every implementation: every byte value at every byte
// position, partial groups, all-zero, malformed bytes; and the schedules'
// use of it: which result transfers travel coded and what they cost.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "algo/schedule.h"
#include "algo/topology.h"
#include "bits/bits.h"
#include "bits/trits.h"
#include "common/config.h"

namespace signlion {
namespace bits {
namespace {

std::vector<const Kernels*> implementations() {
  std::vector<const Kernels*> v = {&portableKernels()};
  if (avx2Kernels()) v.push_back(avx2Kernels());
  return v;
}

// A random decided result: each element +1, -1 or 0 (no element both).
void randomResult(std::mt19937_64& rng, size_t nblocks, std::vector<uint64_t>* pos, std::vector<uint64_t>* neg) {
  pos->assign(nblocks, 0);
  neg->assign(nblocks, 0);
  for (size_t w = 0; w < nblocks; w++) {
    const uint64_t a = rng(), b = rng();
    (*pos)[w] = a & b;
    (*neg)[w] = ~a & b;
  }
}

int planeValue(const std::vector<uint64_t>& pos, const std::vector<uint64_t>& neg, size_t e) {
  return (int)((pos[e / 64] >> (e % 64)) & 1) - (int)((neg[e / 64] >> (e % 64)) & 1);
}

TEST(Trits, SizeIsOnePointSixBitsPerElementAndWholeWords) {
  EXPECT_EQ(tritBytes(0), 0u);
  EXPECT_EQ(tritBytes(1), 16u);  // a partial group travels as its 2 planes
  EXPECT_EQ(tritBytes(4), 64u);
  EXPECT_EQ(tritBytes(5), 64u);  // 320 elements in 64 bytes: 1.6 bits each
  EXPECT_EQ(tritBytes(7), 96u);
  EXPECT_EQ(tritBytes(5000), 64000u);
  for (size_t b = 0; b < 100; b++) {
    EXPECT_EQ(tritBytes(b) % 8, 0u);
    EXPECT_LE(tritBytes(b), 16 * b);  // never more than the planes
  }
}

// Every byte value 0..242 at every byte position j of a group: group g's
// byte j is (g + 7 j) % 243, so over 243 groups each position takes each value.
TEST(Trits, EveryByteValueAtEveryPosition) {
  const size_t groups = kTritMaxByte + 1, nblocks = groups * kTritGroupBlocks;
  std::vector<uint8_t> want(tritBytes(nblocks));
  std::vector<uint64_t> pos(nblocks, 0), neg(nblocks, 0);
  for (size_t g = 0; g < groups; g++) {
    for (size_t j = 0; j < 64; j++) {
      const unsigned v = (unsigned)((g + 7 * j) % groups);
      want[g * kTritGroupBytes + j] = (uint8_t)v;
      unsigned d = v;
      for (size_t k = 0; k < 5; k++, d /= 3) {
        const size_t w = g * kTritGroupBlocks + k;
        if (d % 3 == 1) pos[w] |= uint64_t{1} << j;
        if (d % 3 == 2) neg[w] |= uint64_t{1} << j;
      }
    }
  }
  for (const Kernels* k : implementations()) {
    std::vector<uint8_t> got(want.size(), 0xee);
    k->encodeTrits(pos.data(), neg.data(), nblocks, got.data());
    EXPECT_EQ(got, want) << k->name;
    std::vector<uint64_t> p(nblocks, ~0ull), m(nblocks, ~0ull);
    EXPECT_TRUE(k->decodeTrits(want.data(), nblocks, p.data(), m.data())) << k->name;
    EXPECT_EQ(p, pos) << k->name;
    EXPECT_EQ(m, neg) << k->name;
  }
}

// Random results of every size up to a few groups (whole groups, partial
// ones, none), from and to unaligned addresses: the bytes decode to the same
// values under the reference, and back to the same planes.
TEST(Trits, RoundTripAndReferenceForEverySize) {
  std::mt19937_64 rng(41);
  for (size_t nblocks = 0; nblocks <= 23; nblocks++) {
    std::vector<uint64_t> pos, neg;
    randomResult(rng, nblocks, &pos, &neg);
    for (const Kernels* k : implementations()) {
      for (size_t misalign : {0, 1, 3}) {
        std::vector<uint8_t> buf(tritBytes(nblocks) + misalign + 8, 0xee);
        uint8_t* out = buf.data() + misalign;
        k->encodeTrits(pos.data(), neg.data(), nblocks, out);
        EXPECT_EQ(out[tritBytes(nblocks)], 0xee) << k->name << " wrote past tritBytes(" << nblocks << ")";
        for (size_t e = 0; e < nblocks * 64; e++)
          ASSERT_EQ(tritReference(out, nblocks, e), planeValue(pos, neg, e))
              << k->name << " nblocks " << nblocks << " element " << e;
        std::vector<uint64_t> p(nblocks, ~0ull), m(nblocks, ~0ull);
        ASSERT_TRUE(k->decodeTrits(out, nblocks, p.data(), m.data())) << k->name;
        EXPECT_EQ(p, pos) << k->name << " nblocks " << nblocks;
        EXPECT_EQ(m, neg) << k->name << " nblocks " << nblocks;
      }
    }
  }
}

TEST(Trits, AllZeroIsAllZeroBytes) {
  for (size_t nblocks : {1, 5, 12}) {
    std::vector<uint64_t> zero(nblocks, 0);
    for (const Kernels* k : implementations()) {
      std::vector<uint8_t> out(tritBytes(nblocks), 0xee);
      k->encodeTrits(zero.data(), zero.data(), nblocks, out.data());
      EXPECT_EQ(out, std::vector<uint8_t>(out.size(), 0)) << k->name;
      std::vector<uint64_t> p(nblocks, ~0ull), m(nblocks, ~0ull);
      EXPECT_TRUE(k->decodeTrits(out.data(), nblocks, p.data(), m.data()));
      EXPECT_EQ(p, zero);
      EXPECT_EQ(m, zero);
    }
  }
}

// A byte above 242 anywhere in a group, or a tail element that is both +1
// and -1, is reported; the same bytes with a valid value there are not.
TEST(Trits, MalformedBytesAreReported) {
  std::mt19937_64 rng(7);
  const size_t nblocks = 12;  // two groups and a 2-block tail
  std::vector<uint64_t> pos, neg;
  randomResult(rng, nblocks, &pos, &neg);
  std::vector<uint8_t> good(tritBytes(nblocks));
  portableKernels().encodeTrits(pos.data(), neg.data(), nblocks, good.data());
  std::vector<uint64_t> p(nblocks), m(nblocks);
  for (const Kernels* k : implementations()) {
    ASSERT_TRUE(k->decodeTrits(good.data(), nblocks, p.data(), m.data()));
    for (size_t at : {size_t{0}, size_t{31}, size_t{32}, size_t{63}, size_t{64}, size_t{127}}) {
      for (unsigned v = kTritMaxByte + 1; v < 256; v++) {
        std::vector<uint8_t> bad = good;
        bad[at] = (uint8_t)v;
        EXPECT_FALSE(k->decodeTrits(bad.data(), nblocks, p.data(), m.data())) << k->name << " byte " << at << " = " << v;
      }
      std::vector<uint8_t> edge = good;
      edge[at] = (uint8_t)kTritMaxByte;
      EXPECT_TRUE(k->decodeTrits(edge.data(), nblocks, p.data(), m.data())) << k->name;
    }
    // The tail: plane 0 words then plane 1 words; set one bit in both.
    const size_t tail = 2 * kTritGroupBytes;
    for (size_t w = 0; w < 2; w++) {
      std::vector<uint8_t> bad = good;
      bad[tail + 8 * w] |= 1;
      bad[tail + 16 + 8 * w] |= 1;
      EXPECT_FALSE(k->decodeTrits(bad.data(), nblocks, p.data(), m.data())) << k->name << " tail word " << w;
    }
  }
}

// Planes no decide writes (an element both +1 and -1, as scratch nothing
// decided holds) code as +1, in groups and in the tail alike: a sender never
// sends a malformed result.
TEST(Trits, BothBitsCodeAsPlusOne) {
  const size_t nblocks = 7;
  std::vector<uint64_t> both(nblocks, 0xa5a5a5a5a5a5a5a5ull), minus(nblocks, 0x0f0f0f0f0f0f0f0full);
  for (const Kernels* k : implementations()) {
    std::vector<uint8_t> out(tritBytes(nblocks));
    k->encodeTrits(both.data(), minus.data(), nblocks, out.data());
    std::vector<uint64_t> p(nblocks), m(nblocks);
    ASSERT_TRUE(k->decodeTrits(out.data(), nblocks, p.data(), m.data())) << k->name;
    for (size_t w = 0; w < nblocks; w++) {
      EXPECT_EQ(p[w], both[w]) << k->name << " word " << w;
      EXPECT_EQ(m[w], minus[w] & ~both[w]) << k->name << " word " << w;
    }
  }
}

// The implementations agree byte for byte, and with the kernels in use.
TEST(Trits, ImplementationsAgree) {
  std::mt19937_64 rng(3);
  for (size_t nblocks : {0, 4, 5, 9, 10, 1001}) {
    std::vector<uint64_t> pos, neg;
    randomResult(rng, nblocks, &pos, &neg);
    std::vector<uint8_t> want(tritBytes(nblocks));
    portableKernels().encodeTrits(pos.data(), neg.data(), nblocks, want.data());
    for (const Kernels* k : {&kernels(), avx2Kernels()}) {
      if (k == nullptr) continue;
      std::vector<uint8_t> got(tritBytes(nblocks));
      k->encodeTrits(pos.data(), neg.data(), nblocks, got.data());
      EXPECT_EQ(got, want) << k->name << " nblocks " << nblocks;
    }
  }
}

}  // namespace
}  // namespace bits

namespace algo {
namespace {

// Which result transfers travel coded: a majority whose result can be 0.
TEST(TritSchedules, ResultTransfersAreCodedExactlyWhenAResultCanBeZero) {
  struct Case {
    OpSpec spec;
    int n;
    bool coded;
  };
  const OpSpec exact{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero};
  const OpSpec tieRule{ncclSignMajority, ncclSignZeroPositive, ncclSignTiePositive};
  const OpSpec ternary{ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero};
  const OpSpec average{ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero};
  for (const Case& c : {Case{exact, 4, true}, Case{exact, 5, false}, Case{tieRule, 4, false},
                        Case{ternary, 5, true}, Case{average, 2, false}, Case{average, 4, false}}) {
    for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoHierarchical}) {
      Schedule s;
      ASSERT_EQ(buildSchedule(algo, c.n, 0, 100, c.spec, &s), ncclSuccess);
      int results = 0;
      for (const Step& st : s.steps) {
        for (const Send& x : st.sends) {
          EXPECT_EQ(x.coding == Coding::kTrits, x.buf == Buffer::kResult && c.coded) << algoName(algo);
          results += x.buf == Buffer::kResult;
        }
        for (const Recv& x : st.recvs)
          EXPECT_EQ(x.coding == Coding::kTrits, x.buf == Buffer::kResult && c.coded) << algoName(algo);
      }
      EXPECT_GT(results, 0) << algoName(algo) << " sends no result at N = " << c.n;
    }
  }
}

// The bits per element of the result phase: every block of result a rank
// receives costs 1.6 bits per element (within 1 % on large messages, the
// partial groups at the ends of ranges aside), where the two planes cost 2;
// with the ring and halving-doubling on a power of two each rank receives
// the (N-1)/N of the message it did not decide: 1.6 (N-1)/N. Exact ties for
// even N, ternary for odd N (both can decide 0). Hierarchical as 2 nodes.
TEST(TritSchedules, ResultPhaseCostsOnePointSixBitsPerElement) {
  const int64_t nblocks = 1 << 16;  // 4M elements
  for (int n = 2; n <= 16; n++) {
    const OpSpec spec{ncclSignMajority, n % 2 == 0 ? ncclSignZeroPositive : ncclSignZeroAbstain, ncclSignTieZero};
    for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoHierarchical}) {
      Topology topo;
      if (n % 2 == 0)
        for (int r = 0; r < n; r++) topo.node.push_back(r / (n / 2));
      for (int rank = 0; rank < n; rank++) {
        Schedule s;
        ASSERT_EQ(buildSchedule(algo, n, rank, nblocks, spec, &s, &topo), ncclSuccess);
        int64_t bytes = 0, blocks = 0;
        for (const Step& st : s.steps)
          for (const Recv& x : st.recvs)
            if (x.buf == Buffer::kResult) {
              bytes += x.bytes();
              blocks += x.range.size();
            }
        ASSERT_GT(blocks, 0) << algoName(algo) << " N = " << n << " rank " << rank;
        EXPECT_NEAR(8.0 * (double)bytes / (double)(blocks * 64), 1.6, 0.016)
            << algoName(algo) << " N = " << n << " rank " << rank;
        const bool everyRankDecides = algo == ncclSignAlgoRing || (algo == ncclSignAlgoHalvingDoubling && (n & (n - 1)) == 0);
        if (everyRankDecides) {
          const double want = 1.6 * (n - 1) / n;
          EXPECT_NEAR(8.0 * (double)bytes / (double)(nblocks * 64), want, 0.01 * want)
              << algoName(algo) << " N = " << n << " rank " << rank;
        }
      }
    }
  }
}

}  // namespace
}  // namespace algo
}  // namespace signlion
