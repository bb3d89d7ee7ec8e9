// The per-element arithmetic shared by the CPU and CUDA Lion passes
// (src/lion/lion_element.h) against plain definitions: every operation is
// checked to round exactly once (an fp32 operation equals the double result
// rounded to fp32, since double has more than 2*24+2 bits), so a contracted
// FMA or a reordering would show; the fused element steps equal the
// expressions nccl_sign.h writes, over random and special values (+-0,
// subnormals, the extremes, inf, NaN). The CUDA kernels run these same
// functions (tests/gpu/lion_device_test.cc compares them on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "bits/float16.h"
#include "lion/lion_element.h"

namespace signlion {
namespace lion {
namespace {

uint32_t bitsOf(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// Same bits, or both NaN (a NaN's payload is not part of the contract).
::testing::AssertionResult sameFloat(float got, float want) {
  if (bitsOf(got) == bitsOf(want) || (std::isnan(got) && std::isnan(want))) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " (0x" << std::hex << bitsOf(got) << ") != " << want << " (0x"
                                       << bitsOf(want) << ")";
}

// Random floats of every magnitude and sign, and the special ones.
std::vector<float> values(size_t randomCount, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 3.0f, 1e-45f, -1e-45f, 1.17549435e-38f, 1e-40f,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 65504.0f, 65520.0f,
                          6e-8f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> bitsDist;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < randomCount; i++) {
    if (i % 2 == 0) {
      v.push_back(normal(rng));
    } else {
      uint32_t u = bitsDist(rng);
      float f;
      memcpy(&f, &u, 4);
      v.push_back(f);
    }
  }
  return v;
}

TEST(LionElement, EachOperationRoundsOnce) {
  std::vector<float> v = values(400, 1);
  for (float a : v)
    for (float b : v) {
      ASSERT_TRUE(sameFloat(mulRn(a, b), (float)((double)a * (double)b))) << a << " * " << b;
      ASSERT_TRUE(sameFloat(addRn(a, b), (float)((double)a + (double)b))) << a << " + " << b;
      ASSERT_TRUE(sameFloat(subRn(a, b), (float)((double)a - (double)b))) << a << " - " << b;
      ASSERT_TRUE(sameFloat(divRn(a, b), (float)((double)a / (double)b))) << a << " / " << b;
    }
}

// Rounded once per operation, in the order written: through double, each
// intermediate rounded to float.
float f(double x) { return (float)x; }

TEST(LionElement, InterpolateIsTheWrittenExpression) {
  std::vector<float> v = values(60, 2);
  for (float beta1 : {0.9f, 0.0f, 0.95f, 0.999f})
    for (float beta2 : {0.99f, 0.5f, 0.0f}) {
      const Coefficients k = Coefficients::of(beta1, beta2);
      ASSERT_EQ(bitsOf(k.oneMinusBeta1), bitsOf(f(1.0 - beta1)));
      ASSERT_EQ(bitsOf(k.oneMinusBeta2), bitsOf(f(1.0 - beta2)));
      for (float divisor : {1.0f, 3.0f, 4.0f})
        for (float g : v)
          for (float m : v) {
            const float gd = f((double)g / divisor);
            const float wantC = f((double)f((double)beta1 * m) + (double)f((double)k.oneMinusBeta1 * gd));
            const float wantM = f((double)f((double)beta2 * m) + (double)f((double)k.oneMinusBeta2 * gd));
            float mm = m;
            const float c = interpolate(g, divisor, mm, k);
            ASSERT_TRUE(sameFloat(c, wantC)) << "g " << g << " m " << m << " d " << divisor;
            ASSERT_TRUE(sameFloat(mm, wantM)) << "g " << g << " m " << m << " d " << divisor;
          }
    }
}

TEST(LionElement, UpdateIsTheWrittenExpression) {
  std::vector<float> v = values(200, 3);
  for (float lr : {1e-4f, 0.01f, 0.3f})
    for (float wd : {0.0f, 0.1f, 1.5f})
      for (float u : {1.0f, -1.0f, 0.0f, 0.5f, -0.25f, 1.0f / 3.0f})
        for (float p : v) {
          const float want = f((double)p - (double)f((double)lr * (double)f((double)u + (double)f((double)wd * p))));
          ASSERT_TRUE(sameFloat(lionUpdate(p, u, lr, wd), want)) << "p " << p << " u " << u;
        }
}

TEST(LionElement, SignVotesAndFiniteness) {
  for (float c : values(2000, 4)) {
    const int8_t want = c > 0.0f ? 1 : (c < 0.0f ? -1 : 0);  // NaN and +-0: 0
    ASSERT_EQ(signOf(c), want) << c;
    int8_t vote8 = 7;
    encodeVote(c, &vote8);
    ASSERT_EQ(vote8, want);
    float vote32 = 0.0f;
    encodeVote(c, &vote32);
    ASSERT_TRUE(sameFloat(vote32, c));
    ASSERT_EQ(isFinite(c), (bool)std::isfinite(c)) << c;
  }
}

// The element types widen exactly and store through bits/float16.h (round to
// nearest even), the conversions the host reference uses.
TEST(LionElement, ElementTypesLoadAndStore) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    const uint16_t x = (uint16_t)h;
    ASSERT_TRUE(sameFloat(Fp16::load(x), bits::halfToFloat(x)));
    ASSERT_TRUE(sameFloat(Bf16::load(x), bits::bf16ToFloat(x)));
    if (!std::isnan(Fp16::load(x))) {
      ASSERT_EQ(Fp16::store(Fp16::load(x)), x) << "fp16 round trip " << h;
    }
    if (!std::isnan(Bf16::load(x))) {
      ASSERT_EQ(Bf16::store(Bf16::load(x)), x) << "bf16 round trip " << h;
    }
  }
  for (float x : values(5000, 5)) {
    ASSERT_EQ(Fp16::store(x), bits::floatToHalf(x));
    ASSERT_EQ(Bf16::store(x), bits::floatToBf16(x));
    ASSERT_TRUE(sameFloat(Fp32::store(Fp32::load(x)), x));
  }
}

}  // namespace
}  // namespace lion
}  // namespace signlion
