// The Distributed Lion optimizer on one rank: the fused passes against the
// plain per-element reference (tests/common/lion_reference.h), bit for bit, in
// local mode and through a real one-rank host communicator; the C ABI's
// argument checks. (lion_hpp_test.cc: the C++ wrapper over libnccl-sign.so.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "bits/bits.h"
#include "common/lion_reference.h"
#include "common/param.h"
#include "lion/distributed_lion.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;

// Gradients of step `step`: normal values, some exact zeros (a zero gradient
// with a zero momentum gives c = 0, Lion's sign(0) = 0 case).
Bytes makeGrads(ncclDataType_t dt, size_t count, uint32_t seed, int step) {
  std::mt19937 rng(seed * 7919u + step);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Bytes g(count * bits::typeSize(dt));
  for (size_t i = 0; i < count; i++) test::setElem(g, dt, i, i % 11 == 3 ? 0.0f : normal(rng));
  return g;
}

Bytes makeParams(ncclDataType_t dt, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Bytes p(count * bits::typeSize(dt));
  for (size_t i = 0; i < count; i++) test::setElem(p, dt, i, u(rng));
  return p;
}

ncclSignLionConfig_t lionConfig(int aggregation, float lr, float wd, bool master) {
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.aggregation = aggregation;
  c.lr = lr;
  c.weightDecay = wd;
  c.masterWeights = master ? 1 : 0;
  return c;
}

struct PassCase {
  ncclDataType_t type;
  bool master;
};

std::string passCaseName(const ::testing::TestParamInfo<PassCase>& info) {
  return std::string(bits::typeName(info.param.type)) + (info.param.master ? "_master" : "");
}

class LionPasses : public ::testing::TestWithParam<PassCase> {};

// Local mode is plain Lion: sign(c) with sign(0) = 0, no communicator.
TEST_P(LionPasses, LocalEqualsPlainLion) {
  const PassCase pc = GetParam();
  const size_t count = 1027;
  const float lr = 0.01f, wd = 0.1f;
  lion::Optimizer opt(count, pc.type, lionConfig(ncclSignLionLocal, lr, wd, pc.master), nullptr);
  test::LionReference ref(pc.type, count, lr, wd, pc.master);
  Bytes params = makeParams(pc.type, count, 1), refParams = params;
  for (int step = 0; step < 6; step++) {
    Bytes g = makeGrads(pc.type, count, 2, step);
    bool applied = false;
    ASSERT_EQ(opt.step(params.data(), g.data(), &applied), ncclSuccess);
    ASSERT_TRUE(applied);
    std::vector<float> c = ref.interpolate(g);
    std::vector<float> u(count);
    for (size_t i = 0; i < count; i++) u[i] = test::plainSign(c[i]);
    ref.apply(refParams, u);
    ASSERT_EQ(test::firstMismatch(params, refParams), std::string::npos) << "step " << step;
    ASSERT_EQ(opt.momentum(), ref.momentum) << "step " << step;
    if (ref.masterWeights) {
      ASSERT_EQ(opt.master(), ref.master) << "step " << step;
    }
  }
  EXPECT_EQ(opt.appliedSteps(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Host, LionPasses,
                         ::testing::Values(PassCase{ncclFloat32, false}, PassCase{ncclFloat16, false},
                                           PassCase{ncclBfloat16, false}, PassCase{ncclFloat16, true},
                                           PassCase{ncclBfloat16, true}),
                         passCaseName);

// A one-rank communicator (loopback).
class OneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
    paramResetCache();
  }
  ncclSignComm_t makeComm(ncclSignZeroRule_t zero) {
    ncclSignUniqueId id;
    EXPECT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.zeroRule = zero;
    ncclSignComm_t comm = nullptr;
    EXPECT_EQ(ncclSignCommInitRank(&comm, 1, id, 0, &config), ncclSuccess);
    return comm;
  }
};

// With N = 1 every aggregation is plain Lion. Majority and average equal it
// exactly when zeros abstain; under the default zero rule a c of exactly 0
// votes +1, which the reference vote says too.
TEST_F(OneRank, EveryAggregationEqualsPlainLion) {
  const size_t count = 515;
  for (ncclSignZeroRule_t zero : {ncclSignZeroAbstain, ncclSignZeroPositive}) {
    ncclSignComm_t comm = makeComm(zero);
    ASSERT_NE(comm, nullptr);
    for (int agg : {ncclSignLionMajority, ncclSignLionAverage, ncclSignLionGlobal}) {
      for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
        SCOPED_TRACE("zero rule " + std::to_string(zero) + " aggregation " + std::to_string(agg) + " " +
                     bits::typeName(dt));
        lion::Optimizer opt(count, dt, lionConfig(agg, 0.02f, 0.05f, dt != ncclFloat32),
                            std::make_unique<lion::HostCommunicator>(comm));
        test::LionReference ref(dt, count, 0.02f, 0.05f, dt != ncclFloat32);
        Bytes params = makeParams(dt, count, 3), refParams = params;
        for (int step = 0; step < 4; step++) {
          Bytes g = makeGrads(dt, count, 4, step);
          bool applied = false;
          ASSERT_EQ(opt.step(params.data(), g.data(), &applied), ncclSuccess);
          std::vector<float> c = ref.interpolate(g);
          std::vector<float> u(count);
          for (size_t i = 0; i < count; i++)
            u[i] = (agg == ncclSignLionGlobal || zero == ncclSignZeroAbstain) ? test::plainSign(c[i])
                                                                               : (c[i] < 0.0f ? -1.0f : 1.0f);
          ref.apply(refParams, u);
          ASSERT_EQ(test::firstMismatch(params, refParams), std::string::npos) << "step " << step;
          ASSERT_EQ(opt.momentum(), ref.momentum);
        }
      }
    }
    EXPECT_EQ(ncclSignCommDestroy(comm), ncclSuccess);
  }
}

TEST(LionApi, RejectsBadArguments) {
  ncclSignLion_t lion = nullptr;
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  EXPECT_EQ(ncclSignLionCreate(nullptr, 4, ncclFloat32, &c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclInt8, &c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &c, nullptr), ncclInvalidArgument) << "majority needs a comm";
  c.aggregation = ncclSignLionLocal;
  for (auto bad : {&ncclSignLionConfig_t::lr, &ncclSignLionConfig_t::beta1, &ncclSignLionConfig_t::beta2,
                   &ncclSignLionConfig_t::weightDecay}) {
    ncclSignLionConfig_t b = c;
    // lr and weight decay must be >= 0 (0 is valid), the betas < 1.
    b.*bad = (bad == &ncclSignLionConfig_t::lr || bad == &ncclSignLionConfig_t::weightDecay) ? -1.0f : 1.0f;
    EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);
  }
  for (float lr : {NAN, INFINITY, -0.5f}) {
    ncclSignLionConfig_t b = c;
    b.lr = lr;
    EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument) << "lr " << lr;
  }
  ncclSignLionConfig_t b = c;
  b.magic = 0;
  EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);
  b = c;
  b.aggregation = ncclSignLionNumAggregations;
  EXPECT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);

  ASSERT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &c, nullptr), ncclSuccess);
  float p[4] = {1, 2, 3, 4};
  EXPECT_EQ(ncclSignLionStep(lion, nullptr, p, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionSetHyperparameters(lion, -1.0f, 0.9f, 0.99f, 0.0f), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionSetHyperparameters(lion, NAN, 0.9f, 0.99f, 0.0f), ncclInvalidArgument);
  size_t bytes = 0;
  ASSERT_EQ(ncclSignLionGetStateSize(lion, &bytes), ncclSuccess);
  std::vector<uint8_t> state(bytes);
  EXPECT_EQ(ncclSignLionSaveState(lion, state.data(), bytes - 1), ncclInvalidArgument);
  ASSERT_EQ(ncclSignLionSaveState(lion, state.data(), bytes), ncclSuccess);
  EXPECT_EQ(ncclSignLionLoadState(lion, state.data(), bytes - 4), ncclInvalidArgument);
  ncclSignLion_t other = nullptr;
  ASSERT_EQ(ncclSignLionCreate(&other, 5, ncclFloat32, &c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclSignLionLoadState(other, state.data(), bytes), ncclInvalidArgument) << "another count";
  state[0] ^= 1;
  EXPECT_EQ(ncclSignLionLoadState(lion, state.data(), bytes), ncclInvalidArgument) << "corrupt magic";
  EXPECT_EQ(ncclSignLionDestroy(other), ncclSuccess);
  EXPECT_EQ(ncclSignLionDestroy(lion), ncclSuccess);
  EXPECT_EQ(ncclSignLionDestroy(nullptr), ncclSuccess);
}

// lr = 0 is a valid learning rate (a warmup from 0, a schedule ending at 0),
// at creation and through ncclSignLionSetHyperparameters: the parameters stay
// bit for bit (weight decay is times lr too) while the momentum moves as the
// reference's does; a later lr > 0 continues from that momentum.
TEST(LionApi, ZeroLearningRateKeepsParametersAndMovesMomentum) {
  const size_t count = 77;
  for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
    SCOPED_TRACE(bits::typeName(dt));
    ncclSignLionConfig_t c = lionConfig(ncclSignLionLocal, 0.0f, 0.1f, dt != ncclFloat32);
    ncclSignLion_t lion = nullptr;
    ASSERT_EQ(ncclSignLionCreate(&lion, count, dt, &c, nullptr), ncclSuccess);
    test::LionReference ref(dt, count, 0.0f, 0.1f, dt != ncclFloat32);
    Bytes params = makeParams(dt, count, 7), refParams = params;
    const Bytes initial = params;
    for (int step = 0; step < 5; step++) {
      const float lr = step < 2 ? 0.0f : (step == 2 ? 0.01f : 0.0f);  // 0, 0, 0.01, then back to 0
      ASSERT_EQ(ncclSignLionSetHyperparameters(lion, lr, 0.9f, 0.99f, 0.1f), ncclSuccess) << "lr " << lr;
      ref.lr = lr;
      Bytes g = makeGrads(dt, count, 8, step);
      int applied = 0;
      ASSERT_EQ(ncclSignLionStep(lion, params.data(), g.data(), &applied), ncclSuccess);
      EXPECT_EQ(applied, 1);
      std::vector<float> cv = ref.interpolate(g);
      std::vector<float> u(count);
      for (size_t i = 0; i < count; i++) u[i] = test::plainSign(cv[i]);
      ref.apply(refParams, u);
      ASSERT_EQ(test::firstMismatch(params, refParams), std::string::npos) << "step " << step;
      if (step < 2) {
        ASSERT_EQ(params, initial) << "lr 0 changed a parameter at step " << step;
      }
    }
    EXPECT_NE(params, initial) << "the step with lr 0.01 changed nothing";
    size_t bytes = 0;
    ASSERT_EQ(ncclSignLionGetStateSize(lion, &bytes), ncclSuccess);
    std::vector<uint8_t> state(bytes);
    ASSERT_EQ(ncclSignLionSaveState(lion, state.data(), bytes), ncclSuccess);
    std::vector<float> momentum(count);
    memcpy(momentum.data(), state.data() + bytes - count * sizeof(float) * (dt != ncclFloat32 ? 2 : 1),
           count * sizeof(float));
    EXPECT_EQ(momentum, ref.momentum) << "the momentum did not move as the reference's under lr 0";
    EXPECT_EQ(ncclSignLionDestroy(lion), ncclSuccess);
  }
}

// The step timeline (ncclSignLionRecordPhases, ncclSignLionGetPhases): off
// by default and after it is turned off, a step records nothing; on, a step
// records its passes in order (local: pass 1 and 2; majority through a
// one-rank communicator: the all-reduce between them), and the values are
// those of the step without recording. Bad arguments are refused.
TEST_F(OneRank, PhasesRecordedOnlyWhenOn) {
  const size_t count = 300;
  ncclSignComm_t comm = makeComm(ncclSignZeroPositive);
  ASSERT_NE(comm, nullptr);
  for (int agg : {ncclSignLionLocal, ncclSignLionMajority}) {
    SCOPED_TRACE("aggregation " + std::to_string(agg));
    ncclSignLionConfig_t c = lionConfig(agg, 0.01f, 0.1f, false);
    ncclSignLion_t timed = nullptr, plain = nullptr;
    ASSERT_EQ(ncclSignLionCreate(&timed, count, ncclFloat32, &c, comm), ncclSuccess);
    ASSERT_EQ(ncclSignLionCreate(&plain, count, ncclFloat32, &c, comm), ncclSuccess);
    Bytes params = makeParams(ncclFloat32, count, 5), plainParams = params;
    ncclSignLionPhaseTime_t phases[4];
    int n = -1;
    ASSERT_EQ(ncclSignLionGetPhases(timed, nullptr, 0, &n), ncclSuccess);
    EXPECT_EQ(n, 0) << "phases before any step";
    for (int step = 0; step < 4; step++) {
      // Steps 1 and 2 recorded; 0 before and 3 after.
      if (step == 1) ASSERT_EQ(ncclSignLionRecordPhases(timed, 1), ncclSuccess);
      if (step == 3) ASSERT_EQ(ncclSignLionRecordPhases(timed, 0), ncclSuccess);
      Bytes g = makeGrads(ncclFloat32, count, 6, step);
      ASSERT_EQ(ncclSignLionStep(timed, params.data(), g.data(), nullptr), ncclSuccess);
      ASSERT_EQ(ncclSignLionStep(plain, plainParams.data(), g.data(), nullptr), ncclSuccess);
      ASSERT_EQ(params, plainParams) << "recording changed the step " << step;
      n = -1;
      ASSERT_EQ(ncclSignLionGetPhases(timed, phases, 4, &n), ncclSuccess);
      if (step == 0 || step == 3) {
        EXPECT_EQ(n, 0) << "step " << step << " recorded while off";
        continue;
      }
      std::vector<int> expected = {ncclSignLionPhaseVote, ncclSignLionPhaseApply};
      if (agg == ncclSignLionMajority) expected.insert(expected.begin() + 1, ncclSignLionPhaseAllReduce);
      ASSERT_EQ(n, (int)expected.size()) << "step " << step;
      for (int i = 0; i < n; i++) {
        EXPECT_EQ(phases[i].phase, expected[i]) << i;
        EXPECT_EQ(phases[i].chunk, 0) << i;
        EXPECT_LE(phases[i].beginUs, phases[i].endUs) << i;
        if (i > 0) EXPECT_LE(phases[i - 1].endUs, phases[i].beginUs) << i;
      }
      int only = -1;
      ASSERT_EQ(ncclSignLionGetPhases(timed, phases, 1, &only), ncclSuccess);
      EXPECT_EQ(only, n) << "the count is what the step recorded, whatever the capacity";
    }
    EXPECT_EQ(ncclSignLionGetPhases(timed, phases, 4, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionGetPhases(timed, phases, -1, &n), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionGetPhases(timed, nullptr, 2, &n), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionGetPhases(nullptr, phases, 4, &n), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionRecordPhases(nullptr, 1), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionDestroy(timed), ncclSuccess);
    EXPECT_EQ(ncclSignLionDestroy(plain), ncclSuccess);
  }
  EXPECT_EQ(ncclSignCommDestroy(comm), ncclSuccess);
}

#ifdef SIGNLION_LION_ON_NCCL
// The device entry points check their arguments before touching CUDA or
// NCCL, so these hold on a machine without a GPU (where CI runs them).
TEST(LionApi, DeviceEntryPointsRejectBadArguments) {
  ncclSignLion_t lion = nullptr;
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  EXPECT_EQ(ncclSignLionCreateNccl(nullptr, 4, ncclFloat32, &c, nullptr), ncclInvalidArgument);
  c.aggregation = ncclSignLionLocal;
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclInt8, &c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclFloat64, &c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, SIZE_MAX / 2, ncclFloat32, &c, nullptr), ncclInvalidArgument);
  for (int agg : {ncclSignLionMajority, ncclSignLionAverage, ncclSignLionGlobal}) {
    ncclSignLionConfig_t b = c;
    b.aggregation = agg;
    EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument) << "needs a comm";
  }
  ncclSignLionConfig_t b = c;
  b.lr = -1.0f;
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);
  b = c;
  b.size = 8;
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);
  b = c;
  b.momentumAverageEvery = -2;
  EXPECT_EQ(ncclSignLionCreateNccl(&lion, 4, ncclFloat32, &b, nullptr), ncclInvalidArgument);
  EXPECT_EQ(lion, nullptr) << "no handle after a failed creation";

  float p[4] = {1, 2, 3, 4}, g[4] = {1, -1, 1, -1};
  EXPECT_EQ(ncclSignLionStepAsync(nullptr, p, g, nullptr), ncclInvalidArgument);
  // A host optimizer is stepped with ncclSignLionStep, and the other way round.
  ASSERT_EQ(ncclSignLionCreate(&lion, 4, ncclFloat32, &c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclSignLionStepAsync(lion, p, g, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclSignLionDestroy(lion), ncclSuccess);

  // Valid arguments: on a machine without a GPU the CUDA error comes back
  // (never a crash); with one, the optimizer exists and refuses host buffers.
  ncclResult_t res = ncclSignLionCreateNccl(&lion, 4, ncclFloat32, &c, nullptr);
  if (res == ncclSuccess) {
    EXPECT_EQ(ncclSignLionStep(lion, p, g, nullptr), ncclInvalidUsage);
    EXPECT_EQ(ncclSignLionStepAsync(lion, p, g, nullptr), ncclInvalidArgument) << "host buffers";
    EXPECT_EQ(ncclSignLionStepAsync(lion, nullptr, g, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclSignLionDestroy(lion), ncclSuccess);
  } else {
    EXPECT_EQ(res, ncclUnhandledCudaError);
  }
}
#endif

}  // namespace
}  // namespace signlion
