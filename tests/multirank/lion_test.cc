// Distributed Lion across ranks (threads, loopback host communicator): every
// rank holds the same parameters; majority and average equal the reference
// vote of the per-rank c's; global is plain Lion on the mean gradient; Lion
// Cub's momentum averaging; non-finite steps skipped by all; save/load
// resumes bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bits/bits.h"
#include "common/lion_reference.h"
#include "common/ranks.h"
#include "lion/distributed_lion.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;

// One host communicator with ranks as threads; body(rank, comm) runs on each.
void onRanks(int nranks, const std::function<void(int, ncclSignComm_t)>& body) {
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  config.timeoutMs = 20000;
  test::withRanks(nranks, config, body);
}

// Rank r's gradient at a step: multiples of 2^-8 in [-4, 4], so that sums of
// a few of them are exact in any order (the global mode's ring sum).
Bytes rankGrads(ncclDataType_t dt, size_t count, int rank, int step, float nonFiniteAt = 0.0f) {
  std::mt19937 rng(1000u * rank + step);
  std::uniform_int_distribution<int> q(-1024, 1024);
  Bytes g(count * bits::typeSize(dt));
  for (size_t i = 0; i < count; i++) test::setElem(g, dt, i, q(rng) / 256.0f);
  if (nonFiniteAt != 0.0f) test::setElem(g, dt, count / 2, nonFiniteAt);
  return g;
}

Bytes startParams(ncclDataType_t dt, size_t count) {
  Bytes p(count * bits::typeSize(dt));
  for (size_t i = 0; i < count; i++) test::setElem(p, dt, i, std::sin((float)i));
  return p;
}

ncclSignLionConfig_t lionConfig(int aggregation) {
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.aggregation = aggregation;
  c.lr = 0.01f;
  c.weightDecay = 0.1f;
  return c;
}

// Runs `steps` steps on nranks ranks and the reference next to them; checks
// every rank's parameters and momentum after every step.
void checkAgainstReference(int nranks, int aggregation, ncclDataType_t dt, bool master) {
  const size_t count = 1000;
  const int steps = 4;
  ncclSignLionConfig_t config = lionConfig(aggregation);
  config.masterWeights = master;

  // The reference: per-rank momenta, one parameter vector (all ranks apply the same update).
  std::vector<test::LionReference> refs(nranks, test::LionReference(dt, count, config.lr, config.weightDecay, master));
  std::vector<Bytes> refParams(steps + 1, startParams(dt, count));
  std::vector<std::vector<std::vector<float>>> refMomenta(steps);
  for (int s = 0; s < steps; s++) {
    std::vector<std::vector<float>> cs;
    if (aggregation == ncclSignLionGlobal) {
      std::vector<float> sum(count, 0.0f);
      for (int r = 0; r < nranks; r++) {
        Bytes g = rankGrads(dt, count, r, s);
        for (size_t i = 0; i < count; i++) sum[i] += test::elemAsFloat(g, dt, i);
      }
      Bytes mean(count * 4);
      memcpy(mean.data(), sum.data(), count * 4);
      test::LionReference& ref = refs[0];
      ref.type = ncclFloat32;
      std::vector<float> c = ref.interpolate(mean, (float)nranks);
      ref.type = dt;
      for (float& x : c) x = test::plainSign(x);
      refParams[s + 1] = refParams[s];
      ref.apply(refParams[s + 1], c);
      refMomenta[s].assign(nranks, ref.momentum);
      continue;
    }
    for (int r = 0; r < nranks; r++) cs.push_back(refs[r].interpolate(rankGrads(dt, count, r, s)));
    ncclSignOp_t op = aggregation == ncclSignLionMajority ? ncclSignMajority : ncclSignAverage;
    std::vector<float> u = test::referenceVoteOf(cs, op, ncclSignZeroPositive, ncclSignTieZero);
    refParams[s + 1] = refParams[s];
    for (int r = 0; r < nranks; r++) {
      Bytes p = refParams[s];
      refs[r].apply(r == 0 ? refParams[s + 1] : p, u);
      refMomenta[s].push_back(refs[r].momentum);
    }
  }

  onRanks(nranks, [&](int rank, ncclSignComm_t comm) {
    lion::Optimizer opt(count, dt, config, std::make_unique<lion::HostCommunicator>(comm));
    Bytes params = startParams(dt, count);
    for (int s = 0; s < steps; s++) {
      bool applied = false;
      ASSERT_EQ(opt.step(params.data(), rankGrads(dt, count, rank, s).data(), &applied), ncclSuccess);
      ASSERT_TRUE(applied);
      ASSERT_EQ(test::firstMismatch(params, refParams[s + 1]), std::string::npos) << "rank " << rank << " step " << s;
      ASSERT_EQ(opt.momentum(), refMomenta[s][rank]) << "rank " << rank << " step " << s;
    }
  });
}

TEST(DistributedLion, MajorityEqualsReferenceVote) {
  for (int n : {2, 3, 4})
    for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
      SCOPED_TRACE("N " + std::to_string(n) + " " + bits::typeName(dt));
      checkAgainstReference(n, ncclSignLionMajority, dt, dt != ncclFloat32);
    }
}

TEST(DistributedLion, AverageEqualsReferenceVote) {
  for (int n : {2, 3, 5}) {
    SCOPED_TRACE("N " + std::to_string(n));
    checkAgainstReference(n, ncclSignLionAverage, n == 3 ? ncclFloat16 : ncclFloat32, false);
  }
}

TEST(DistributedLion, GlobalIsPlainLionOnTheMeanGradient) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("N " + std::to_string(n));
    checkAgainstReference(n, ncclSignLionGlobal, ncclFloat32, false);
  }
}

// Lion Cub: every K applied steps the momenta become their mean on every
// rank. For N = 2 the fp32 sum is one rounding, so the reference is exact.
TEST(DistributedLion, MomentumAveragedEveryK) {
  const size_t count = 777;
  ncclSignLionConfig_t config = lionConfig(ncclSignLionMajority);
  config.momentumAverageEvery = 2;
  for (int n : {2, 3}) {
    std::vector<std::vector<std::vector<float>>> momenta(4, std::vector<std::vector<float>>(n));
    onRanks(n, [&](int rank, ncclSignComm_t comm) {
      lion::Optimizer opt(count, ncclFloat32, config, std::make_unique<lion::HostCommunicator>(comm));
      test::LionReference ref(ncclFloat32, count, config.lr, config.weightDecay);
      Bytes params = startParams(ncclFloat32, count);
      for (int s = 0; s < 4; s++) {
        bool applied;
        Bytes g = rankGrads(ncclFloat32, count, rank, s);
        ASSERT_EQ(opt.step(params.data(), g.data(), &applied), ncclSuccess);
        ref.interpolate(g);
        momenta[s][rank] = opt.momentum();
        if (s % 2 == 0) {
          ASSERT_EQ(opt.momentum(), ref.momentum) << "step " << s << ": not averaged yet";
        }
        ref.momentum = opt.momentum();  // the reference continues from the averaged momentum
      }
    });
    for (int s : {1, 3}) {
      for (int r = 1; r < n; r++) EXPECT_EQ(momenta[s][r], momenta[s][0]) << "N " << n << " step " << s;
    }
    EXPECT_NE(momenta[0][0], momenta[0][1]) << "momenta differ between averagings";
  }
  // N = 2, exact: the averaged momentum is (m0 + m1) / 2 of the per-rank momenta.
  std::vector<std::vector<float>> before(2), after(2);
  onRanks(2, [&](int rank, ncclSignComm_t comm) {
    lion::Optimizer opt(count, ncclFloat32, config, std::make_unique<lion::HostCommunicator>(comm));
    test::LionReference ref(ncclFloat32, count, config.lr, config.weightDecay);
    Bytes params = startParams(ncclFloat32, count);
    bool applied;
    Bytes g0 = rankGrads(ncclFloat32, count, rank, 0), g1 = rankGrads(ncclFloat32, count, rank, 1);
    ASSERT_EQ(opt.step(params.data(), g0.data(), &applied), ncclSuccess);
    ASSERT_EQ(opt.step(params.data(), g1.data(), &applied), ncclSuccess);
    ref.interpolate(g0);
    ref.interpolate(g1);
    before[rank] = ref.momentum;
    after[rank] = opt.momentum();
  });
  for (size_t i = 0; i < count; i++) {
    float want = (before[0][i] + before[1][i]) / 2.0f;
    ASSERT_EQ(after[0][i], want) << i;
    ASSERT_EQ(after[1][i], want) << i;
  }
}

// One rank's inf or NaN makes every rank skip the step: nothing changes.
TEST(DistributedLion, NonFiniteGradientSkippedByAllRanks) {
  const size_t count = 300;
  const int n = 3;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int agg : {ncclSignLionMajority, ncclSignLionAverage, ncclSignLionGlobal}) {
    for (float bad : {inf, nan}) {
      ncclSignLionConfig_t config = lionConfig(agg);
      config.skipNonFinite = 1;
      onRanks(n, [&](int rank, ncclSignComm_t comm) {
        lion::Optimizer opt(count, ncclBfloat16, config, std::make_unique<lion::HostCommunicator>(comm));
        Bytes params = startParams(ncclBfloat16, count);
        bool applied = false;
        ASSERT_EQ(opt.step(params.data(), rankGrads(ncclBfloat16, count, rank, 0).data(), &applied), ncclSuccess);
        ASSERT_TRUE(applied);
        Bytes p1 = params;
        std::vector<float> m1 = opt.momentum();
        Bytes g = rankGrads(ncclBfloat16, count, rank, 1, rank == 1 ? bad : 0.0f);
        ASSERT_EQ(opt.step(params.data(), g.data(), &applied), ncclSuccess);
        EXPECT_FALSE(applied) << "aggregation " << agg << " rank " << rank;
        EXPECT_EQ(params, p1);
        EXPECT_EQ(opt.momentum(), m1);
        ASSERT_EQ(opt.step(params.data(), rankGrads(ncclBfloat16, count, rank, 2).data(), &applied), ncclSuccess);
        EXPECT_TRUE(applied);
        EXPECT_EQ(opt.appliedSteps(), 2u);
        EXPECT_EQ(opt.skippedSteps(), 1u);
      });
    }
  }
}

// Three steps, a save on every rank, a new communicator and optimizers, a
// load, three more steps: the same bytes as six steps straight.
TEST(DistributedLion, SaveLoadResumesBitForBit) {
  const size_t count = 513;
  const int n = 3;
  ncclSignLionConfig_t config = lionConfig(ncclSignLionMajority);
  config.masterWeights = 1;
  config.momentumAverageEvery = 4;
  std::vector<Bytes> straight(n), resumed(n), straightState(n), resumedState(n), saved(n), mid(n);
  auto stateOf = [](const lion::Optimizer& o) {
    Bytes s(o.stateSize());
    EXPECT_EQ(o.saveState(s.data(), s.size()), ncclSuccess);
    return s;
  };
  auto run = [&](lion::Optimizer& o, Bytes& params, int rank, int from, int to) {
    for (int s = from; s < to; s++) {
      bool applied;
      ASSERT_EQ(o.step(params.data(), rankGrads(ncclBfloat16, count, rank, s).data(), &applied), ncclSuccess);
    }
  };
  onRanks(n, [&](int rank, ncclSignComm_t comm) {
    lion::Optimizer o(count, ncclBfloat16, config, std::make_unique<lion::HostCommunicator>(comm));
    straight[rank] = startParams(ncclBfloat16, count);
    run(o, straight[rank], rank, 0, 6);
    straightState[rank] = stateOf(o);
  });
  onRanks(n, [&](int rank, ncclSignComm_t comm) {
    lion::Optimizer o(count, ncclBfloat16, config, std::make_unique<lion::HostCommunicator>(comm));
    mid[rank] = startParams(ncclBfloat16, count);
    run(o, mid[rank], rank, 0, 3);
    saved[rank] = stateOf(o);
  });
  onRanks(n, [&](int rank, ncclSignComm_t comm) {
    lion::Optimizer o(count, ncclBfloat16, config, std::make_unique<lion::HostCommunicator>(comm));
    ASSERT_EQ(o.loadState(saved[rank].data(), saved[rank].size()), ncclSuccess);
    resumed[rank] = mid[rank];
    run(o, resumed[rank], rank, 3, 6);
    resumedState[rank] = stateOf(o);
  });
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(resumed[r], straight[r]) << "rank " << r;
    EXPECT_EQ(resumedState[r], straightState[r]) << "rank " << r;
    EXPECT_EQ(straight[r], straight[0]) << "ranks agree";
  }
}

}  // namespace
}  // namespace signlion
