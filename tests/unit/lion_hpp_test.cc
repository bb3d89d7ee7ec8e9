// include/signlion/lion.hpp as a user meets it: the header over
// libnccl-sign.so (its own executable, like abi_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "signlion/lion.hpp"

namespace signlion {
namespace {

using Bytes = std::vector<uint8_t>;

// bf16 values (the top half of fp32), reproducible from a seed.
Bytes bf16Values(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Bytes b(count * 2);
  for (size_t i = 0; i < count; i++) {
    float f = normal(rng);
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(b.data() + 2 * i, &h, 2);
  }
  return b;
}
Bytes makeParams(ncclDataType_t, size_t count, uint32_t seed) { return bf16Values(count, seed, 1.0f); }
Bytes makeGrads(ncclDataType_t, size_t count, uint32_t seed, int step) {
  return bf16Values(count, seed * 7919u + step, 1.0f);
}

// The C++ wrapper: same steps as the reference, state round trip bit for
// bit, hyperparameter changes, errors as signlion::Error.
TEST(LionCpp, WrapperStepsSavesAndLoads) {
  const size_t count = 300;
  LionOptions o;
  o.lr = 0.05f;
  o.weightDecay = 0.01f;
  o.aggregation = Aggregation::kLocal;
  o.masterWeights = true;
  DistributedLion a(count, ncclBfloat16, o, nullptr);
  Bytes pa = makeParams(ncclBfloat16, count, 5);
  for (int s = 0; s < 3; s++) ASSERT_TRUE(a.step(pa.data(), makeGrads(ncclBfloat16, count, 6, s).data()));
  std::vector<uint8_t> saved = a.saveState();
  Bytes pb = pa;
  DistributedLion b(count, ncclBfloat16, o, nullptr);
  b.loadState(saved);
  EXPECT_EQ(b.appliedSteps(), 3u);
  a.setLr(0.01f);
  b.setLr(0.01f);
  for (int s = 3; s < 6; s++) {
    Bytes g = makeGrads(ncclBfloat16, count, 6, s);
    a.step(pa.data(), g.data());
    b.step(pb.data(), g.data());
  }
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a.saveState(), b.saveState());
  LionOptions bad = o;
  bad.lr = -1.0f;
  EXPECT_THROW(DistributedLion(count, ncclFloat32, bad, nullptr), Error);
  LionOptions zero = o;
  zero.lr = 0.0f;  // valid: a warmup from 0
  EXPECT_NO_THROW(DistributedLion(count, ncclFloat32, zero, nullptr));
  DistributedLion wrongShape(count + 1, ncclBfloat16, o, nullptr);
  EXPECT_THROW(wrongShape.loadState(saved), Error);
  // A rejected hyperparameter changes nothing: options() still holds what the
  // optimizer uses, and the next valid change goes through.
  EXPECT_THROW(a.setLr(-1.0f), Error);
  EXPECT_EQ(a.options().lr, 0.01f);
  a.setWeightDecay(0.02f);
  EXPECT_EQ(a.options().lr, 0.01f);
  EXPECT_EQ(a.options().weightDecay, 0.02f);
}

// recordPhases / phases(): nothing before recording, pass 1 then pass 2 of
// a local step while on, nothing again once off.
TEST(LionCpp, PhasesOfTheLastStep) {
  const size_t count = 100;
  LionOptions o;
  o.aggregation = Aggregation::kLocal;
  DistributedLion a(count, ncclBfloat16, o, nullptr);
  Bytes p = makeParams(ncclBfloat16, count, 1);
  a.step(p.data(), makeGrads(ncclBfloat16, count, 2, 0).data());
  EXPECT_TRUE(a.phases().empty());
  a.recordPhases(true);
  a.step(p.data(), makeGrads(ncclBfloat16, count, 2, 1).data());
  std::vector<ncclSignLionPhaseTime_t> got = a.phases();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].phase, ncclSignLionPhaseVote);
  EXPECT_EQ(got[1].phase, ncclSignLionPhaseApply);
  EXPECT_LE(got[0].endUs, got[1].beginUs);
  a.recordPhases(false);
  a.step(p.data(), makeGrads(ncclBfloat16, count, 2, 2).data());
  EXPECT_TRUE(a.phases().empty());
}

#ifdef SIGNLION_LION_ON_NCCL
// The device wrapper's argument checks need no GPU: a majority vote without
// a communicator, a bad datatype. (tests/gpu/ steps it on a GPU.)
TEST(LionCpp, OnNcclRejectsBadArgumentsWithoutAGpu) {
  LionOptions o;
  o.aggregation = Aggregation::kMajority;
  try {
    DistributedLion::onNccl(16, ncclFloat32, o, nullptr);
    FAIL() << "a majority vote without a communicator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.result(), ncclInvalidArgument);
  }
  o.aggregation = Aggregation::kLocal;
  try {
    DistributedLion::onNccl(16, ncclInt8, o, nullptr);
    FAIL() << "int8 parameters were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.result(), ncclInvalidArgument);
  }
}
#endif

}  // namespace
}  // namespace signlion
