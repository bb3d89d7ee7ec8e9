// Every rank agrees or every rank gets an error: ranks that pass different
// arguments to one call (count, datatype, op), or different rules at init,
// fail on every rank within the timeout, never with a result; a failed call
// leaves the communicator failed (sticky) so its leftovers are never read;
// counts whose bytes pass PTRDIFF_MAX are argument errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/param.h"
#include "common/ranks.h"
#include "common/warn_capture.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::runRanks;

constexpr int kTimeoutMs = 3000;  // bounds every wait of these calls
const ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                 ncclSignAlgoFieldSum, ncclSignAlgoDirect,  ncclSignAlgoTree};

ncclSignConfig_t makeConfig(ncclSignAlgo_t algo) {
  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.algorithm = algo;
  c.timeoutMs = kTimeoutMs;
  return c;
}

// What one rank passes to the call under test.
struct Args {
  size_t count = 1000;
  ncclDataType_t dt = ncclFloat32;
  ncclSignOp_t op = ncclSignMajority;
};

enum class Mismatch { kCount, kDatatype, kOp, kCountZero };
const char* mismatchName(Mismatch m) {
  switch (m) {
    case Mismatch::kCount:
      return "count";
    case Mismatch::kDatatype:
      return "datatype";
    case Mismatch::kOp:
      return "op";
    case Mismatch::kCountZero:
      return "count0";
  }
  return "?";
}

// The cases: the last rank differs from the others.
Args argsFor(Mismatch m, int rank, int n) {
  Args a;
  const bool odd = rank == n - 1;
  switch (m) {
    case Mismatch::kCount:
      a.count = odd ? 999 : 1000;
      break;
    case Mismatch::kDatatype:
      a.count = 100;
      a.dt = odd ? ncclFloat16 : ncclFloat32;
      break;
    case Mismatch::kOp:
      a.op = odd ? ncclSignAverage : ncclSignMajority;
      break;
    case Mismatch::kCountZero:
      a.count = odd ? 0 : 64;
      break;
  }
  return a;
}

// The WARN of a rank that sees the difference: the field and both values
// (whichever side saw it: the odd rank's neighbours, or the odd rank itself).
struct Expected {
  const char* field;
  const char* odd;
  const char* others;
};
Expected expectedWarn(Mismatch m) {
  switch (m) {
    case Mismatch::kCount:
      return {"count", "999", "1000"};
    case Mismatch::kDatatype:
      return {"datatype", "half", "float"};
    case Mismatch::kOp:
      return {"op", "average", "majority"};
    case Mismatch::kCountZero:
      return {"count", "0", "64"};
  }
  return {"?", "?", "?"};
}

// "rank A passed <field> <x>, rank B passed <y>" with {x, y} the two values.
bool namesBoth(const std::vector<std::string>& lines, const Expected& e, int oddRank) {
  const std::string odd = std::to_string(oddRank);
  for (const std::string& l : lines) {
    std::string f = std::string(" passed ") + e.field + " ";
    if (l.find("rank " + odd + f + e.odd + ", rank ") != std::string::npos &&
        l.find(std::string(" passed ") + e.others + ":") != std::string::npos)
      return true;
    if (l.find(f + e.others + ", rank " + odd + " passed " + e.odd + ":") != std::string::npos) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

struct MismatchCase {
  Mismatch what;
  ncclSignAlgo_t algo;
  int nranks;
};

std::string caseName(const ::testing::TestParamInfo<MismatchCase>& info) {
  return std::string(mismatchName(info.param.what)) + "_" + algoName(info.param.algo) + "_N" +
         std::to_string(info.param.nranks);
}

class CallMismatch : public ::testing::TestWithParam<MismatchCase> {};

// One call where the last rank passes something else: an error on every
// rank, each within a few timeouts (a rank that sees the difference at once,
// the others when the failed ranks go silent), and a WARN naming the field
// and both values. The comm keeps the error.
TEST_P(CallMismatch, EveryRankFailsNoneSucceeds) {
  const MismatchCase mc = GetParam();
  const int n = mc.nranks;
  std::vector<ncclResult_t> res(n, ncclSuccess), async(n, ncclSuccess);
  std::vector<double> seconds(n, 0);
  test::WarnCapture warns;
  std::vector<ncclResult_t> init = runRanks(
      n, [&](int) { return makeConfig(mc.algo); },
      [&](int rank, ncclSignComm_t comm) {
        Args a = argsFor(mc.what, rank, n);
        std::vector<float> in(1000, rank % 2 ? 1.0f : -1.0f), out(1000, 0.0f);
        auto t0 = std::chrono::steady_clock::now();
        res[rank] = ncclSignHostAllReduce(in.data(), out.data(), a.count, a.dt, a.op, comm);
        seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(ncclSignCommGetAsyncError(comm, &async[rank]), ncclSuccess);
      });
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(init[r], ncclSuccess) << "rank " << r;
    EXPECT_NE(res[r], ncclSuccess) << "rank " << r << " returned success from a call the ranks disagree on";
    EXPECT_EQ(async[r], res[r]) << "rank " << r << ": the comm does not keep the call's error";
    // A bound on the wait, not a speed check: every wait is bounded by the
    // timeout, and an error travels at most a few of them.
    EXPECT_LT(seconds[r], 4.0 * kTimeoutMs / 1000 + 5) << "rank " << r;
  }
  int invalidUsage = 0;
  for (ncclResult_t r : res) invalidUsage += r == ncclInvalidUsage;
  EXPECT_GE(invalidUsage, 1) << "no rank named the disagreement";
  EXPECT_TRUE(namesBoth(warns.lines(), expectedWarn(mc.what), n - 1))
      << "no WARN naming " << expectedWarn(mc.what).field << " and both values; WARNs:\n"
      << joined(warns.lines());
}

std::vector<MismatchCase> mismatchCases() {
  std::vector<MismatchCase> v;
  for (Mismatch m : {Mismatch::kCount, Mismatch::kDatatype, Mismatch::kOp, Mismatch::kCountZero})
    for (ncclSignAlgo_t a : kAlgos)
      for (int n : {2, 3, 4, 8}) v.push_back({m, a, n});
  return v;
}
INSTANTIATE_TEST_SUITE_P(Host, CallMismatch, ::testing::ValuesIn(mismatchCases()), caseName);

// The header from each peer is verified before anything received from it is
// used, also when the plugin completes a peer's later messages before its
// first (the one with the header): tests/multirank/late_first_net.cc reports
// every comm's first receive only after the later ones have come. The last
// rank passes another datatype of the same width in blocks, so every message
// has the size the others expect and only the header tells. Small chunks, so
// a step has many messages from one peer and the later ones could run a
// whole call on their own: no rank may write any output before it fails
// (nothing of a call that disagrees is added, forwarded or written out).
TEST(CallMismatchLateHeader, NothingIsUsedBeforeThePeersHeader) {
  setenv("SIGNLION_HOST_CHUNK_BYTES", "64", 1);
  paramResetCache();
  const size_t count = 64 * 64;
  for (ncclSignAlgo_t algo : kAlgos) {
    for (int n : {3, 4}) {
      std::vector<ncclResult_t> res(n, ncclSuccess);
      std::vector<int> written(n, 0);
      std::vector<ncclResult_t> init = runRanks(
          n,
          [&](int) {
            ncclSignConfig_t c = makeConfig(algo);
            c.netPlugin = SIGNLION_TEST_LATE_FIRST_PLUGIN;
            c.timeoutMs = 1500;  // the ranks that do not see the difference wait this out
            return c;
          },
          [&](int rank, ncclSignComm_t comm) {
            std::vector<float> in(count);
            for (size_t i = 0; i < count; i++) in[i] = (i + rank) % 3 ? 1.0f : -1.0f;
            std::vector<float> out(count, 7.0f);
            const ncclDataType_t dt = rank == n - 1 ? ncclBfloat16 : ncclFloat32;
            res[rank] = ncclSignHostAllReduce(in.data(), out.data(), count, dt, ncclSignMajority, comm);
            for (float v : out) written[rank] += v != 7.0f;
          });
      for (int r = 0; r < n; r++) {
        ASSERT_EQ(init[r], ncclSuccess) << algoName(algo) << " N " << n << " rank " << r;
        EXPECT_NE(res[r], ncclSuccess) << algoName(algo) << " N " << n << " rank " << r;
        EXPECT_EQ(written[r], 0) << algoName(algo) << " N " << n << " rank " << r << " wrote " << written[r]
                                 << " outputs of a call the ranks disagree on";
      }
    }
  }
  unsetenv("SIGNLION_HOST_CHUNK_BYTES");
  paramResetCache();
}

// Rules and algorithm are the comm's: a rank that set another one fails
// ncclSignCommInitRank, and so does every other rank, naming the setting.
struct SettingCase {
  const char* name;
  std::function<void(ncclSignConfig_t*)> change;
  const char* warn;
};

class SettingMismatch : public ::testing::TestWithParam<int> {};

TEST_P(SettingMismatch, InitFailsOnEveryRank) {
  const SettingCase cases[] = {
      {"tie", [](ncclSignConfig_t* c) { c->tieRule = ncclSignTieNegative; }, "set tie rule (config->tieRule) negative"},
      {"zero", [](ncclSignConfig_t* c) { c->zeroRule = ncclSignZeroNegative; },
       "set zero rule (config->zeroRule) negative"},
      {"algo", [](ncclSignConfig_t* c) { c->algorithm = ncclSignAlgoAllGather; }, "set algorithm"},
  };
  for (const SettingCase& sc : cases) {
    for (ncclSignAlgo_t algo : kAlgos) {
      const int n = GetParam();
      test::WarnCapture warns;
      std::vector<ncclResult_t> init = runRanks(
          n,
          [&](int rank) {
            ncclSignConfig_t c = makeConfig(algo);
            c.tieRule = ncclSignTiePositive;
            if (rank == n - 1) sc.change(&c);
            return c;
          },
          [](int, ncclSignComm_t) {});
      if (sc.name == std::string("algo") && algo == ncclSignAlgoAllGather) continue;  // no difference
      for (int r = 0; r < n; r++)
        EXPECT_EQ(init[r], ncclInvalidUsage) << sc.name << " " << algoName(algo) << " rank " << r;
      EXPECT_EQ(warns.countContaining(sc.warn), n) << sc.name << " " << algoName(algo);
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Host, SettingMismatch, ::testing::Values(2, 3, 4, 8));

// The sequence: one rank passes count 0, the other 64; both fail.
// The call that follows, with matching arguments, is refused with the same
// error on both (what the failed call left on the links is never read as its
// result), also after the peer aborted its comm.
TEST(StickyError, LeftoverDataIsNeverAResult) {
  for (ncclSignAlgo_t algo : kAlgos) {
    std::vector<ncclResult_t> first(2, ncclSuccess), second(2, ncclSuccess), async(2, ncclSuccess);
    std::vector<float> out1(64, 7.0f);
    runRanks(
        2, [&](int) { return makeConfig(algo); },
        [&](int rank, ncclSignComm_t& comm) {
          std::vector<float> in(64, 1.0f), out(64, 7.0f);
          ncclResult_t before = ncclInternalError;
          EXPECT_EQ(ncclSignCommGetAsyncError(comm, &before), ncclSuccess);
          EXPECT_EQ(before, ncclSuccess);
          first[rank] =
              ncclSignHostAllReduce(in.data(), out.data(), rank == 0 ? 0 : 64, ncclFloat32, ncclSignMajority, comm);
          if (rank == 0) {
            ncclSignCommAbort(comm);  // as documented after an error; the peer calls again
            comm = nullptr;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          second[rank] = ncclSignHostAllReduce(in.data(), out1.data(), 64, ncclFloat32, ncclSignMajority, comm);
          EXPECT_EQ(ncclSignCommGetAsyncError(comm, &async[rank]), ncclSuccess);
        });
    for (int r = 0; r < 2; r++) EXPECT_NE(first[r], ncclSuccess) << algoName(algo) << " rank " << r;
    EXPECT_NE(second[1], ncclSuccess) << algoName(algo);
    EXPECT_EQ(second[1], first[1]) << algoName(algo) << ": not the sticky error";
    EXPECT_EQ(async[1], first[1]) << algoName(algo);
    for (float v : out1) ASSERT_EQ(v, 7.0f) << algoName(algo) << ": the refused call wrote its output";
  }
}

// Once failed, a comm refuses every call (sign, sum, barrier) with the first
// error, even calls every rank makes correctly; a new comm works.
TEST(StickyError, EveryLaterCallGetsTheFirstError) {
  const int n = 3;
  std::vector<ncclResult_t> first(n), later(n, ncclSuccess);
  runRanks(
      n, [&](int) { return makeConfig(ncclSignAlgoRing); },
      [&](int rank, ncclSignComm_t comm) {
        std::vector<float> in(100, 1.0f), out(100);
        first[rank] =
            ncclSignHostAllReduce(in.data(), out.data(), rank == 1 ? 99 : 100, ncclFloat32, ncclSignMajority, comm);
        for (int i = 0; i < 3; i++) {
          ncclResult_t r[3] = {ncclSignHostAllReduce(in.data(), out.data(), 100, ncclFloat32, ncclSignMajority, comm),
                               ncclSignHostSumAllReduce(in.data(), out.data(), 100, ncclFloat32, comm),
                               ncclSignBarrier(comm)};
          for (ncclResult_t x : r) EXPECT_EQ(x, first[rank]) << "rank " << rank;
        }
        ncclResult_t async = ncclSuccess;
        EXPECT_EQ(ncclSignCommGetAsyncError(comm, &async), ncclSuccess);
        EXPECT_EQ(async, first[rank]);
      });
  for (int r = 0; r < n; r++) EXPECT_NE(first[r], ncclSuccess) << "rank " << r;
  // A fresh communicator is unaffected.
  runRanks(
      n, [&](int) { return makeConfig(ncclSignAlgoRing); },
      [&](int rank, ncclSignComm_t comm) {
        std::vector<float> in(100, 1.0f), out(100);
        EXPECT_EQ(ncclSignHostAllReduce(in.data(), out.data(), 100, ncclFloat32, ncclSignMajority, comm), ncclSuccess);
        for (float v : out) ASSERT_EQ(v, 1.0f) << "rank " << rank;
      });
}

// The sum baseline checks its calls the same way.
TEST(CallMismatchSum, CountAndDatatypeAndCollective) {
  for (int n : {2, 3, 4, 8}) {
    for (int what = 0; what < 4; what++) {
      std::vector<ncclResult_t> res(n, ncclSuccess);
      runRanks(
          n, [&](int) { return makeConfig(ncclSignAlgoRing); },
          [&](int rank, ncclSignComm_t comm) {
            std::vector<float> in(1000, 1.0f), out(1000);
            const bool odd = rank == n - 1;
            if (what == 0)
              res[rank] = ncclSignHostSumAllReduce(in.data(), out.data(), odd ? 999 : 1000, ncclFloat32, comm);
            if (what == 1)
              res[rank] = ncclSignHostSumAllReduce(in.data(), out.data(), odd ? 0 : 1000, ncclFloat32, comm);
            if (what == 2)
              res[rank] = ncclSignHostSumAllReduce(in.data(), out.data(), 500, odd ? ncclBfloat16 : ncclFloat32, comm);
            if (what == 3)
              res[rank] = odd ? ncclSignHostAllReduce(in.data(), out.data(), 1000, ncclFloat32, ncclSignMajority, comm)
                              : ncclSignHostSumAllReduce(in.data(), out.data(), 1000, ncclFloat32, comm);
          });
      for (int r = 0; r < n; r++) EXPECT_NE(res[r], ncclSuccess) << "case " << what << " N " << n << " rank " << r;
    }
  }
}

// A count whose bytes pass PTRDIFF_MAX is no buffer: ncclInvalidArgument
// naming 'count' (it used to crash in pack), and the comm still works.
TEST(CountLimit, BytesBeyondPtrdiffMaxAreAnArgumentError) {
  runRanks(
      1, [&](int) { return makeConfig(ncclSignAlgoAuto); },
      [&](int, ncclSignComm_t comm) {
        std::vector<float> in(64, 1.0f), out(64);
        const size_t huge[] = {(size_t{1} << 62) - 1, (size_t)PTRDIFF_MAX / 4 + 1, SIZE_MAX / 4};
        for (size_t count : huge) {
          test::WarnCapture warns;
          EXPECT_EQ(ncclSignHostAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSignMajority, comm),
                    ncclInvalidArgument)
              << count;
          EXPECT_EQ(ncclSignHostSumAllReduce(in.data(), out.data(), count, ncclFloat32, comm), ncclInvalidArgument)
              << count;
          EXPECT_EQ(warns.countContaining("invalid argument 'count'"), 2) << count;
        }
        // fp16 up to PTRDIFF_MAX / 2 elements passes the check (and int8 PTRDIFF_MAX):
        // the largest allowed is a bound, not something to allocate here.
        EXPECT_EQ(ncclSignHostAllReduce(in.data(), out.data(), 64, ncclFloat32, ncclSignMajority, comm), ncclSuccess);
        ncclResult_t async = ncclInternalError;
        EXPECT_EQ(ncclSignCommGetAsyncError(comm, &async), ncclSuccess);
        EXPECT_EQ(async, ncclSuccess) << "an argument error is not the comm's";
      });
}

TEST(AsyncError, ArgumentsAreChecked) {
  ncclResult_t r;
  EXPECT_EQ(ncclSignCommGetAsyncError(nullptr, &r), ncclInvalidArgument);
  runRanks(
      1, [&](int) { return makeConfig(ncclSignAlgoAuto); },
      [&](int, ncclSignComm_t comm) { EXPECT_EQ(ncclSignCommGetAsyncError(comm, nullptr), ncclInvalidArgument); });
}

}  // namespace
}  // namespace signlion
