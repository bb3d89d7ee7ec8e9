// The CPU vote algebra (src/bits) against the plain reference, bit for bit:
// exhaustively over every vote pattern for N <= 8, and on random vectors with
// special values, for every dtype, zero rule, tie rule, op and implementation.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "bits/fields.h"
#include "bits/float16.h"
#include "bits/local_vote.h"
#include "bits/vote_reference.h"
#include "common/vote_inputs.h"

namespace signlion {
namespace bits {
namespace {

using test::Bytes;
using test::firstMismatch;
using test::setElem;

const ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
const ncclSignZeroRule_t kZeroRules[] = {ncclSignZeroPositive, ncclSignZeroNegative, ncclSignZeroAbstain};
const ncclSignTieRule_t kTieRules[] = {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative};

std::vector<const Kernels*> allKernels() {
  std::vector<const Kernels*> v = {&portableKernels()};
  if (avx2Kernels()) v.push_back(avx2Kernels());
  return v;
}

// The production pipeline of one element range: pack every rank, add them into
// counters (sequentially, or as a tree of counters of different widths), then
// decide.
struct Counter {
  std::vector<uint64_t> pos, neg;
  int width = 0;
  int max = 0;
};

Counter packRank(const Kernels& k, const Bytes& in, size_t count, ncclDataType_t dt, ncclSignZeroRule_t zero) {
  size_t nw = numWords(count);
  std::vector<uint64_t> planes(2 * nw + 1, 0xdeadbeefcafef00dull);
  k.pack(in.data(), dt, count, zero, planes.data(), nw);
  EXPECT_EQ(planes[votePlanes(zero) * nw], 0xdeadbeefcafef00dull) << "pack wrote past its planes";
  Counter c;
  c.pos.assign(planes.begin(), planes.begin() + nw);
  if (zero == ncclSignZeroAbstain) c.neg.assign(planes.begin() + nw, planes.begin() + 2 * nw);
  c.width = 1;
  c.max = 1;
  return c;
}

Counter addCounters(const Kernels& k, const Counter& a, const Counter& b, size_t nw, bool inPlace) {
  Counter out;
  out.max = a.max + b.max;
  out.width = widthFor(out.max);
  auto addOne = [&](const std::vector<uint64_t>& x, const std::vector<uint64_t>& y, std::vector<uint64_t>& z) {
    if (inPlace) {
      // In place into a copy of x grown to the new width.
      z.assign((size_t)out.width * nw, 0);
      std::copy(x.begin(), x.end(), z.begin());
      k.add(z.data(), a.width, nw, y.data(), b.width, nw, z.data(), out.width, nw, nw);
    } else {
      z.assign((size_t)out.width * nw + 1, 0x5a5a5a5a5a5a5a5aull);
      k.add(x.data(), a.width, nw, y.data(), b.width, nw, z.data(), out.width, nw, nw);
      EXPECT_EQ(z.back(), 0x5a5a5a5a5a5a5a5aull) << "add wrote past its planes";
      z.pop_back();
    }
  };
  addOne(a.pos, b.pos, out.pos);
  if (!a.neg.empty()) addOne(a.neg, b.neg, out.neg);
  return out;
}

Counter sumRange(const Kernels& k, const std::vector<Counter>& votes, int lo, int hi, size_t nw, bool tree) {
  if (hi - lo == 1) return votes[lo];
  if (tree) {
    int mid = lo + (hi - lo + 1) / 3;  // uneven split: counters of different widths meet
    if (mid == lo) mid = lo + 1;
    return addCounters(k, sumRange(k, votes, lo, mid, nw, tree), sumRange(k, votes, mid, hi, nw, tree), nw, false);
  }
  Counter acc = votes[lo];
  for (int r = lo + 1; r < hi; r++) acc = addCounters(k, acc, votes[r], nw, true);
  return acc;
}

Bytes runPipeline(const Kernels& k, const std::vector<Bytes>& in, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                  ncclSignZeroRule_t zero, ncclSignTieRule_t tie, bool tree, size_t dstOffset = 0) {
  int n = (int)in.size();
  size_t nw = numWords(count);
  std::vector<Counter> votes;
  for (const Bytes& b : in) votes.push_back(packRank(k, b, count, dt, zero));
  Counter sum = sumRange(k, votes, 0, n, nw, tree);
  EXPECT_EQ(sum.width, widthFor(n));
  Counts c{sum.pos.data(), sum.width, nw};
  if (zero == ncclSignZeroAbstain) {
    c.neg = sum.neg.data();
    c.negWidth = sum.width;
    c.negStride = nw;
  }
  size_t es = typeSize(dt);
  Bytes out(count * es + dstOffset + 8, 0xa5);
  void* dst = out.data() + dstOffset;
  if (op == ncclSignMajority) {
    decideMajority(k, c, n, zero, tie, count, dt, dst);
  } else {
    k.average(c, n, count, dt, dst);
  }
  for (size_t i = 0; i < 8; i++) EXPECT_EQ(out[dstOffset + count * es + i], 0xa5) << "decide wrote past count";
  return Bytes(out.begin() + dstOffset, out.begin() + dstOffset + count * es);
}

Bytes runReference(const std::vector<Bytes>& in, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                   ncclSignZeroRule_t zero, ncclSignTieRule_t tie) {
  return test::referenceOutput(in, count, dt, op, zero, tie);
}

// ---- the reference itself --------------------------------------------------

TEST(VoteReference, SignsAndZeros) {
  Bytes buf(4 * 6);
  float vals[] = {1.5f, -2.0f, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 1e-45f};
  memcpy(buf.data(), vals, sizeof(vals));
  EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, 0, ncclSignZeroAbstain), 1);
  EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, 1, ncclSignZeroAbstain), -1);
  for (int i : {2, 3, 4}) {
    EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, i, ncclSignZeroAbstain), 0);
    EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, i, ncclSignZeroPositive), 1);
    EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, i, ncclSignZeroNegative), -1);
  }
  EXPECT_EQ(referenceVote(buf.data(), ncclFloat32, 5, ncclSignZeroNegative), 1);  // a denormal is positive
}

TEST(VoteReference, Results) {
  float f;
  referenceResult(3, 5, ncclSignMajority, ncclSignTieZero, ncclFloat32, &f, 0);
  EXPECT_EQ(f, 1.0f);
  referenceResult(0, 4, ncclSignMajority, ncclSignTieNegative, ncclFloat32, &f, 0);
  EXPECT_EQ(f, -1.0f);
  referenceResult(0, 4, ncclSignMajority, ncclSignTieZero, ncclFloat32, &f, 0);
  EXPECT_EQ(f, 0.0f);
  referenceResult(-1, 3, ncclSignAverage, ncclSignTieZero, ncclFloat32, &f, 0);
  EXPECT_EQ(f, -1.0f / 3.0f);
  int8_t b;
  referenceResult(-2, 3, ncclSignMajority, ncclSignTieZero, ncclInt8, &b, 0);
  EXPECT_EQ(b, -1);
}

// ---- conversions -----------------------------------------------------------

__attribute__((target("avx,f16c"))) uint16_t f16cToHalf(float f) {
  return (uint16_t)_cvtss_sh(f, 0 /* _MM_FROUND_TO_NEAREST_INT */);
}
__attribute__((target("avx,f16c"))) float f16cToFloat(uint16_t h) { return _cvtsh_ss(h); }
bool haveF16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c");
}

TEST(Float16, HalfToFloatExhaustive) {
  if (!haveF16c()) GTEST_SKIP() << "no F16C on this CPU to compare with";
  for (uint32_t h = 0; h < 65536; h++) {
    float a = halfToFloat((uint16_t)h), b = f16cToFloat((uint16_t)h);
    ASSERT_EQ(floatBits(a), floatBits(b)) << "half 0x" << std::hex << h;
  }
}

TEST(Float16, FloatToHalfMatchesF16c) {
  if (!haveF16c()) GTEST_SKIP() << "no F16C on this CPU to compare with";
  // Every float whose low 11 mantissa bits are one of a few patterns, over
  // all exponents and signs: covers ties, carries, subnormals, overflow, NaN.
  const uint32_t lows[] = {0x000, 0x001, 0x7ff, 0x800, 0x801, 0x1000, 0x0fff, 0x1fff, 0x1001};
  for (uint32_t hi = 0; hi < (1u << 21); hi++) {
    for (uint32_t low : lows) {
      uint32_t u = (hi << 11) ^ low;
      float f = bitsFloat(u);
      ASSERT_EQ(floatToHalf(f), f16cToHalf(f)) << "float 0x" << std::hex << u;
    }
  }
}

// bf16 rounding checked against a decision made in double precision.
TEST(Float16, FloatToBf16RoundsToNearestEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; i++) {
    uint32_t u = rng();
    if (i < 65536) u = ((uint32_t)i << 16) | 0x8000;  // exact ties across all exponents
    float f = bitsFloat(u);
    uint16_t got = floatToBf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(got)));
      continue;
    }
    uint16_t lo = (uint16_t)(u >> 16);
    uint16_t hi = (uint16_t)(lo + 1);
    double dl = bf16ToFloat(lo), dh = bf16ToFloat(hi), df = f;
    uint16_t want;
    if ((u & 0x7fffffff) >= 0x7f7f8000 && (u & 0x7fffffff) < 0x7f800000) {
      want = (uint16_t)((u >> 31) ? 0xff80 : 0x7f80);  // at or past the midpoint above the largest finite
    } else if ((u & 0x7fffffff) >= 0x7f800000) {
      want = lo;  // infinity stays
    } else {
      double el = std::fabs(df - dl), eh = std::fabs(dh - df);
      want = el < eh ? lo : eh < el ? hi : ((lo & 1) ? hi : lo);
    }
    ASSERT_EQ(got, want) << "float 0x" << std::hex << u;
  }
}

// ---- exhaustive vote patterns ----------------------------------------------

// Element e of the test vectors holds, on rank r, the r-th base-3 digit of e:
// 0 -> negative, 1 -> zero, 2 -> positive. So 3^N elements cover every vote
// pattern of N ranks. Zeros rotate through +0, -0 and NaN; magnitudes vary.
std::vector<Bytes> patternInputs(int n, ncclDataType_t dt, size_t* countOut) {
  size_t count = 1;
  for (int r = 0; r < n; r++) count *= 3;
  std::vector<Bytes> in(n, Bytes(count * typeSize(dt)));
  for (int r = 0; r < n; r++) {
    size_t div = 1;
    for (int k = 0; k < r; k++) div *= 3;
    for (size_t e = 0; e < count; e++) {
      int digit = (int)((e / div) % 3);
      float mag = 0.5f + (float)((e + r) % 7);
      float zeros[] = {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
      float v = digit == 0 ? -mag : digit == 2 ? mag : zeros[(e + r) % 3];
      if (dt == ncclInt8 && std::isnan(v)) v = 0.0f;
      setElem(in[r], dt, e, v);
    }
  }
  *countOut = count;
  return in;
}

TEST(VoteAlgebra, EveryVotePatternUpTo8Ranks) {
  for (const Kernels* k : allKernels()) {
    for (int n = 1; n <= 8; n++) {
      for (ncclDataType_t dt : kTypes) {
        size_t count;
        std::vector<Bytes> in = patternInputs(n, dt, &count);
        for (ncclSignZeroRule_t zero : kZeroRules) {
          for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
            if (op == ncclSignAverage && dt == ncclInt8) continue;  // average needs a float type
            for (ncclSignTieRule_t tie : kTieRules) {
              if (op == ncclSignAverage && tie != ncclSignTieZero) continue;  // ties only matter to majority
              Bytes want = runReference(in, count, dt, op, zero, tie);
              for (bool tree : {false, true}) {
                Bytes got = runPipeline(*k, in, count, dt, op, zero, tie, tree);
                size_t at = firstMismatch(got, want);
                ASSERT_EQ(at, std::string::npos)
                    << k->name << " N=" << n << " " << typeName(dt) << " zero=" << zero << " op=" << op
                    << " tie=" << tie << (tree ? " tree" : " seq") << " first bad byte " << at;
              }
            }
          }
        }
      }
    }
  }
}

// ---- random vectors with special values ------------------------------------

std::vector<Bytes> randomInputs(int n, size_t count, ncclDataType_t dt, uint32_t seed) {
  return test::randomVoteInputs(n, count, dt, seed);
}

TEST(VoteAlgebra, RandomVectorsAllCountsAndRanks) {
  const size_t counts[] = {0, 1, 63, 64, 65, 127, 4097, 100003};
  const int ranks[] = {1, 2, 3, 5, 8, 13, 16};
  uint32_t seed = 1;
  for (const Kernels* k : allKernels()) {
    for (int n : ranks) {
      for (size_t count : counts) {
        for (ncclDataType_t dt : kTypes) {
          std::vector<Bytes> in = randomInputs(n, count, dt, seed++);
          for (ncclSignZeroRule_t zero : kZeroRules) {
            for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
              if (op == ncclSignAverage && dt == ncclInt8) continue;
              ncclSignTieRule_t tie = kTieRules[seed % 3];
              Bytes want = runReference(in, count, dt, op, zero, tie);
              Bytes got = runPipeline(*k, in, count, dt, op, zero, tie, seed % 2 == 0, seed % 4);
              ASSERT_EQ(firstMismatch(got, want), std::string::npos)
                  << k->name << " N=" << n << " count=" << count << " " << typeName(dt) << " zero=" << zero
                  << " op=" << op << " tie=" << tie;
            }
          }
        }
      }
    }
  }
}

// Unaligned sources: the same values at every byte offset give the same bits.
TEST(VoteAlgebra, PackIgnoresAlignment) {
  for (const Kernels* k : allKernels()) {
    for (ncclDataType_t dt : kTypes) {
      size_t count = 1000;
      std::vector<Bytes> base = randomInputs(1, count, dt, 99);
      std::vector<uint64_t> want(2 * numWords(count));
      k->pack(base[0].data(), dt, count, ncclSignZeroAbstain, want.data(), numWords(count));
      for (size_t off = 1; off < 8; off++) {
        Bytes shifted(count * typeSize(dt) + off);
        memcpy(shifted.data() + off, base[0].data(), count * typeSize(dt));
        std::vector<uint64_t> got(2 * numWords(count));
        k->pack(shifted.data() + off, dt, count, ncclSignZeroAbstain, got.data(), numWords(count));
        EXPECT_EQ(got, want) << k->name << " " << typeName(dt) << " offset " << off;
      }
    }
  }
}

// The two implementations agree on every intermediate, not only the result.
TEST(VoteAlgebra, Avx2MatchesPortableIntermediates) {
  const Kernels* avx2 = avx2Kernels();
  if (!avx2) GTEST_SKIP() << "no AVX2+F16C on this CPU";
  const Kernels& port = portableKernels();
  std::mt19937_64 rng(5);
  for (size_t nw : {0, 1, 3, 4, 5, 17, 64}) {
    for (int wa = 1; wa <= 6; wa++) {
      for (int wb = 1; wb <= 3; wb++) {
        std::vector<uint64_t> a(wa * nw), b(wb * nw);
        for (auto& x : a) x = rng();
        for (auto& x : b) x = rng();
        int wout = widthFor((1ull << wa) - 1 + (1ull << wb) - 1);
        std::vector<uint64_t> o1(wout * nw), o2(wout * nw);
        port.add(a.data(), wa, nw, b.data(), wb, nw, o1.data(), wout, nw, nw);
        avx2->add(a.data(), wa, nw, b.data(), wb, nw, o2.data(), wout, nw, nw);
        ASSERT_EQ(o1, o2) << "add nw=" << nw << " wa=" << wa << " wb=" << wb;
        for (int n : {1, 2, 7, 10, 31, 32, 33, 63}) {
          if (widthFor(n) < wa) continue;
          for (ncclSignTieRule_t tie : kTieRules) {
            for (bool ternary : {false, true}) {
              Counts c{a.data(), wa, nw};
              if (ternary) c = Counts{a.data(), wa, nw, b.data(), wb, nw};
              std::vector<uint64_t> d1(2 * nw + 1, 7), d2(2 * nw + 1, 7);
              port.decideBits(c, n, tie, d1.data(), nw, nw);
              avx2->decideBits(c, n, tie, d2.data(), nw, nw);
              ASSERT_EQ(d1, d2) << "decideBits nw=" << nw << " N=" << n << " tie=" << tie << " ternary=" << ternary;
            }
          }
        }
      }
    }
  }
}

TEST(VoteAlgebra, WidthRules) {
  EXPECT_EQ(widthFor(0), 1);
  EXPECT_EQ(widthFor(1), 1);
  EXPECT_EQ(widthFor(2), 2);
  EXPECT_EQ(widthFor(3), 2);
  EXPECT_EQ(widthFor(4), 3);
  EXPECT_EQ(widthFor(16), 5);
  EXPECT_EQ(widthFor(~0ull), 64);
  EXPECT_EQ(numWords(0), 0u);
  EXPECT_EQ(numWords(64), 1u);
  EXPECT_EQ(numWords(65), 2u);
  EXPECT_EQ(majorityPlanes(3, ncclSignZeroPositive, ncclSignTieZero), 1);
  EXPECT_EQ(majorityPlanes(4, ncclSignZeroPositive, ncclSignTieZero), 2);
  EXPECT_EQ(majorityPlanes(3, ncclSignZeroAbstain, ncclSignTieZero), 2);
  EXPECT_EQ(majorityPlanes(4, ncclSignZeroAbstain, ncclSignTiePositive), 1);
}

TEST(VoteAlgebra, IsaSelectionFollowsEnvironment) {
  // kernels() caches its choice; here only the answer's consistency with the
  // CPU is checked. SIGNLION_BITS_ISA is exercised by the ctest variants.
  const Kernels& k = kernels();
  const char* isa = getenv("SIGNLION_BITS_ISA");
  if (avx2Kernels() && isa == nullptr) {
    EXPECT_STREQ(k.name, "avx2");
  }
  if (isa && (std::string(isa) == "portable" || (std::string(isa) == "avx2" && avx2Kernels()))) {
    EXPECT_STREQ(k.name, isa);
  }
}


// voteLocally (the all-gather algorithm's last step) against the reference.
TEST(LocalVote, MatchesReference) {
  for (const Kernels* k : allKernels()) {
    for (int n : {1, 2, 3, 4, 7, 16}) {
      for (size_t count : {0, 1, 63, 64, 65, 5000}) {
        for (ncclDataType_t dt : kTypes) {
          std::vector<Bytes> in = randomInputs(n, count, dt, (uint32_t)(n * 1000 + count));
          for (ncclSignZeroRule_t zero : kZeroRules) {
            for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
              if (op == ncclSignAverage && dt == ncclInt8) continue;
              size_t nw = numWords(count);
              std::vector<std::vector<uint64_t>> packed(n, std::vector<uint64_t>(2 * nw + 1));
              std::vector<const uint64_t*> ptrs;
              for (int r = 0; r < n; r++) {
                k->pack(in[r].data(), dt, count, zero, packed[r].data(), nw);
                ptrs.push_back(packed[r].data());
              }
              std::vector<uint64_t> scratch(localVoteScratchWords(n, count, zero) + 1, 0x77);
              Bytes got(count * typeSize(dt));
              voteLocally(*k, ptrs.data(), n, count, dt, op, zero, ncclSignTieZero, scratch.data(), got.data());
              EXPECT_EQ(scratch.back(), 0x77u) << "scratch overrun";
              ASSERT_EQ(firstMismatch(got, runReference(in, count, dt, op, zero, ncclSignTieZero)), std::string::npos)
                  << k->name << " N=" << n << " count=" << count << " " << typeName(dt) << " zero=" << zero;
            }
          }
        }
      }
    }
  }
}


TEST(VoteArgs, RejectsWhatTheContractExcludes) {
  for (ncclDataType_t dt : kTypes) EXPECT_EQ(checkVoteArgs(dt, ncclSignMajority, "test"), ncclSuccess);
  EXPECT_EQ(checkVoteArgs(ncclFloat32, ncclSignAverage, "test"), ncclSuccess);
  EXPECT_EQ(checkVoteArgs(ncclInt8, ncclSignAverage, "test"), ncclInvalidArgument);
  EXPECT_EQ(checkVoteArgs(ncclFloat64, ncclSignMajority, "test"), ncclInvalidArgument);
  EXPECT_EQ(checkVoteArgs(ncclInt32, ncclSignMajority, "test"), ncclInvalidArgument);
  EXPECT_EQ(checkVoteArgs((ncclDataType_t)42, ncclSignMajority, "test"), ncclInvalidArgument);
  EXPECT_EQ(checkVoteArgs(ncclFloat32, ncclSignNumOps, "test"), ncclInvalidArgument);
  EXPECT_EQ(checkVoteArgs(ncclFloat32, -1, "test"), ncclInvalidArgument);
}


// Votes in integer fields (field-sum), against a per-element reading.
TEST(Fields, PackAndReadBackEveryWidth) {
  for (int fieldBits : {1, 2, 3, 4, 5, 7, 8, 16, 32}) {
    for (size_t count : {0, 1, 63, 64, 65, 1000, 70001}) {
      for (ncclSignZeroRule_t zero : kZeroRules) {
        std::vector<Bytes> in = randomInputs(1, count, ncclFloat32, (uint32_t)(count + fieldBits));
        const size_t nwf = fieldWordsFor(count, fieldBits), per = 64 / fieldBits;
        std::vector<uint64_t> fields(2 * nwf + 1, 0x1234);
        packFields(kernels(), in[0].data(), ncclFloat32, count, zero, fieldBits, fields.data(), nwf);
        if (zero == ncclSignZeroAbstain) {
          EXPECT_EQ(fields[2 * nwf], 0x1234u) << "wrote past its planes";
        }
        for (size_t e = 0; e < count; e++) {
          int vote = referenceVote(in[0].data(), ncclFloat32, e, zero);
          uint64_t mask = (fieldBits == 64 ? ~0ull : (1ull << fieldBits) - 1);
          uint64_t p = (fields[e / per] >> ((e % per) * fieldBits)) & mask;
          ASSERT_EQ(p, vote > 0 ? 1u : 0u) << "bits " << fieldBits << " e " << e;
          if (zero == ncclSignZeroAbstain) {
            uint64_t m = (fields[nwf + e / per] >> ((e % per) * fieldBits)) & mask;
            ASSERT_EQ(m, vote < 0 ? 1u : 0u);
          }
        }
        // Unused fields of the last word are zero.
        if (count % per) {
          EXPECT_EQ(fields[nwf - 1] >> ((count % per) * fieldBits), 0u);
        }
      }
    }
  }
}

TEST(Fields, CountsBecomeBitSlicedPlanes) {
  std::mt19937_64 rng(3);
  for (int fieldBits : {3, 4, 5, 8}) {
    const size_t count = 5000, per = 64 / fieldBits, nwf = fieldWordsFor(count, fieldBits);
    const int width = fieldBits;  // counts use the whole field here
    std::vector<uint64_t> words(nwf);
    for (auto& w : words) w = rng() & (per * fieldBits == 64 ? ~0ull : (1ull << (per * fieldBits)) - 1);
    for (size_t first : {0, 64, 1024}) {
      size_t n = count - first;
      std::vector<uint64_t> planes(width * numWords(n));
      fieldsToPlanes(words.data(), fieldBits, first, n, planes.data(), width, numWords(n));
      for (size_t i = 0; i < n; i++) {
        size_t e = first + i;
        uint64_t want = (words[e / per] >> ((e % per) * fieldBits)) & ((1ull << fieldBits) - 1);
        uint64_t got = 0;
        for (int p = 0; p < width; p++) got |= ((planes[p * numWords(n) + i / 64] >> (i % 64)) & 1) << p;
        ASSERT_EQ(got, want) << "bits " << fieldBits << " element " << e;
      }
    }
  }
}


// Outputs past the streaming-store threshold (4 MiB) take the non-temporal
// path on AVX2: the same bytes as the portable unpack, aligned or not.
TEST(VoteAlgebra, LargeUnpackMatchesPortable) {
  const Kernels* avx2 = avx2Kernels();
  if (!avx2) GTEST_SKIP() << "no AVX2+F16C on this CPU";
  const size_t count = (4u << 20) + 77;  // int8 output too crosses 4 MiB
  std::mt19937_64 rng(17);
  std::vector<uint64_t> planes(2 * numWords(count));
  for (auto& w : planes) w = rng();
  for (ncclDataType_t dt : kTypes) {
    for (int nplanes : {1, 2}) {
      for (size_t offset : {0, 16, 4}) {  // 16-byte aligned (streams), and not
        Bytes want(count * typeSize(dt) + 32), got(count * typeSize(dt) + 32);
        portableKernels().unpack(planes.data(), nplanes, numWords(count), count, dt, want.data() + offset);
        // std::vector's buffer is 16-byte aligned; +offset shifts it.
        avx2->unpack(planes.data(), nplanes, numWords(count), count, dt, got.data() + offset);
        ASSERT_EQ(firstMismatch(got, want), std::string::npos) << typeName(dt) << " planes " << nplanes << " offset " << offset;
      }
    }
  }
}

// The public entry points refuse an int8 average (checkVoteArgs); the table's
// average must still never write an int8 buffer with another element size.
TEST(VoteAlgebra, Int8AverageStaysInsideItsBuffer) {
  const Kernels* avx2 = avx2Kernels();
  if (!avx2) GTEST_SKIP() << "no AVX2+F16C on this CPU";
  for (size_t count : {1, 63, 64, 65, 200}) {
    size_t nw = numWords(count);
    std::vector<uint64_t> p(2 * nw, ~0ull);
    Counts c{p.data(), 2, nw};
    Bytes d1(count + 8, 0xa5), d2(count + 8, 0xa5);
    portableKernels().average(c, 3, count, ncclInt8, d1.data());
    avx2->average(c, 3, count, ncclInt8, d2.data());
    EXPECT_EQ(d1, d2) << "count=" << count;
    for (size_t i = 0; i < 8; i++) EXPECT_EQ(d2[count + i], 0xa5) << "average wrote past count=" << count;
  }
}

}  // namespace
}  // namespace bits
}  // namespace signlion
