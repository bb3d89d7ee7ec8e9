// The host sign all-reduce across ranks, bit for bit against the reference:
// ranks as threads in one process (the matrix) and as separate processes
// (loopback), plus dead and stalled ranks, wire bytes vs the schedule, and the
// sum baseline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algo/schedule.h"
#include "algo/tree.h"
#include "bits/bits.h"
#include "bits/float16.h"
#include "common/config.h"
#include "common/param.h"
#include "common/ranks.h"
#include "common/vote_inputs.h"
#include "common/warn_capture.h"
#include "host/communicator.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;
using test::withRanks;

const ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};

ncclSignConfig_t makeConfig(ncclSignAlgo_t algo, ncclSignZeroRule_t zero = ncclSignZeroPositive,
                            ncclSignTieRule_t tie = ncclSignTieZero, int timeoutMs = 20000) {
  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.algorithm = algo;
  c.zeroRule = zero;
  c.tieRule = tie;
  c.timeoutMs = timeoutMs;
  return c;
}

// One call on every rank (threads already in a comm): rank r reduces
// inputs[r]; in place or not; compares with want.
void checkCall(int rank, ncclSignComm_t comm, const std::vector<Bytes>& inputs, const Bytes& want, size_t count,
               ncclDataType_t dt, ncclSignOp_t op, bool inPlace, const std::string& what) {
  Bytes out = inPlace ? inputs[rank] : Bytes(count * bits::typeSize(dt), 0xcd);
  const void* send = inPlace ? out.data() : inputs[rank].data();
  ASSERT_EQ(ncclSignHostAllReduce(send, out.data(), count, dt, op, comm), ncclSuccess) << what;
  size_t at = test::firstMismatch(out, want);
  ASSERT_EQ(at, std::string::npos) << what << " rank " << rank << " first bad byte " << at;
}

// Every dtype and op of each count, in and out of place, against the
// reference under `zero` (ties to zero); inputs from seed, seed + 1, ... (the
// same on every rank). beforeCall, if set, runs before each call.
void checkEveryTypeAndOp(int rank, ncclSignComm_t comm, int n, const std::vector<size_t>& counts,
                         ncclSignZeroRule_t zero, uint32_t seed, const std::string& what,
                         const std::function<void()>& beforeCall = nullptr) {
  for (size_t count : counts) {
    for (ncclDataType_t dt : kTypes) {
      std::vector<Bytes> in = test::randomVoteInputs(n, count, dt, seed++);
      for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
        if (op == ncclSignAverage && dt == ncclInt8) continue;
        Bytes want = test::referenceOutput(in, count, dt, op, zero, ncclSignTieZero);
        for (bool inPlace : {false, true}) {
          if (beforeCall) beforeCall();
          checkCall(rank, comm, in, want, count, dt, op, inPlace,
                    what + " count " + std::to_string(count) + " " + bits::typeName(dt) + (op ? " avg" : " maj") +
                        (inPlace ? " in place" : ""));
        }
      }
    }
  }
}

struct MatrixCase {
  ncclSignAlgo_t algo;
  int nranks;
};

std::string caseName(const ::testing::TestParamInfo<MatrixCase>& info) {
  return std::string(algoName(info.param.algo)) + "_N" + std::to_string(info.param.nranks);
}

class SignAllReduceMatrix : public ::testing::TestWithParam<MatrixCase> {};

// Every count, dtype, op, in and out of place, on one warm communicator.
TEST_P(SignAllReduceMatrix, EveryRankGetsTheReference) {
  const MatrixCase mc = GetParam();
  const std::vector<size_t> counts = {0, 1, 63, 64, 65, 4097};
  withRanks(mc.nranks, makeConfig(mc.algo), [&](int rank, ncclSignComm_t comm) {
    checkEveryTypeAndOp(rank, comm, mc.nranks, counts, ncclSignZeroPositive, 100, "");
  });
}

std::vector<MatrixCase> matrixCases() {
  std::vector<MatrixCase> v;
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoFieldSum,
                           ncclSignAlgoDirect, ncclSignAlgoTree})
    for (int n = 1; n <= 16; n++) v.push_back({a, n});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Host, SignAllReduceMatrix, ::testing::ValuesIn(matrixCases()), caseName);

// Every dtype and op on inputs of few distinct values (-1, 0, +1: many zeros
// and exact ties), each checked against the reference under the comm's rules.
void checkRulesOnFewValues(int rank, ncclSignComm_t comm, int n, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                           const std::string& what) {
  for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16, ncclInt8}) {
    size_t count = 1000;
    std::vector<Bytes> in(n, Bytes(count * bits::typeSize(dt)));
    std::mt19937 rng(7);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) test::setElem(in[r], dt, i, (float)((int)(rng() % 3) - 1));
    for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
      if (op == ncclSignAverage && dt == ncclInt8) continue;
      Bytes want = test::referenceOutput(in, count, dt, op, zero, tie);
      checkCall(rank, comm, in, want, count, dt, op, rank % 2 == 0, what);
    }
  }
}

// Zero and tie rules (and exact ties for even N) on every algorithm.
TEST(SignAllReduceRules, ZeroAndTieRules) {
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                              ncclSignAlgoFieldSum, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    for (int n : {2, 3, 4, 6}) {
      for (ncclSignZeroRule_t zero : {ncclSignZeroNegative, ncclSignZeroAbstain}) {
        for (ncclSignTieRule_t tie : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
          withRanks(n, makeConfig(algo, zero, tie), [&](int rank, ncclSignComm_t comm) {
            checkRulesOnFewValues(rank, comm, n, zero, tie,
                                  std::string(algoName(algo)) + " N=" + std::to_string(n) +
                                      " zero=" + std::to_string(zero) + " tie=" + std::to_string(tie));
          });
        }
      }
    }
  }
}

// Inputs of few distinct values (-1, 0, +1): many zeros and exact ties, so
// that every rule set gives its own result.
std::vector<Bytes> fewValueInputs(int n, size_t count, ncclDataType_t dt, uint32_t seed) {
  std::vector<Bytes> in(n, Bytes(count * bits::typeSize(dt)));
  std::mt19937 rng(seed);
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) test::setElem(in[r], dt, i, (float)((int)(rng() % 3) - 1));
  return in;
}

ncclSignCallConfig_t callRules(int zero, int tie) {
  ncclSignCallConfig_t c = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
  c.zeroRule = zero;
  c.tieRule = tie;
  return c;
}

// One communicator (made with its own rules: negative zeros, positive ties)
// serves calls that carry other rules, interleaved: each call gets its own
// rules' result, a field left to the comm takes the comm's, and a call
// without a config the comm's. The rule sets give different results on these
// inputs, so a call run by any other rules would fail the comparison.
TEST(SignAllReduceRules, RulesPerCallOnOneCommunicator) {
  struct Case {
    int zero, tie;
    ncclSignZeroRule_t wantZero;
    ncclSignTieRule_t wantTie;
  };
  const Case cases[] = {
      {ncclSignZeroPositive, ncclSignTieZero, ncclSignZeroPositive, ncclSignTieZero},
      {ncclSignZeroAbstain, ncclSignTieNegative, ncclSignZeroAbstain, ncclSignTieNegative},
      {NCCL_SIGN_RULE_OF_COMM, NCCL_SIGN_RULE_OF_COMM, ncclSignZeroNegative, ncclSignTiePositive},
      {ncclSignZeroAbstain, NCCL_SIGN_RULE_OF_COMM, ncclSignZeroAbstain, ncclSignTiePositive},
      {ncclSignZeroPositive, ncclSignTieZero, ncclSignZeroPositive, ncclSignTieZero},
  };
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoDirect,
                              ncclSignAlgoTree}) {
    for (int n : {2, 4}) {
      withRanks(n, makeConfig(algo, ncclSignZeroNegative, ncclSignTiePositive), [&](int rank, ncclSignComm_t comm) {
        const size_t count = 1000;
        uint32_t seed = 31;
        for (int round = 0; round < 2; round++) {
          for (const Case& c : cases) {
            for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
              std::vector<Bytes> in = fewValueInputs(n, count, dt, seed++);
              const std::string what = std::string(algoName(algo)) + " N=" + std::to_string(n) + " rules " +
                                       std::to_string(c.zero) + "/" + std::to_string(c.tie) + " " +
                                       bits::typeName(dt);
              Bytes want = test::referenceOutput(in, count, dt, ncclSignMajority, c.wantZero, c.wantTie);
              // Not the comm's result unless the case asks for the comm's rules.
              Bytes commWants = test::referenceOutput(in, count, dt, ncclSignMajority, ncclSignZeroNegative,
                                                      ncclSignTiePositive);
              ASSERT_EQ(want == commWants, c.wantZero == ncclSignZeroNegative) << what;
              Bytes out = in[rank];
              ncclSignCallConfig_t rules = callRules(c.zero, c.tie);
              ASSERT_EQ(ncclSignHostAllReduceWithConfig(out.data(), out.data(), count, dt, ncclSignMajority, &rules,
                                                        comm),
                        ncclSuccess)
                  << what;
              ASSERT_EQ(test::firstMismatch(out, want), std::string::npos) << what << " rank " << rank;
            }
          }
          // No config: the comm's rules, whatever the calls before carried.
          std::vector<Bytes> in = fewValueInputs(n, count, ncclFloat32, seed++);
          Bytes out = in[rank];
          ASSERT_EQ(ncclSignHostAllReduceWithConfig(out.data(), out.data(), count, ncclFloat32, ncclSignMajority,
                                                    nullptr, comm),
                    ncclSuccess);
          EXPECT_EQ(out, test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroNegative,
                                               ncclSignTiePositive));
        }
      });
    }
  }
}

// A bad call config is refused before anything moves (the comm stays
// usable), with a WARN naming the field; ranks that pass different rules
// fail the call on every rank, naming the rule where they see it.
TEST(SignAllReduceRules, BadOrDisagreeingCallRules) {
  std::vector<ncclResult_t> inits = test::runRanks(
      2, [](int) { return makeConfig(ncclSignAlgoAuto, ncclSignZeroPositive, ncclSignTieZero, 5000); },
      [&](int rank, ncclSignComm_t& comm) {
    float x[4] = {1, -1, 0, 2};
    const char* fn = "ncclSignHostAllReduceWithConfig";
    if (rank == 0) {
      test::WarnCapture warns;
      ncclSignCallConfig_t bad = callRules(ncclSignNumZeroRules, ncclSignTieZero);
      EXPECT_EQ(ncclSignHostAllReduceWithConfig(x, x, 4, ncclFloat32, ncclSignMajority, &bad, comm),
                ncclInvalidArgument);
      EXPECT_EQ(warns.countContaining("'config->zeroRule'"), 1) << fn;
      bad = callRules(ncclSignZeroPositive, -2);
      EXPECT_EQ(ncclSignHostAllReduceWithConfig(x, x, 4, ncclFloat32, ncclSignMajority, &bad, comm),
                ncclInvalidArgument);
      EXPECT_EQ(warns.countContaining("'config->tieRule'"), 1);
      bad = callRules(ncclSignZeroPositive, ncclSignTieZero);
      bad.size = sizeof(bad) + 8;  // a newer header's struct: fields this library cannot honour
      EXPECT_EQ(ncclSignHostAllReduceWithConfig(x, x, 4, ncclFloat32, ncclSignMajority, &bad, comm),
                ncclInvalidArgument);
      EXPECT_EQ(warns.countContaining("'config->size'"), 1);
      bad = callRules(ncclSignZeroPositive, ncclSignTieZero);
      bad.magic = NCCL_SIGN_CONFIG_MAGIC;
      EXPECT_EQ(ncclSignHostAllReduceWithConfig(x, x, 4, ncclFloat32, ncclSignMajority, &bad, comm),
                ncclInvalidArgument);
      EXPECT_EQ(warns.countContaining("'config->magic'"), 1);
    }
    // The comm is still good: a call both ranks make with the same rules.
    ncclSignCallConfig_t same = callRules(ncclSignZeroAbstain, ncclSignTieZero);
    float y[4] = {1, -1, 0, 2};
    ASSERT_EQ(ncclSignHostAllReduceWithConfig(y, y, 4, ncclFloat32, ncclSignMajority, &same, comm), ncclSuccess);
    EXPECT_EQ(y[2], 0.0f);  // both abstain
    // Rank 1 votes by other rules: an error on both ranks, never a result.
    test::WarnCapture warns;
    ncclSignCallConfig_t mine = callRules(rank == 0 ? ncclSignZeroAbstain : ncclSignZeroPositive, ncclSignTieZero);
    float z[4] = {1, -1, 0, 2};
    EXPECT_NE(ncclSignHostAllReduceWithConfig(z, z, 4, ncclFloat32, ncclSignMajority, &mine, comm), ncclSuccess);
    ncclSignCommAbort(comm);
    comm = nullptr;
  });
  for (ncclResult_t r : inits) EXPECT_EQ(r, ncclSuccess);
}

// The hierarchical algorithm with ranks as threads grouped into nodes by a
// host id per rank (config.hostId): nodes x ranks per node in {1..4} x
// {1, 2, 3, 4, 8}, unequal and interleaved nodes; every dtype, op, count,
// in and out of place.
struct Layout {
  std::vector<int> node;  // node of each rank
  std::string name() const {
    std::string s = "nodes_";
    for (int n : node) s += std::to_string(n);
    return s;
  }
};
// gtest prints a parameter in test listings and failures: the name, not
// "24-byte object <...>".
void PrintTo(const Layout& l, std::ostream* os) { *os << l.name(); }

std::vector<Layout> hierLayouts() {
  std::vector<Layout> v;
  auto fromSizes = [](std::vector<int> sizes) {
    Layout l;
    for (size_t n = 0; n < sizes.size(); n++) l.node.insert(l.node.end(), sizes[n], (int)n);
    return l;
  };
  for (int nodes = 1; nodes <= 4; nodes++)
    for (int per : {1, 2, 3, 4, 8})
      if (nodes * per <= 16) v.push_back(fromSizes(std::vector<int>(nodes, per)));
  for (auto sizes : std::vector<std::vector<int>>{{1, 2}, {3, 1, 4}, {2, 3}, {8, 1}, {4, 4, 3}})
    v.push_back(fromSizes(sizes));
  v.push_back(Layout{{0, 1, 2, 0, 1, 2, 0}});  // interleaved
  return v;
}

std::vector<std::string> gHostIds;  // storage for the configs' hostId strings

ncclSignConfig_t hierConfig(const Layout& l, int rank, ncclSignZeroRule_t zero = ncclSignZeroPositive,
                            ncclSignTieRule_t tie = ncclSignTieZero) {
  ncclSignConfig_t c = makeConfig(ncclSignAlgoHierarchical, zero, tie);
  static const char* kIds[] = {"node-a", "node-b", "node-c", "node-d", "node-e"};
  c.hostId = kIds[l.node[rank]];
  return c;
}
// The same nodes, another algorithm (a flat one runs over them too).
ncclSignConfig_t nodesConfig(const Layout& l, int rank, ncclSignAlgo_t algo,
                             ncclSignZeroRule_t zero = ncclSignZeroPositive) {
  ncclSignConfig_t c = hierConfig(l, rank, zero);
  c.algorithm = algo;
  return c;
}

class SignAllReduceHierarchical : public ::testing::TestWithParam<Layout> {};

TEST_P(SignAllReduceHierarchical, EveryRankGetsTheReference) {
  const Layout l = GetParam();
  const int n = (int)l.node.size();
  const std::vector<size_t> counts = {0, 1, 63, 64, 65, 4097, 100003};
  withRanks(
      n, [&](int r) { return hierConfig(l, r); },
      [&](int rank, ncclSignComm_t comm) {
        checkEveryTypeAndOp(rank, comm, n, counts, ncclSignZeroPositive, 300, l.name());
      });
}
INSTANTIATE_TEST_SUITE_P(Host, SignAllReduceHierarchical, ::testing::ValuesIn(hierLayouts()),
                         [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name(); });

// Zero and tie rules on unequal nodes, and auto choosing the hierarchy for a
// large message on 2 nodes of 4 where inter-node links are slow.
TEST(SignAllReduceHierarchicalRules, ZeroAndTieRules) {
  for (const Layout& l : {Layout{{0, 0, 1, 1, 1}}, Layout{{0, 0, 0, 0, 1, 1, 1, 1}}}) {
    const int n = (int)l.node.size();
    for (ncclSignZeroRule_t zero : {ncclSignZeroNegative, ncclSignZeroAbstain}) {
      for (ncclSignTieRule_t tie : {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative}) {
        withRanks(
            n, [&](int r) { return hierConfig(l, r, zero, tie); },
            [&](int rank, ncclSignComm_t comm) {
              checkRulesOnFewValues(rank, comm, n, zero, tie,
                                    l.name() + " zero=" + std::to_string(zero) + " tie=" + std::to_string(tie));
            });
      }
    }
  }
}

// Large counts, with a partial block (one segment each at the default
// SIGNLION_HOST_SEGMENT; SignAllReduceSegments below cuts messages into many).
TEST(SignAllReduceLarge, MillionsOfElements) {
  struct Case {
    ncclSignAlgo_t algo;
    int n;
    size_t count;
  };
  for (Case c : {Case{ncclSignAlgoRing, 5, 1000003}, Case{ncclSignAlgoHalvingDoubling, 6, 1000003},
                 Case{ncclSignAlgoAllGather, 3, 1000003}, Case{ncclSignAlgoRing, 4, (1u << 24) + 7},
                 Case{ncclSignAlgoHalvingDoubling, 3, (1u << 24) + 7}, Case{ncclSignAlgoDirect, 7, 1000003},
                 Case{ncclSignAlgoTree, 6, 1000003}, Case{ncclSignAlgoTree, 13, (1u << 22) + 7}}) {
    std::vector<Bytes> in = test::randomVoteInputs(c.n, c.count, ncclFloat32, 11);
    Bytes want =
        test::referenceOutput(in, c.count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
    withRanks(c.n, makeConfig(c.algo), [&](int rank, ncclSignComm_t comm) {
      checkCall(rank, comm, in, want, c.count, ncclFloat32, ncclSignMajority, false,
                std::string(algoName(c.algo)) + " count " + std::to_string(c.count));
    });
  }
}

// Messages longer than SIGNLION_HOST_SEGMENT run as several whole schedules
// (src/host/sign_allreduce.cc): each segment's call header carries its index,
// the arena is reused from one to the next, the last one is short. 4096
// elements per segment (64 blocks) and counts around its multiples, every
// flat algorithm, odd and even N, both ops, in and out of place.
TEST(SignAllReduceSegments, SeveralSegmentsGetTheReference) {
  setenv("SIGNLION_HOST_SEGMENT", "4096", 1);
  paramResetCache();
  const size_t counts[] = {4095, 4096, 4097, 3 * 4096 + 7, 5 * 4096};
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoDirect,
                              ncclSignAlgoTree}) {
    for (int n : {3, 4, 5}) {
      withRanks(n, makeConfig(algo), [&](int rank, ncclSignComm_t comm) {
        uint32_t seed = 900;
        for (size_t count : counts) {
          std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, seed++);
          for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
            Bytes want = test::referenceOutput(in, count, ncclFloat32, op, ncclSignZeroPositive, ncclSignTieZero);
            for (bool inPlace : {false, true})
              checkCall(rank, comm, in, want, count, ncclFloat32, op, inPlace,
                        std::string(algoName(algo)) + " N=" + std::to_string(n) + " count " + std::to_string(count) +
                            (op == ncclSignAverage ? " average" : " majority") + (inPlace ? " in place" : ""));
          }
        }
      });
    }
  }
  unsetenv("SIGNLION_HOST_SEGMENT");
  paramResetCache();
}

// A segment's votes packed ahead while the segment before it waits on the
// wire (ScheduleExecutor, Segments), then copied instead of packed: rank 0
// starts each call 20 ms late, so the others wait on it with receives posted
// and pack their next segments. Small chunks (256 B: 32-block units) make
// two units per 4096-element segment; with at most one unit packed ahead a
// segment copies its first and packs its second. Ring, halving-doubling and
// hier (nodes of 2 and 3), both zero rules (one and two counters), every
// dtype and op, in and out of place; counts whose second segment is short
// (100 elements: a partial block) or whose last is. The ranks that waited
// must have copied units packed ahead; with SIGNLION_HOST_PACK_AHEAD=0 none
// is packed ahead.
TEST(SignAllReduceSegments, VotesPackedAheadGetTheReference) {
  setenv("SIGNLION_HOST_SEGMENT", "4096", 1);
  setenv("SIGNLION_HOST_CHUNK_BYTES", "256", 1);
  const std::vector<size_t> counts = {4096 + 100, 4 * 4096 + 100, 3 * 4096};
  const Layout twoNodes{{0, 0, 1, 1, 1}};
  struct Variant {
    bool ahead;
    size_t cap;  // units of a segment packed ahead at most
  };
  for (Variant v : {Variant{true, SIZE_MAX}, Variant{true, 1}, Variant{false, SIZE_MAX}}) {
    setenv("SIGNLION_HOST_PACK_AHEAD", v.ahead ? "1" : "0", 1);
    paramResetCache();
    for (ncclSignAlgo_t algo :
         {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoHierarchical, ncclSignAlgoDirect, ncclSignAlgoTree}) {
      for (ncclSignZeroRule_t zero : {ncclSignZeroPositive, ncclSignZeroAbstain}) {
        const int n = 5;
        const std::string what = std::string(algoName(algo)) + " zero=" + std::to_string(zero) +
                                 (v.ahead ? "" : " SIGNLION_HOST_PACK_AHEAD=0") +
                                 (v.cap == 1 ? " one unit ahead" : "");
        withRanks(
            n, [&](int r) { return nodesConfig(twoNodes, r, algo, zero); },
            [&](int rank, ncclSignComm_t comm) {
              host::ScheduleExecutor& x = *comm->executor;
              x.capUnitsPackedAheadForTesting(v.cap);
              checkEveryTypeAndOp(rank, comm, n, counts, zero, 1200, what, [rank] {
                if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
              });
              if (!v.ahead) {
                EXPECT_EQ(x.unitsPackedAhead(), 0u) << what << " rank " << rank;
              } else if (rank != 0) {
                // 42 calls of 2-5 segments each, every one begun with this rank waiting.
                EXPECT_GT(x.unitsCopiedFromAhead(), 0u) << what << " rank " << rank;
              }
              EXPECT_LE(x.unitsCopiedFromAhead(), x.unitsPackedAhead()) << what << " rank " << rank;
            });
      }
    }
  }
  unsetenv("SIGNLION_HOST_PACK_AHEAD");
  unsetenv("SIGNLION_HOST_CHUNK_BYTES");
  unsetenv("SIGNLION_HOST_SEGMENT");
  paramResetCache();
}

// The executor's compute/transfer overlap (src/host/schedule_executor.h: the
// first step's votes packed a chunk at a time while earlier chunks travel,
// adds that wait for the packing of their blocks, the result unpacked range by
// range between transfers) at a grain where a call has many chunks and many
// pieces of work: SIGNLION_HOST_CHUNK_BYTES=256 is 32 blocks per one-plane
// chunk and per piece. Every algorithm, odd and even N, counts around the
// grain, every dtype and op, binary and ternary rules, in and out of place.
class SignAllReduceOverlap : public ::testing::TestWithParam<ncclSignAlgo_t> {
 protected:
  void SetUp() override {
    setenv("SIGNLION_HOST_CHUNK_BYTES", "256", 1);
    paramResetCache();
  }
  void TearDown() override {
    unsetenv("SIGNLION_HOST_CHUNK_BYTES");
    paramResetCache();
  }
};

TEST_P(SignAllReduceOverlap, SmallChunksGetTheReference) {
  const ncclSignAlgo_t algo = GetParam();
  std::vector<Layout> layouts;
  if (algo == ncclSignAlgoHierarchical) {
    layouts = {Layout{{0, 0, 1, 1}}, Layout{{0, 0, 0, 1, 2, 2, 2, 2}}, Layout{{0, 0, 0, 0, 1, 1, 1, 1}}};
  } else {
    for (int n : {1, 2, 3, 4, 5, 8}) layouts.push_back(Layout{std::vector<int>(n, 0)});
  }
  const std::vector<size_t> counts = {0, 1, 65, 2047, 2049, 20003};
  for (const Layout& l : layouts) {
    const int n = (int)l.node.size();
    for (ncclSignZeroRule_t zero : {ncclSignZeroPositive, ncclSignZeroAbstain}) {
      withRanks(
          n, [&](int r) { return nodesConfig(l, r, algo, zero); },
          [&](int rank, ncclSignComm_t comm) {
            checkEveryTypeAndOp(rank, comm, n, counts, zero, 500,
                                std::string(algoName(algo)) + " " + l.name() + " zero=" + std::to_string(zero));
          });
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Host, SignAllReduceOverlap,
                         ::testing::Values(ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                           ncclSignAlgoFieldSum, ncclSignAlgoHierarchical, ncclSignAlgoDirect,
                                           ncclSignAlgoTree),
                         [](const ::testing::TestParamInfo<ncclSignAlgo_t>& info) {
                           return std::string(algoName(info.param));
                         });

// The bytes each rank sends in one call are the schedule's prediction
// (within 1%: the transport adds a header per message).
TEST(SignAllReduceWire, BytesMatchTheSchedule) {
  const size_t count = 1 << 20;  // 4 MiB of fp32 input
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoDirect,
                              ncclSignAlgoTree}) {
    for (int n : {4, 8}) {
      std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 3);
      withRanks(n, makeConfig(algo), [&](int rank, ncclSignComm_t comm) {
        Bytes out(count * 4);
        const double measured = (double)test::bytesSentByOneCall(comm, in[rank].data(), out.data(), count);
        algo::Schedule s;
        ASSERT_EQ(algo::buildSchedule(algo, n, rank, algo::blocksForCount(count), algo::OpSpec{}, &s), ncclSuccess);
        const double predicted = (double)s.bytesSent();
        EXPECT_NEAR(measured, predicted, predicted * 0.01)
            << algoName(algo) << " N=" << n << " rank " << rank << ": " << measured / count * 8 << " bits/elem";
      });
    }
  }
}

// The direct algorithm at the bound: the bytes each rank's transport counts
// in one real call, as bits per element, equal (N-1)/N * (counters +
// result) within 1 % (the transport adds a header per message) at every
// N = 2..16: majority with exact ties (a -1/0/+1 result coded at 1.6 bits for
// even N, 1 plane for odd), with a tie rule (1), and in ternary mode (2 vote
// planes, a coded result), written out here, not taken from the schedule. Bytes sent only:
// a rank's transport may count bytes of a peer's next call as received
// before this rank's call ends (AlgoDirect.WireBitsPerElementAreTheFormula
// checks what the schedules receive).
TEST(SignAllReduceWire, DirectBitsPerElementAreTheFormula) {
  const size_t count = 1 << 20;
  struct Rules {
    ncclSignZeroRule_t zero;
    ncclSignTieRule_t tie;
  };
  for (int n = 2; n <= 16; n++) {
    std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 40 + n);
    for (Rules rules : {Rules{ncclSignZeroPositive, ncclSignTieZero}, Rules{ncclSignZeroPositive, ncclSignTiePositive},
                        Rules{ncclSignZeroAbstain, ncclSignTieZero}}) {
      const bool ternary = rules.zero == ncclSignZeroAbstain;
      const int votePlanes = ternary ? 2 : 1;
      const int resultPlanes = rules.tie != ncclSignTieZero ? 1 : ternary || n % 2 == 0 ? 2 : 1;
      // Two result planes (-1/0/+1) travel coded at 1.6 bits per element.
      const double formula = (n - 1.0) / n * (votePlanes + (resultPlanes == 2 ? 1.6 : 1.0));
      withRanks(n, makeConfig(ncclSignAlgoDirect, rules.zero, rules.tie), [&](int rank, ncclSignComm_t comm) {
        Bytes out(count * 4);
        const double sent = 8.0 * (double)test::bytesSentByOneCall(comm, in[rank].data(), out.data(), count) / count;
        const std::string what = "N=" + std::to_string(n) + " rank " + std::to_string(rank) +
                                 " zero=" + std::to_string(rules.zero) + " tie=" + std::to_string(rules.tie);
        EXPECT_NEAR(sent, formula, 0.01 * formula) << what;
        if (rank == 0)
          printf("direct N=%d zero=%d tie=%d: rank 0 sent %.4f bits per element (formula %.4f)\n", n, rules.zero,
                 rules.tie, sent, formula);
      });
    }
  }
}

// The tree's bytes in one real call, as bits per element, equal its formula
// within 1 % at every N = 2..16 and on every rank (AlgoTree's in the unit
// tests): in each tree (half the message) a rank sends counters *
// width(subtree ranks) to its parent and q to each child, q = 1.6 for a coded
// -1/0/+1 result, else 1; with exact ties, a tie rule, and in ternary mode.
TEST(SignAllReduceWire, TreeBitsPerElementAreTheFormula) {
  const size_t count = 1 << 20;
  struct Rules {
    ncclSignZeroRule_t zero;
    ncclSignTieRule_t tie;
  };
  for (int n = 2; n <= 16; n++) {
    std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 60 + n);
    for (Rules rules : {Rules{ncclSignZeroPositive, ncclSignTieZero}, Rules{ncclSignZeroPositive, ncclSignTiePositive},
                        Rules{ncclSignZeroAbstain, ncclSignTieZero}}) {
      const bool ternary = rules.zero == ncclSignZeroAbstain;
      const int votePlanes = ternary ? 2 : 1;
      const int resultPlanes = rules.tie != ncclSignTieZero ? 1 : ternary || n % 2 == 0 ? 2 : 1;
      const double q = resultPlanes == 2 ? 1.6 : 1.0;
      withRanks(n, makeConfig(ncclSignAlgoTree, rules.zero, rules.tie), [&](int rank, ncclSignComm_t comm) {
        double formula = 0;
        for (int t = 0; t < algo::kTreeCount; t++) {
          const algo::TreeNode me = algo::treeNode(n, t, rank);
          if (me.parent >= 0) formula += 0.5 * votePlanes * std::floor(std::log2(me.size) + 1);
          formula += 0.5 * q * me.nchildren;
        }
        Bytes out(count * 4);
        const double sent = 8.0 * (double)test::bytesSentByOneCall(comm, in[rank].data(), out.data(), count) / count;
        const std::string what = "N=" + std::to_string(n) + " rank " + std::to_string(rank) +
                                 " zero=" + std::to_string(rules.zero) + " tie=" + std::to_string(rules.tie);
        EXPECT_NEAR(sent, formula, 0.01 * formula) << what;
      });
    }
  }
}

// SIGNLION_RESULT_CODING=0 on real calls: results travel as their 2 planes
// and every rank still gets the reference (exact ties at N = 4, ternary at
// N = 3, in and out of place); direct's wire bits are then (N-1)/N * (1 + 2)
// at N = 4 (2.25, against 1.95 coded), within 1 %.
TEST(SignAllReduceWire, ResultCodingOffSendsPlanes) {
  setenv("SIGNLION_RESULT_CODING", "0", 1);
  paramResetCache();
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoDirect, ncclSignAlgoTree})
    for (int n : {3, 4}) {
      const ncclSignZeroRule_t zero = n == 3 ? ncclSignZeroAbstain : ncclSignZeroPositive;
      withRanks(n, makeConfig(algo, zero, ncclSignTieZero), [&](int rank, ncclSignComm_t comm) {
        checkRulesOnFewValues(rank, comm, n, zero, ncclSignTieZero,
                              std::string(algoName(algo)) + " N=" + std::to_string(n) + " SIGNLION_RESULT_CODING=0");
      });
    }
  const size_t count = 1 << 20;
  std::vector<Bytes> in = test::randomVoteInputs(4, count, ncclFloat32, 77);
  withRanks(4, makeConfig(ncclSignAlgoDirect), [&](int rank, ncclSignComm_t comm) {
    Bytes out(count * 4);
    const double sent = 8.0 * (double)test::bytesSentByOneCall(comm, in[rank].data(), out.data(), count) / count;
    EXPECT_NEAR(sent, 2.25, 0.01 * 2.25) << "rank " << rank;
  });
  unsetenv("SIGNLION_RESULT_CODING");
  paramResetCache();
}

// On 2 nodes of 4 (host ids per thread), ncclSignCommGetInterNodeWireBytes
// counts the bytes the schedule sends to the other node's ranks, and the rest
// of ncclSignCommGetWireBytes is what it sends inside the node (within 1%:
// headers).
TEST(SignAllReduceWire, InterNodeBytesMatchTheSchedule) {
  const size_t count = 1 << 20;
  const Layout l{{0, 0, 0, 0, 1, 1, 1, 1}};
  const int n = (int)l.node.size();
  algo::Topology topo;
  topo.node = l.node;
  std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 5);
  for (ncclSignAlgo_t algo : {ncclSignAlgoHierarchical, ncclSignAlgoRing, ncclSignAlgoHalvingDoubling}) {
    withRanks(
        n,
        [&](int r) { return nodesConfig(l, r, algo); },
        [&](int rank, ncclSignComm_t comm) {
          Bytes out(count * 4);
          uint64_t s0, r0, s1, r1, all0, all1, unused;
          int node = -1;
          ASSERT_EQ(ncclSignCommGetInterNodeWireBytes(comm, &node, &s0, &r0), ncclSuccess);
          ASSERT_EQ(ncclSignCommGetWireBytes(comm, &all0, &unused), ncclSuccess);
          ASSERT_EQ(ncclSignHostAllReduce(in[rank].data(), out.data(), count, ncclFloat32, ncclSignMajority, comm),
                    ncclSuccess);
          ASSERT_EQ(ncclSignCommGetInterNodeWireBytes(comm, &node, &s1, &r1), ncclSuccess);
          ASSERT_EQ(ncclSignCommGetWireBytes(comm, &all1, &unused), ncclSuccess);
          EXPECT_EQ(node, l.node[rank]);
          algo::Schedule s;
          ASSERT_EQ(algo::buildSchedule(algo, n, rank, algo::blocksForCount(count), algo::OpSpec{}, &s, &topo),
                    ncclSuccess);
          double inter = 0, intra = 0;
          for (const algo::Step& st : s.steps)
            for (const algo::Send& m : st.sends) (topo.sameNode(rank, m.peer) ? intra : inter) += (double)m.bytes();
          double measuredInter = (double)(s1 - s0), measuredIntra = (double)(all1 - all0) - measuredInter;
          EXPECT_NEAR(measuredInter, inter, inter * 0.01 + 1) << algoName(algo) << " rank " << rank;
          EXPECT_NEAR(measuredIntra, intra, intra * 0.01 + 1) << algoName(algo) << " rank " << rank;
        });
  }
  int node = 0;
  uint64_t s = 0, r = 0;
  EXPECT_EQ(ncclSignCommGetInterNodeWireBytes(nullptr, &node, &s, &r), ncclInvalidArgument);
}

// The baseline: a ring sum all-reduce, checked against a sum in the same order.
TEST(SumAllReduce, RingSumMatchesSerialSum) {
  for (int n : {1, 2, 3, 5, 8}) {
    for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
      for (size_t count : {0, 1, 7, 1000, 100003}) {
        // Small integers: every order of summation gives the same exact sum.
        std::vector<Bytes> in(n, Bytes(count * bits::typeSize(dt)));
        std::mt19937 rng(n * 31 + (int)count);
        Bytes want(count * bits::typeSize(dt));
        for (size_t i = 0; i < count; i++) {
          float sum = 0;
          for (int r = 0; r < n; r++) {
            float v = (float)((int)(rng() % 9) - 4);
            sum += v;
            test::setElem(in[r], dt, i, v);
          }
          test::setElem(want, dt, i, sum);
        }
        withRanks(n, makeConfig(ncclSignAlgoAuto), [&](int rank, ncclSignComm_t comm) {
          Bytes out(count * bits::typeSize(dt));
          ASSERT_EQ(ncclSignHostSumAllReduce(in[rank].data(), out.data(), count, dt, comm), ncclSuccess);
          EXPECT_EQ(test::firstMismatch(out, want), std::string::npos) << "N=" << n << " count " << count;
        });
      }
    }
  }
}

// ---- bad input ----------------------------------------------------------------

TEST(SignAllReduceArgs, BadArgumentsAreRejected) {
  withRanks(1, makeConfig(ncclSignAlgoAuto), [&](int, ncclSignComm_t comm) {
    float x[4] = {1, -1, 0, 2}, y[4];
    EXPECT_EQ(ncclSignHostAllReduce(nullptr, y, 4, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, nullptr, 4, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, y, 4, ncclFloat64, ncclSignMajority, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, y, 4, ncclInt8, ncclSignAverage, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, y, 4, ncclFloat32, (ncclSignOp_t)7, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, y, SIZE_MAX, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(x, y, 4, ncclFloat32, ncclSignMajority, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostSumAllReduce(x, y, 4, ncclInt8, comm), ncclInvalidArgument);
    EXPECT_EQ(ncclSignHostAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSignMajority, comm), ncclSuccess);
    int v;
    EXPECT_EQ(ncclSignCommCount(comm, &v), ncclSuccess);
    EXPECT_EQ(v, 1);
    EXPECT_EQ(ncclSignCommUserRank(comm, &v), ncclSuccess);
    EXPECT_EQ(v, 0);
    EXPECT_EQ(ncclSignCommCount(comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclSignBarrier(comm), ncclSuccess);
  });
  ncclSignComm_t comm;
  ncclSignUniqueId id;
  ASSERT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclSignCommInitRank(nullptr, 1, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommInitRank(&comm, 0, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommInitRank(&comm, 2, id, 2, nullptr), ncclInvalidArgument);
  ncclSignUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  EXPECT_EQ(ncclSignCommInitRank(&comm, 1, zero, 0, nullptr), ncclInvalidArgument);
}

// Lion Cub's fixed 4- and 8-bit fields (SIGNLION_FIELD_BITS), and 4-bit
// fields refused when N votes do not fit in them.
TEST(SignAllReduceFieldSum, FixedFieldWidths) {
  struct Case {
    const char* bits;
    int n;
  };
  for (Case c : {Case{"4", 5}, Case{"4", 15}, Case{"8", 6}}) {
    setenv("SIGNLION_FIELD_BITS", c.bits, 1);
    paramResetCache();
    const size_t count = 20000;
    std::vector<Bytes> in = test::randomVoteInputs(c.n, count, ncclBfloat16, 21);
    for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
      Bytes want = test::referenceOutput(in, count, ncclBfloat16, op, ncclSignZeroPositive, ncclSignTieZero);
      withRanks(c.n, makeConfig(ncclSignAlgoFieldSum), [&](int rank, ncclSignComm_t comm) {
        checkCall(rank, comm, in, want, count, ncclBfloat16, op, false,
                  std::string(c.bits) + "-bit fields N=" + std::to_string(c.n));
      });
    }
  }
  setenv("SIGNLION_FIELD_BITS", "4", 1);
  paramResetCache();
  withRanks(16, makeConfig(ncclSignAlgoFieldSum), [&](int, ncclSignComm_t comm) {
    float x = 1, y;
    EXPECT_EQ(ncclSignHostAllReduce(&x, &y, 1, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
  });
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
}

// Fields too narrow for N under Auto: field-sum is left out, every call runs
// another algorithm and gets the reference, and the WARN that says so comes
// once, not once per call, size or rank. Forced (by the config or by
// SIGNLION_ALGO), field-sum is an invalid argument on every call, each with a
// WARN naming the variable.
TEST(SignAllReduceFieldSum, AutoLeavesOutFieldsTooNarrowForN) {
  const int n = 5;  // 5 votes need 3-bit fields
  setenv("SIGNLION_FIELD_BITS", "2", 1);
  paramResetCache();
  {
    test::WarnCapture warns;
    // Two communicators, each calling with sizes that miss its schedule
    // cache once each.
    for (int comms = 0; comms < 2; comms++) {
      withRanks(n, makeConfig(ncclSignAlgoAuto), [&](int rank, ncclSignComm_t comm) {
        uint32_t seed = 50;
        for (size_t count : {1, 1000, 70001}) {
          for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
            std::vector<Bytes> in = test::randomVoteInputs(n, count, dt, seed++);
            for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
              Bytes want = test::referenceOutput(in, count, dt, op, ncclSignZeroPositive, ncclSignTieZero);
              checkCall(rank, comm, in, want, count, dt, op, rank % 2 == 1,
                        "auto, 2-bit fields, count " + std::to_string(count) + " " + bits::typeName(dt) +
                            (op == ncclSignAverage ? " avg" : " maj"));
            }
          }
        }
      });
    }
    // "SIGNLION_FIELD_BITS=2: ...; auto leaves fieldsum out on 5 ranks"
    EXPECT_EQ(warns.countContaining("SIGNLION_FIELD_BITS"), 1);
  }
  for (bool byEnv : {false, true}) {
    if (byEnv) setenv("SIGNLION_ALGO", "fieldsum", 1);
    paramResetCache();
    test::WarnCapture warns;
    withRanks(n, makeConfig(byEnv ? ncclSignAlgoAuto : ncclSignAlgoFieldSum), [&](int, ncclSignComm_t comm) {
      float x[100] = {1}, y[100];
      for (int call = 0; call < 2; call++)
        EXPECT_EQ(ncclSignHostAllReduce(x, y, 100, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
    });
    EXPECT_EQ(warns.countContaining("'SIGNLION_FIELD_BITS'"), 2 * n)
        << (byEnv ? "SIGNLION_ALGO=fieldsum" : "config->algorithm");
  }
  unsetenv("SIGNLION_ALGO");
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
}

// The links can run on any NCCL net plugin: here ours again, but loaded by
// path with dlopen as NCCL would, and driven only through its ncclNet_v11.
TEST(SignAllReduceNetPlugin, PluginLoadedByPath) {
  const char* path = SIGNLION_TEST_PLUGIN_PATH;  // the build's libnccl-net-signlion.so
  ncclSignConfig_t cfg = makeConfig(ncclSignAlgoRing);
  cfg.netPlugin = path;
  const size_t count = 10000;
  std::vector<Bytes> in = test::randomVoteInputs(3, count, ncclFloat32, 9);
  Bytes want = test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
  withRanks(3, cfg, [&](int rank, ncclSignComm_t comm) {
    checkCall(rank, comm, in, want, count, ncclFloat32, ncclSignMajority, false, "plugin by path");
  });
  ncclSignUniqueId id;
  ASSERT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  cfg.netPlugin = "no-such-plugin";  // libnccl-net-no-such-plugin.so
  ncclSignComm_t comm;
  EXPECT_EQ(ncclSignCommInitRank(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
}

// What nccl_sign.h says of config.netPlugin and ncclSignCommGetWireBytes:
// "" and "signlion" are the built-in transport (its bytes counted), while
// the same transport's library given by path is a plugin like any other
// (counters read 0).
TEST(SignAllReduceNetPlugin, SignlionNameIsTheBuiltInTransport) {
  const size_t count = 1000;
  std::vector<Bytes> in = test::randomVoteInputs(2, count, ncclFloat32, 13);
  Bytes want = test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
  for (const char* plugin : {"", "signlion", SIGNLION_TEST_PLUGIN_PATH}) {
    const bool builtIn = strcmp(plugin, SIGNLION_TEST_PLUGIN_PATH) != 0;
    ncclSignConfig_t cfg = makeConfig(ncclSignAlgoRing);
    cfg.netPlugin = plugin;
    withRanks(2, cfg, [&](int rank, ncclSignComm_t comm) {
      checkCall(rank, comm, in, want, count, ncclFloat32, ncclSignMajority, false, std::string("plugin ") + plugin);
      uint64_t sent = 0, recvd = 0;
      ASSERT_EQ(ncclSignCommGetWireBytes(comm, &sent, &recvd), ncclSuccess);
      if (builtIn) {
        EXPECT_GT(sent, 0u) << "netPlugin \"" << plugin << "\"";
        EXPECT_GT(recvd, 0u) << "netPlugin \"" << plugin << "\"";
      } else {
        EXPECT_EQ(sent, 0u) << plugin;
        EXPECT_EQ(recvd, 0u) << plugin;
      }
    });
  }
}

// SIGNLION_NET_PLUGIN picks the plugin when the config names none (how the
// multirank suite runs unchanged over the UCX transport); the config's
// netPlugin still wins over it.
TEST(SignAllReduceNetPlugin, EnvironmentNamesThePluginWhenTheConfigDoesNot) {
  const char* before = getenv("SIGNLION_NET_PLUGIN");
  std::string saved = before != nullptr ? before : "";
  setenv("SIGNLION_NET_PLUGIN", "no-such-plugin", 1);
  ncclSignUniqueId id;
  ASSERT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  ncclSignConfig_t cfg = makeConfig(ncclSignAlgoRing);
  ncclSignComm_t comm = nullptr;
  test::WarnCapture warns;
  EXPECT_EQ(ncclSignCommInitRank(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
  EXPECT_EQ(warns.countContaining("SIGNLION_NET_PLUGIN"), 1);
  cfg.netPlugin = SIGNLION_TEST_PLUGIN_PATH;  // the config wins over the environment
  const size_t count = 1000;
  std::vector<Bytes> in = test::randomVoteInputs(2, count, ncclFloat32, 5);
  Bytes want = test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
  withRanks(2, cfg, [&](int rank, ncclSignComm_t c) {
    checkCall(rank, c, in, want, count, ncclFloat32, ncclSignMajority, false, "config over environment");
  });
  setenv("SIGNLION_NET_PLUGIN", SIGNLION_TEST_PLUGIN_PATH, 1);
  cfg.netPlugin = nullptr;
  withRanks(2, cfg, [&](int rank, ncclSignComm_t c) {
    checkCall(rank, c, in, want, count, ncclFloat32, ncclSignMajority, false, "plugin from the environment");
  });
  if (before != nullptr)
    setenv("SIGNLION_NET_PLUGIN", saved.c_str(), 1);
  else
    unsetenv("SIGNLION_NET_PLUGIN");
}

// Ranks as threads that load the plugin at the same moment, again and again
// (the library is unloaded between rounds, when the last comm goes): loading
// is once-only under signlion's own lock, so the plugin's static
// initialisers are ordered before every thread's use of its ncclNet struct
// (under ThreadSanitizer this raced: the loader's lock is invisible to it).
TEST(SignAllReduceNetPlugin, ThreadsLoadThePluginAtOnce) {
  ncclSignConfig_t cfg = makeConfig(ncclSignAlgoRing);
  cfg.netPlugin = SIGNLION_TEST_PLUGIN_PATH;
  const int n = 8;
  const size_t count = 100;
  std::vector<Bytes> in = test::randomVoteInputs(n, count, ncclFloat32, 11);
  Bytes want = test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
  for (int round = 0; round < 4; round++) {
    withRanks(n, cfg, [&](int rank, ncclSignComm_t comm) {
      checkCall(rank, comm, in, want, count, ncclFloat32, ncclSignMajority, false, "round " + std::to_string(round));
    });
  }
}

// ---- ranks as processes, and ranks that fail ------------------------------------

// Forks nranks children, then makes `nids` unique ids (whose rendezvous
// threads run in this process) and sends them to every child through a pipe:
// forking before any thread exists means no child inherits a lock that a
// thread held. Each child runs child(rank, ids) and exits with its status;
// parent(pids), when given, runs here once the ids are out (the ranks are
// running); returns the exit codes (or 128 + signal).
std::vector<int> forkRanks(int nranks, int nids,
                           const std::function<int(int, const std::vector<ncclSignUniqueId>&)>& child,
                           const std::function<void(const std::vector<pid_t>&)>& parent = nullptr) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < nranks; r++) {
    int fds[2];
    if (pipe(fds) != 0) ADD_FAILURE() << "pipe";
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      std::vector<ncclSignUniqueId> ids(nids);
      size_t want = sizeof(ncclSignUniqueId) * nids, got = 0;
      while (got < want) {
        ssize_t k = read(fds[0], reinterpret_cast<char*>(ids.data()) + got, want - got);
        if (k <= 0) _exit(90);  // the parent failed to make the ids
        got += (size_t)k;
      }
      _exit(child(r, ids));
    }
    close(fds[0]);
    pids.push_back(pid);
    pipes.push_back(fds[1]);
  }
  std::vector<ncclSignUniqueId> ids(nids);
  for (auto& id : ids) EXPECT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  for (int fd : pipes) {
    ssize_t k = write(fd, ids.data(), sizeof(ncclSignUniqueId) * nids);
    EXPECT_EQ(k, (ssize_t)(sizeof(ncclSignUniqueId) * nids));
    close(fd);
  }
  if (parent) parent(pids);
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

TEST(SignAllReduceProcesses, SeparateProcessesOnLoopback) {
  const int n = 4;
  const size_t count = 100003;
  std::vector<int> codes = forkRanks(n, 1, [&](int rank, const std::vector<ncclSignUniqueId>& ids) {
    ncclSignConfig_t cfg = makeConfig(ncclSignAlgoAuto);
    ncclSignComm_t comm;
    if (ncclSignCommInitRank(&comm, n, ids[0], rank, &cfg) != ncclSuccess) return 2;
    for (ncclDataType_t dt : kTypes) {
      std::vector<Bytes> in = test::randomVoteInputs(n, count, dt, 5);
      Bytes want = test::referenceOutput(in, count, dt, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero);
      Bytes out(count * bits::typeSize(dt));
      if (ncclSignHostAllReduce(in[rank].data(), out.data(), count, dt, ncclSignMajority, comm) != ncclSuccess)
        return 3;
      if (test::firstMismatch(out, want) != std::string::npos) return 4;
    }
    return ncclSignCommDestroy(comm) == ncclSuccess ? 0 : 5;
  });
  for (int r = 0; r < n; r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// A rank that dies (or stalls) mid-run: the others return an error within the
// timeout, abort, and can make a new communicator.
void survivorsSeeAnError(bool kill) {
  const int n = 3, timeoutMs = 2000;
  std::vector<int> codes = forkRanks(n, 2, [&](int rank, const std::vector<ncclSignUniqueId>& ids) {
    ncclSignConfig_t cfg = makeConfig(ncclSignAlgoRing, ncclSignZeroPositive, ncclSignTieZero, timeoutMs);
    ncclSignComm_t comm;
    if (ncclSignCommInitRank(&comm, n, ids[0], rank, &cfg) != ncclSuccess) return 2;
    std::vector<float> x(1 << 20, 1.0f), y(x.size());
    if (rank == n - 1) {
      if (kill) _exit(9);               // gone without a word
      sleep(2 * timeoutMs / 1000 + 2);  // stalled well past everyone's timeout
      _exit(9);
    }
    auto t0 = std::chrono::steady_clock::now();
    ncclResult_t res = ncclSignHostAllReduce(x.data(), y.data(), x.size(), ncclFloat32, ncclSignMajority, comm);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (res == ncclSuccess) return 3;
    if (sec > 2.0 * timeoutMs / 1000 + 1) return 4;  // bounded by the timeout (plus slack for a loaded machine)
    ncclSignCommAbort(comm);
    // The survivors make a fresh communicator and it works.
    ncclSignComm_t again;
    if (ncclSignCommInitRank(&again, n - 1, ids[1], rank, &cfg) != ncclSuccess) return 5;
    if (ncclSignHostAllReduce(x.data(), y.data(), x.size(), ncclFloat32, ncclSignMajority, again) != ncclSuccess)
      return 6;
    if (y[0] != 1.0f) return 7;
    ncclSignCommDestroy(again);
    return 0;
  });
  for (int r = 0; r < n - 1; r++) EXPECT_EQ(codes[r], 0) << "survivor rank " << r;
}

TEST(SignAllReduceFailures, KilledRankIsAnErrorNotAHang) { survivorsSeeAnError(true); }
TEST(SignAllReduceFailures, StalledRankIsAnErrorNotAHang) { survivorsSeeAnError(false); }

// A rank frozen mid-run by SIGSTOP (its process keeps its sockets and sends
// nothing, heartbeats included): every other rank's call fails, and its
// abort returns, within the timeout plus kPropagationMs of the signal. A
// survivor may be waiting on the frozen rank itself (its own timeout) or on
// another survivor that is (that one's abort must reach it at once: a
// receive from it fails, and so do sends to it, which an orderly close would
// have completed undelivered, restarting the wait). The abort of a rank whose
// peer is frozen must not wait for that peer either. Several rounds, each a
// fresh set of processes frozen at another moment of the calls.
void frozenRankSeenWithinTheTimeout(ncclSignAlgo_t algo) {
  const int n = 3, victim = 1, timeoutMs = 2000, rounds = 3;
  // Propagation (an abort reaching the ranks that wait on the aborting one)
  // and a loaded machine's scheduling; the timeout itself is the library's.
  const int64_t kPropagationMs = 1000;
  struct Shared {
    std::atomic<int64_t> stopNs;        // steady clock when the victim was stopped (0: not yet)
    std::atomic<int> calls[3];          // calls completed per rank
    std::atomic<int64_t> seenNs[3];     // steady clock when the rank's failed call and abort returned
  };
  auto nowNs = [] {
    return (int64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (int round = 0; round < rounds; round++) {
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    Shared* sh = new (mem) Shared();
    sh->stopNs = 0;
    for (int r = 0; r < n; r++) sh->calls[r] = 0, sh->seenNs[r] = 0;
    std::vector<int> codes = forkRanks(
        n, 1,
        [&](int rank, const std::vector<ncclSignUniqueId>& ids) {
          ncclSignConfig_t cfg = makeConfig(algo, ncclSignZeroPositive, ncclSignTieZero, timeoutMs);
          ncclSignComm_t comm;
          if (ncclSignCommInitRank(&comm, n, ids[0], rank, &cfg) != ncclSuccess) return 2;
          // Large enough that a call spans many messages (chunks), so the stop
          // lands inside one as often as between two.
          std::vector<float> x(1 << 18), y(x.size());
          for (size_t i = 0; i < x.size(); i++) x[i] = (i + rank) % 3 ? 1.0f : -1.0f;
          const int64_t end = nowNs() + 60 * 1000000000LL;  // bounded in time as in count
          for (int call = 0; call < 100000 && nowNs() < end; call++) {
            ncclResult_t res = ncclSignHostAllReduce(x.data(), y.data(), x.size(), ncclFloat32, ncclSignMajority, comm);
            if (res == ncclSuccess) {
              sh->calls[rank]++;
              continue;
            }
            if (sh->stopNs.load() == 0) return 3;  // failed before anyone froze
            ncclSignCommAbort(comm);  // as DistributedLion does: the peers still waiting on us fail now
            sh->seenNs[rank] = nowNs();
            return 0;
          }
          return 4;  // no failure: the frozen rank went unnoticed
        },
        [&](const std::vector<pid_t>& pids) {
          // Stop the victim once every rank is well into its calls, at a
          // moment that differs per round.
          const int64_t deadline = nowNs() + 60 * 1000000000LL;
          auto least = [&] { return std::min({sh->calls[0].load(), sh->calls[1].load(), sh->calls[2].load()}); };
          while (least() < 5 + 3 * round && nowNs() < deadline) usleep(1000);
          usleep(1000 * (round * 7 % 10));
          sh->stopNs = nowNs();
          kill(pids[victim], SIGSTOP);
          // The survivors report, or fail the test by their bound's end.
          const int64_t until = sh->stopNs + (timeoutMs + kPropagationMs + 20000) * 1000000LL;
          while ((sh->seenNs[0] == 0 || sh->seenNs[2] == 0) && nowNs() < until) usleep(10000);
          kill(pids[victim], SIGKILL);
          for (int r = 0; r < n; r++)
            if (r != victim && sh->seenNs[r] == 0) kill(pids[r], SIGKILL);
        });
    EXPECT_EQ(codes[victim], 128 + SIGKILL) << "round " << round;
    for (int r = 0; r < n; r++) {
      if (r == victim) continue;
      EXPECT_EQ(codes[r], 0) << "round " << round << ", rank " << r << " (2: init, 3: failed early, 4: no failure)";
      if (sh->seenNs[r] == 0) continue;
      const double ms = (sh->seenNs[r] - sh->stopNs) / 1e6;
      // Not before: a frozen peer is told from a slow one only by the timeout.
      EXPECT_GE(ms, timeoutMs / 2) << "round " << round << ", rank " << r;
      EXPECT_LE(ms, timeoutMs + kPropagationMs)
          << "round " << round << ", rank " << r << ": the failure came " << ms << " ms after the stop";
      printf("round %d: rank %d failed and aborted %.0f ms after the stop (timeout %d ms)\n", round, r, ms, timeoutMs);
    }
    munmap(mem, sizeof(Shared));
  }
}

TEST(SignAllReduceFailures, FrozenRankSeenWithinTheTimeoutRing) { frozenRankSeenWithinTheTimeout(ncclSignAlgoRing); }
TEST(SignAllReduceFailures, FrozenRankSeenWithinTheTimeoutAuto) { frozenRankSeenWithinTheTimeout(ncclSignAlgoAuto); }

}  // namespace
}  // namespace signlion

int main(int argc, char** argv) {
  // Tests only ever talk over loopback.
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  // 16 ranks in one process hold a few thousand sockets.
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
