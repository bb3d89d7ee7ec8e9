// The expected outputs of sign_allreduce_perf's -c check, against the plain
// reference of the contract (and a plain sum): a right result has no wrong
// element, and every changed element is counted.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "bits/bits.h"
#include "bits/float16.h"
#include "bits/vote_reference.h"
#include "perf_inputs.h"

namespace signlion {
namespace perf {
namespace {

std::vector<std::vector<char>> inputs(int nranks, size_t count, ncclDataType_t dt, uint64_t seed) {
  std::vector<std::vector<char>> in(nranks, std::vector<char>(count * bits::typeSize(dt)));
  for (int r = 0; r < nranks; r++) fillInput(in[r].data(), count, dt, r, seed);
  return in;
}

TEST(PerfInputs, SignExpectationsMatchTheReference) {
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8})
    for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage})
      for (int n : {1, 2, 3, 4, 7, 8, 16})
        for (size_t count : {(size_t)0, (size_t)1, (size_t)63, (size_t)1000}) {
          if (op == ncclSignAverage && dt == ncclInt8) continue;
          auto in = inputs(n, count, dt, 7 + n);
          std::vector<const void*> ptrs;
          for (auto& v : in) ptrs.push_back(v.data());
          std::vector<char> out(count * bits::typeSize(dt) + 1);
          bits::referenceSignAllReduce(ptrs, count, dt, op, ncclSignZeroPositive, ncclSignTieZero, out.data());
          Reduction red = op == ncclSignAverage ? Reduction::kAverage : Reduction::kMajority;
          ASSERT_EQ(countWrong(out.data(), count, dt, red, n, 7 + n), 0u) << bits::typeName(dt) << " n=" << n;
          if (count == 0) continue;
          out[0] ^= 0x40;                                 // element 0
          out[(count - 1) * bits::typeSize(dt)] ^= 0x20;  // and the last one
          EXPECT_EQ(countWrong(out.data(), count, dt, red, n, 7 + n), count == 1 ? 1u : 2u);
          EXPECT_GT(countWrong(out.data(), count, dt, red, n, 8 + n), 0u) << "another seed, other votes";
        }
}

// A tie rule makes a tied element +1 or -1 where exact ties give 0: the check
// follows the rule it is told, and tells the rules apart at an even N.
TEST(PerfInputs, MajorityExpectationsFollowTheTieRule) {
  const size_t count = 1000;
  for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16})
    for (int n : {2, 3, 4, 8}) {
      auto in = inputs(n, count, dt, 5 + n);
      std::vector<const void*> ptrs;
      for (auto& v : in) ptrs.push_back(v.data());
      for (ncclSignTieRule_t tie : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
        std::vector<char> out(count * bits::typeSize(dt));
        bits::referenceSignAllReduce(ptrs, count, dt, ncclSignMajority, ncclSignZeroPositive, tie, out.data());
        EXPECT_EQ(countWrong(out.data(), count, dt, Reduction::kMajority, n, 5 + n, tie), 0u) << n;
        for (ncclSignTieRule_t other : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
          if (other == tie) continue;
          size_t wrong = countWrong(out.data(), count, dt, Reduction::kMajority, n, 5 + n, other);
          if (n % 2) EXPECT_EQ(wrong, 0u) << "no ties at an odd N";
          else EXPECT_GT(wrong, 0u) << "n=" << n << ": ties " << (int)tie << " checked as " << (int)other;
        }
      }
    }
}

TEST(PerfInputs, SumExpectationsAreThePlainSum) {
  const size_t count = 4099;
  for (int n : {1, 2, 5, 8}) {
    auto in = inputs(n, count, ncclFloat32, 3);
    std::vector<float> sum(count, 0.0f);
    size_t zeros = 0;
    for (auto& v : in)
      for (size_t i = 0; i < count; i++) {
        float x;
        memcpy(&x, v.data() + 4 * i, 4);
        sum[i] += x;
        zeros += x == 0.0f;
      }
    EXPECT_GT(zeros, 0u);
    EXPECT_EQ(countWrong(sum.data(), count, ncclFloat32, Reduction::kSum, n, 3), 0u);
    std::vector<uint16_t> bf(count);
    for (size_t i = 0; i < count; i++) bits::storeFloatAs(sum[i], ncclBfloat16, bf.data(), i);
    EXPECT_EQ(countWrong(bf.data(), count, ncclBfloat16, Reduction::kSum, n, 3), 0u);
    sum[17] += 1.0f;
    EXPECT_EQ(countWrong(sum.data(), count, ncclFloat32, Reduction::kSum, n, 3), 1u);
  }
}

}  // namespace
}  // namespace perf
}  // namespace signlion
