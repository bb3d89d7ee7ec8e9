// Distributed Lion across ranks (threads, loopback host communicator): every
// rank holds the same parameters; majority and average equal the reference
// vote of the per-rank c's; global is plain Lion on the mean gradient; Lion
// Cub's momentum averaging; non-finite steps skipped by all; save/load
// resumes bit for bit. Each with the pipelined step (SIGNLION_LION_CHUNK)
// and without: the same bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bits/bits.h"
#include "common/lion_reference.h"
#include "common/param.h"
#include "common/ranks.h"
#include "common/warn_capture.h"
#include "lion/collective_thread.h"
#include "lion/distributed_lion.h"
#include "lion/lion_params.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;

// SIGNLION_LION_CHUNK while alive (every rank thread reads the same value).
class ScopedLionChunk {
 public:
  explicit ScopedLionChunk(const char* value) {
    setenv("SIGNLION_LION_CHUNK", value, 1);
    paramResetCache();
  }
  ~ScopedLionChunk() {
    unsetenv("SIGNLION_LION_CHUNK");
    paramResetCache();
  }
};

// The chunks the tests step with: no pipeline, and chunks of 64 and 128
// elements, whose last chunk is shorter for the counts below.
const char* const kChunks[] = {"0", "64", "128"};

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
  for (const char* chunk : kChunks) {
    ScopedLionChunk scoped(chunk);
    for (int n : {2, 3, 4})
      for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
        SCOPED_TRACE("chunk " + std::string(chunk) + " N " + std::to_string(n) + " " + bits::typeName(dt));
        checkAgainstReference(n, ncclSignLionMajority, dt, dt != ncclFloat32);
      }
  }
}

TEST(DistributedLion, AverageEqualsReferenceVote) {
  for (const char* chunk : kChunks) {
    ScopedLionChunk scoped(chunk);
    for (int n : {2, 3, 5})
      for (bool master : {false, true}) {
        if (master && n != 3) continue;  // fp16 at N = 3, with and without a master copy
        SCOPED_TRACE("chunk " + std::string(chunk) + " N " + std::to_string(n) + (master ? " master" : ""));
        checkAgainstReference(n, ncclSignLionAverage, n == 3 ? ncclFloat16 : ncclFloat32, master);
      }
  }
}

// Optimizers on one communicator vote by their own rules, stepping in turn:
// two name theirs in the config (they differ from each other and from the
// comm's), one passes the struct of an older header (no rule fields; the
// bytes past its size hold values no rule has, which must not be read) and
// so takes the comm's. Gradients of -1, 0, +1 give zero votes and ties, so
// each rule set has its own result; with and without the pipelined step
// (its collectives on the comm's shared thread).
TEST(DistributedLion, OptimizersOnOneCommVoteByTheirOwnRules) {
  struct Rules {
    ncclSignZeroRule_t zero;
    ncclSignTieRule_t tie;
  };
  const Rules comms{ncclSignZeroNegative, ncclSignTiePositive};
  const Rules own[3] = {{ncclSignZeroAbstain, ncclSignTieNegative}, {ncclSignZeroPositive, ncclSignTieZero}, comms};
  const size_t count = 300;
  const int steps = 3;
  const ncclDataType_t dt = ncclFloat32;
  auto grads = [&](int opt, int rank, int step) {
    std::mt19937 rng(100u * opt + 10u * rank + step);
    Bytes g(count * 4);
    for (size_t i = 0; i < count; i++) test::setElem(g, dt, i, (float)((int)(rng() % 3) - 1));
    return g;
  };
  for (const char* chunk : {"0", "64"}) {
    ScopedLionChunk scoped(chunk);
    for (int n : {2, 3}) {
      SCOPED_TRACE("chunk " + std::string(chunk) + " N " + std::to_string(n));
      // The reference of each optimizer under its rules.
      std::vector<std::vector<Bytes>> want(3, std::vector<Bytes>(steps + 1, startParams(dt, count)));
      for (int o = 0; o < 3; o++) {
        std::vector<test::LionReference> refs(n, test::LionReference(dt, count, 0.01f, 0.1f));
        for (int st = 0; st < steps; st++) {
          std::vector<std::vector<float>> cs;
          for (int r = 0; r < n; r++) cs.push_back(refs[r].interpolate(grads(o, r, st)));
          std::vector<float> u = test::referenceVoteOf(cs, ncclSignMajority, own[o].zero, own[o].tie);
          want[o][st + 1] = want[o][st];
          refs[0].apply(want[o][st + 1], u);
        }
      }
      ASSERT_NE(want[0][steps], want[1][steps]) << "the inputs do not tell the rule sets apart";
      ASSERT_NE(want[1][steps], want[2][steps]) << "the inputs do not tell the rule sets apart";
      ncclSignConfig_t commConfig = NCCL_SIGN_CONFIG_INITIALIZER;
      commConfig.timeoutMs = 20000;
      commConfig.zeroRule = comms.zero;
      commConfig.tieRule = comms.tie;
      test::withRanks(n, commConfig, [&](int rank, ncclSignComm_t comm) {
        ncclSignLion_t opts[3] = {};
        for (int o = 0; o < 3; o++) {
          ncclSignLionConfig_t c = lionConfig(ncclSignLionMajority);
          c.zeroRule = own[o].zero;
          c.tieRule = own[o].tie;
          if (o == 2) {  // an older header's struct: it ends before the rules
            c.size = (offsetof(ncclSignLionConfig_t, zeroRule) + alignof(ncclSignLionConfig_t) - 1) /
                     alignof(ncclSignLionConfig_t) * alignof(ncclSignLionConfig_t);
            c.zeroRule = 99;
            c.tieRule = 99;
          }
          ASSERT_EQ(ncclSignLionCreate(&opts[o], count, dt, &c, comm), ncclSuccess) << "optimizer " << o;
        }
        std::vector<Bytes> params(3, startParams(dt, count));
        for (int st = 0; st < steps; st++)
          for (int o = 0; o < 3; o++) {
            int applied = 0;
            ASSERT_EQ(ncclSignLionStep(opts[o], params[o].data(), grads(o, rank, st).data(), &applied), ncclSuccess);
            ASSERT_EQ(test::firstMismatch(params[o], want[o][st + 1]), std::string::npos)
                << "optimizer " << o << " rank " << rank << " step " << st;
          }
        for (ncclSignLion_t l : opts) EXPECT_EQ(ncclSignLionDestroy(l), ncclSuccess);
      });
    }
  }
}

// A rule that is neither a rule nor NCCL_SIGN_RULE_OF_COMM, and a config of
// a size no header had, are refused with a WARN naming the field.
TEST(DistributedLion, BadRulesInTheConfigAreNamed) {
  onRanks(1, [&](int, ncclSignComm_t comm) {
    test::WarnCapture warns;
    ncclSignLion_t l = nullptr;
    ncclSignLionConfig_t c = lionConfig(ncclSignLionMajority);
    c.zeroRule = ncclSignNumZeroRules;
    EXPECT_EQ(ncclSignLionCreate(&l, 10, ncclFloat32, &c, comm), ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->zeroRule'"), 1);
    c = lionConfig(ncclSignLionMajority);
    c.tieRule = -7;
    EXPECT_EQ(ncclSignLionCreate(&l, 10, ncclFloat32, &c, comm), ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->tieRule'"), 1);
    c = lionConfig(ncclSignLionMajority);
    c.size = sizeof(c) - 4;
    EXPECT_EQ(ncclSignLionCreate(&l, 10, ncclFloat32, &c, comm), ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->size'"), 1);
    EXPECT_EQ(l, nullptr);
  });
}

// The host communicator's thread-backed start/wait, recorded: what the
// optimizer asks of it, in order, for how many elements and from which
// element on ("apply 128@256"); failWait > 0 makes that wait (1-based)
// report ncclSystemError after the real one returned.
class RecordingCommunicator final : public lion::Communicator {
 public:
  RecordingCommunicator(ncclSignComm_t comm, int failWait = 0) : inner_(comm), failWait_(failWait) {}
  std::vector<std::string> events;
  int nranks() const override { return inner_.nranks(); }
  int rank() const override { return inner_.rank(); }
  bool onDevice() const override { return false; }
  ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) override {
    record("all-reduce", count, votes, bits::typeSize(type));
    return inner_.signAllReduce(votes, count, type, op);
  }
  bool overlapsCollectives() const override { return inner_.overlapsCollectives(); }
  ncclResult_t signAllReduceStart(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op,
                                  bool timed) override {
    record("start", count, votes, bits::typeSize(type));
    return inner_.signAllReduceStart(votes, count, type, op, timed);
  }
  ncclResult_t signAllReduceWait(int64_t* beginUs, int64_t* endUs) override {
    events.push_back("wait");
    const ncclResult_t r = inner_.signAllReduceWait(beginUs, endUs);
    return ++waits_ == failWait_ ? ncclSystemError : r;
  }
  ncclResult_t sumAllReduce(float* x, size_t count) override { return inner_.sumAllReduce(x, count); }
  ncclResult_t allocate(size_t bytes, void** ptr) override { return inner_.allocate(bytes, ptr); }
  void release(void* ptr) override { inner_.release(ptr); }
  ncclResult_t copyToHost(void* host, const void* src, size_t bytes) override {
    return inner_.copyToHost(host, src, bytes);
  }
  ncclResult_t copyFromHost(void* dst, const void* host, size_t bytes) override {
    return inner_.copyFromHost(dst, host, bytes);
  }
  ncclResult_t interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor, float* momentum,
                                  lion::VoteEncoding encoding, void* votes, size_t count, const lion::Coefficients& k,
                                  const float* skip) override {
    record("vote", count, momentum, sizeof(float));
    return inner_.interpolateAndVote(gradType, grads, divisor, momentum, encoding, votes, count, k, skip);
  }
  ncclResult_t applyUpdate(ncclDataType_t paramType, void* params, float* master, ncclDataType_t updateType,
                           const void* update, size_t count, float lr, float weightDecay, const float* skip,
                           uint64_t* skipped) override {
    record("apply", count, params, bits::typeSize(paramType));
    return inner_.applyUpdate(paramType, params, master, updateType, update, count, lr, weightDecay, skip, skipped);
  }
  ncclResult_t flagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag) override {
    return inner_.flagNonFinite(type, x, count, flag);
  }
  ncclResult_t toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) override {
    return inner_.toFloat(type, x, dst, count);
  }
  ncclResult_t divide(float* x, float divisor, size_t count) override { return inner_.divide(x, divisor, count); }

 private:
  // The first pointer of each kind is element 0 (every step starts there).
  void record(const std::string& what, size_t count, const void* p, size_t elementSize) {
    const char*& base = bases_[what];
    if (base == nullptr) base = static_cast<const char*>(p);
    events.push_back(what + " " + std::to_string(count) + "@" +
                     std::to_string((static_cast<const char*>(p) - base) / (ptrdiff_t)elementSize));
  }
  lion::HostCommunicator inner_;
  int failWait_, waits_ = 0;
  std::map<std::string, const char*> bases_;
};

// The pipeline's order: two chunks' all-reduces are started ahead; once
// chunk i's wait returns (chunk i + 1's still on the wire), chunk i + 2 is
// voted and started, then chunk i applied; a count of at most one chunk, or
// chunk 0, is the one-piece step.
TEST(DistributedLion, PipelinedStepVotesAndAppliesWhileAChunkIsOnTheWire) {
  struct Case {
    const char* chunk;
    size_t count;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"128", 300, {"vote 128@0", "start 128@0", "vote 128@128", "start 128@128", "wait", "vote 44@256",
                    "start 44@256", "apply 128@0", "wait", "apply 128@128", "wait", "apply 44@256"}},
      {"100", 130, {"vote 64@0", "start 64@0", "vote 64@64", "start 64@64", "wait", "vote 2@128", "start 2@128",
                    "apply 64@0", "wait", "apply 64@64", "wait", "apply 2@128"}},  // rounded down to 64
      {"128", 128, {"vote 128@0", "all-reduce 128@0", "apply 128@0"}},
      {"0", 300, {"vote 300@0", "all-reduce 300@0", "apply 300@0"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("chunk ") + c.chunk + " count " + std::to_string(c.count));
    ScopedLionChunk scoped(c.chunk);
    for (int agg : {ncclSignLionMajority, ncclSignLionAverage}) {
      for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
        std::vector<std::vector<std::string>> events(2);
        std::vector<Bytes> params(2);
        onRanks(2, [&](int rank, ncclSignComm_t comm) {
          auto recording = std::make_unique<RecordingCommunicator>(comm);
          RecordingCommunicator* rec = recording.get();
          lion::Optimizer opt(c.count, dt, lionConfig(agg), std::move(recording));
          params[rank] = startParams(dt, c.count);
          bool applied = false;
          ASSERT_EQ(opt.step(params[rank].data(), rankGrads(dt, c.count, rank, 0).data(), &applied), ncclSuccess);
          EXPECT_TRUE(applied);
          events[rank] = rec->events;
        });
        EXPECT_EQ(events[0], c.want) << "aggregation " << agg << " " << bits::typeName(dt);
        EXPECT_EQ(events[1], c.want) << "aggregation " << agg << " " << bits::typeName(dt);
        EXPECT_EQ(params[0], params[1]) << "ranks agree";
      }
    }
  }
}

// A collective that fails in the middle of a pipelined step: step() returns
// its error after waiting for the calls in flight; nothing is started after
// the failure is known, and no chunk from the failed one on is applied.
TEST(DistributedLion, PipelinedStepReturnsTheFailureOfAChunk) {
  ScopedLionChunk scoped("64");
  onRanks(2, [&](int rank, ncclSignComm_t comm) {
    auto recording = std::make_unique<RecordingCommunicator>(comm, 2);
    RecordingCommunicator* rec = recording.get();
    lion::Optimizer opt(300, ncclFloat32, lionConfig(ncclSignLionMajority), std::move(recording));
    Bytes params = startParams(ncclFloat32, 300);
    bool applied = false;
    EXPECT_EQ(opt.step(params.data(), rankGrads(ncclFloat32, 300, rank, 0).data(), &applied), ncclSystemError);
    // Chunk 2 was started before chunk 1's failure was known: it is waited
    // for, not applied.
    const std::vector<std::string> want = {"vote 64@0",  "start 64@0",  "vote 64@64", "start 64@64", "wait",
                                           "vote 64@128", "start 64@128", "apply 64@0", "wait",        "wait"};
    EXPECT_EQ(rec->events, want) << "rank " << rank;
  });
}

// The start of a collective returns before the peers have joined it: rank 1
// calls only once rank 0's start has returned, so a start that ran the call
// on the caller's thread would wait for rank 1 until the timeout.
TEST(DistributedLion, CollectiveStartReturnsBeforeThePeersJoin) {
  const size_t count = 1000;
  std::promise<void> started;
  std::shared_future<void> startedOnRank0 = started.get_future().share();
  std::vector<std::vector<int8_t>> votes(2, std::vector<int8_t>(count));
  for (int r = 0; r < 2; r++)
    for (size_t i = 0; i < count; i++) votes[r][i] = i % 3 == 0 ? -1 : 1;  // equal on both: the result
  const std::vector<int8_t> want = votes[0];
  onRanks(2, [&](int rank, ncclSignComm_t comm) {
    lion::HostCommunicator host(comm);
    ASSERT_TRUE(host.overlapsCollectives());
    if (rank == 0) {
      ASSERT_EQ(host.signAllReduceStart(votes[0].data(), count, ncclInt8, ncclSignMajority, false), ncclSuccess);
      started.set_value();
      EXPECT_EQ(host.signAllReduceWait(nullptr, nullptr), ncclSuccess);
    } else {
      ASSERT_EQ(startedOnRank0.wait_for(std::chrono::seconds(10)), std::future_status::ready)
          << "rank 0's start did not return before rank 1 joined its collective";
      EXPECT_EQ(host.signAllReduce(votes[1].data(), count, ncclInt8, ncclSignMajority), ncclSuccess);
    }
  });
  EXPECT_EQ(votes[0], want);
  EXPECT_EQ(votes[1], want);
}

// Two calls started before either is waited for run in the order started,
// each on its own votes, and the waits return them oldest first; a third
// start before a wait is refused (ncclInternalError), leaving the two intact.
TEST(DistributedLion, TwoCollectivesStartedAheadRunInOrder) {
  const size_t count = 1000;
  std::vector<std::vector<int8_t>> first(3, std::vector<int8_t>(count)), second = first, third = first;
  for (int r = 0; r < 3; r++)
    for (size_t i = 0; i < count; i++) {
      first[r][i] = (i + r) % 3 == 0 ? -1 : 1;
      second[r][i] = (i * 7 + r) % 5 < 3 ? -1 : 1;
    }
  auto majority = [&](const std::vector<std::vector<int8_t>>& v) {
    std::vector<int8_t> m(count);
    for (size_t i = 0; i < count; i++) m[i] = v[0][i] + v[1][i] + v[2][i] > 0 ? 1 : -1;
    return m;
  };
  const std::vector<int8_t> wantFirst = majority(first), wantSecond = majority(second);
  onRanks(3, [&](int rank, ncclSignComm_t comm) {
    lion::HostCommunicator host(comm);
    ASSERT_TRUE(host.overlapsCollectives());
    ASSERT_EQ(lion::Communicator::kMaxStarted, 2);
    ASSERT_EQ(host.signAllReduceStart(first[rank].data(), count, ncclInt8, ncclSignMajority, false), ncclSuccess);
    ASSERT_EQ(host.signAllReduceStart(second[rank].data(), count, ncclInt8, ncclSignMajority, true), ncclSuccess);
    test::WarnCapture warns;
    EXPECT_EQ(host.signAllReduceStart(third[rank].data(), count, ncclInt8, ncclSignMajority, false),
              ncclInternalError);
    EXPECT_EQ(warns.countContaining("not waited for"), 1);
    int64_t begin1 = -1, end1 = -1, begin2 = -1, end2 = -1;
    EXPECT_EQ(host.signAllReduceWait(&begin1, &end1), ncclSuccess);
    EXPECT_EQ(begin1, -1) << "an untimed call hands over no times";
    EXPECT_EQ(host.signAllReduceWait(&begin2, &end2), ncclSuccess);
    EXPECT_LE(begin2, end2);
    EXPECT_GT(begin2, 0) << "the timed call, waited for second, is the second one";
    EXPECT_EQ(host.signAllReduceWait(nullptr, nullptr), ncclSuccess) << "nothing left to wait for";
  });
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(first[r], wantFirst) << "rank " << r;
    EXPECT_EQ(second[r], wantSecond) << "rank " << r;
    EXPECT_EQ(third[r], std::vector<int8_t>(count, 0)) << "rank " << r << ": the refused start touched nothing";
  }
}

// Optimizers on one communicator share its collective thread; another
// communicator has its own; the thread ends with its last holder.
TEST(DistributedLion, OneCollectiveThreadPerCommunicator) {
  std::vector<lion::CollectiveThread*> threads(2);
  onRanks(2, [&](int rank, ncclSignComm_t comm) {
    std::shared_ptr<lion::CollectiveThread> a = lion::CollectiveThread::of(comm);
    std::shared_ptr<lion::CollectiveThread> b = lion::CollectiveThread::of(comm);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a, b);
    EXPECT_EQ(a.use_count(), 2);
    threads[rank] = a.get();
    std::weak_ptr<lion::CollectiveThread> weak = a;
    a.reset();
    b.reset();
    EXPECT_TRUE(weak.expired());
  });
  EXPECT_NE(threads[0], threads[1]);
}

// A chunk of 1 to 63 elements or a negative one: a WARN naming the variable
// and the default; 0 and multiples of 64 as they are, others rounded down.
TEST(DistributedLion, LionChunkOutOfRangeIsNamed) {
  const std::pair<const char*, size_t> cases[] = {{"0", 0},
                                                  {"64", 64},
                                                  {"200", 192},
                                                  {"1M", size_t{1} << 20},
                                                  {"1", (size_t)lion::kDefaultLionChunk},
                                                  {"63", (size_t)lion::kDefaultLionChunk},
                                                  {"-5", (size_t)lion::kDefaultLionChunk}};
  for (const auto& c : cases) {
    ScopedLionChunk scoped(c.first);
    test::WarnCapture warns;
    EXPECT_EQ(lion::lionChunkElements(), c.second) << c.first;
    const bool bad = c.second == (size_t)lion::kDefaultLionChunk && std::string(c.first) != "1M";
    EXPECT_EQ(warns.countContaining("SIGNLION_LION_CHUNK"), bad ? 1 : 0) << c.first;
  }
}

// SIGNLION_LION_CHUNK is read once, when the optimizer is made: set to 0 (no
// pipeline) between the optimizers' creation and their step, it leaves the
// step cut in the chunks of 64 it had when made.
TEST(DistributedLion, LionChunkReadWhenTheOptimizerIsMade) {
  ScopedLionChunk scoped("64");
  std::vector<std::vector<std::string>> events(2);
  std::promise<void> changed;
  std::shared_future<void> changedSeen = changed.get_future().share();
  std::atomic<int> made{0};
  onRanks(2, [&](int rank, ncclSignComm_t comm) {
    auto recording = std::make_unique<RecordingCommunicator>(comm);
    RecordingCommunicator* rec = recording.get();
    lion::Optimizer opt(130, ncclFloat32, lionConfig(ncclSignLionMajority), std::move(recording));
    if (++made == 2) {  // both optimizers made: the variable changes before either steps
      setenv("SIGNLION_LION_CHUNK", "0", 1);
      paramResetCache();
      changed.set_value();
    }
    changedSeen.wait();
    Bytes params = startParams(ncclFloat32, 130);
    bool applied = false;
    ASSERT_EQ(opt.step(params.data(), rankGrads(ncclFloat32, 130, rank, 0).data(), &applied), ncclSuccess);
    events[rank] = rec->events;
  });
  const std::vector<std::string> want = {"vote 64@0", "start 64@0", "vote 64@64", "start 64@64",
                                         "wait",      "vote 2@128", "start 2@128", "apply 64@0",
                                         "wait",      "apply 64@64", "wait",       "apply 2@128"};
  EXPECT_EQ(events[0], want);
  EXPECT_EQ(events[1], want);
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
  ScopedLionChunk scoped("128");  // 7 chunks, the last of 9 elements
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
  for (const char* chunk : kChunks) {
    ScopedLionChunk scoped(chunk);
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
          EXPECT_FALSE(applied) << "chunk " << chunk << " aggregation " << agg << " rank " << rank;
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
}

// Three steps, a save on every rank, a new communicator and optimizers, a
// load, three more steps: the same bytes as six steps straight.
TEST(DistributedLion, SaveLoadResumesBitForBit) {
  const size_t count = 513;
  const int n = 3;
  ncclSignLionConfig_t config = lionConfig(ncclSignLionMajority);
  config.masterWeights = 1;
  config.momentumAverageEvery = 4;
  ScopedLionChunk scoped("64");
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
