// ncclSignAllReduce, ncclSignCommSetConfig and ncclSignCommRelease through
// libnccl-sign.so, as a framework calls them: every argument error is
// ncclInvalidArgument, returned before anything is enqueued, without a GPU.
// (The GPU behavior is tests/gpu/nccl_sign_allreduce_test.cc's.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_sign.h"

namespace {

// The library's log goes to a file (main sets SIGNLION_DEBUG_FILE before the
// first line), so a test can tell which argument a WARN named.
std::string gLogPath;
size_t gLogSeen = 0;

// The log lines written since the last call.
std::string newLog() {
  std::ifstream f(gLogPath);
  std::stringstream all;
  all << f.rdbuf();
  std::string text = all.str();
  std::string fresh = text.size() > gLogSeen ? text.substr(gLogSeen) : "";
  gLogSeen = text.size();
  return fresh;
}

// ncclInvalidArgument, with a WARN that names `arg`.
::testing::AssertionResult rejects(ncclResult_t res, const char* arg) {
  std::string log = newLog();
  if (res != ncclInvalidArgument)
    return ::testing::AssertionFailure() << "returned " << res << ", not ncclInvalidArgument; log:\n" << log;
  if (log.find(std::string("'") + arg + "'") == std::string::npos)
    return ::testing::AssertionFailure() << "no WARN naming '" << arg << "'; log:\n" << log;
  return ::testing::AssertionSuccess();
}

// Memory NCCL will not take for a communicator (its magic word is missing).
struct NotAComm {
  std::vector<char> bytes = std::vector<char>(1 << 16, 0);
  ncclComm_t get() { return reinterpret_cast<ncclComm_t>(bytes.data()); }
};

// Stand-ins for device buffers: every test below fails before they are used.
float gBuf[128];

TEST(NcclSignAllReduce, NullCommIsAnInvalidArgument) {
  newLog();
  EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, nullptr, nullptr), "comm"));
  EXPECT_TRUE(rejects(ncclSignAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSignMajority, nullptr, nullptr), "comm"));
}

TEST(NcclSignAllReduce, NullBuffersWithElementsAreInvalidArguments) {
  NotAComm comm;
  newLog();
  EXPECT_TRUE(
      rejects(ncclSignAllReduce(nullptr, gBuf, 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "sendbuff"));
  EXPECT_TRUE(
      rejects(ncclSignAllReduce(gBuf, nullptr, 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "recvbuff"));
}

TEST(NcclSignAllReduce, DatatypesAndOpsOutsideTheContractAreInvalidArguments) {
  NotAComm comm;
  newLog();
  // As ints: UBSan rightly objects to an enum variable holding 99.
  for (int dt : {(int)ncclFloat64, (int)ncclInt32, (int)ncclUint8, (int)ncclUint64, 99})
    EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 8, (ncclDataType_t)dt, ncclSignMajority, comm.get(), nullptr),
                        "datatype"))
        << "datatype " << dt;
  for (int op : {-1, (int)ncclSignNumOps, 17})
    EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 8, ncclFloat32, (ncclSignOp_t)op, comm.get(), nullptr), "op"))
        << "op " << op;
  // int8 votes have no average (the result would not fit the datatype).
  EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 8, ncclInt8, ncclSignAverage, comm.get(), nullptr), "datatype"));
}

TEST(NcclSignAllReduce, CountsThatOverflowAreInvalidArguments) {
  NotAComm comm;
  newLog();
  EXPECT_TRUE(rejects(
      ncclSignAllReduce(gBuf, gBuf, SIZE_MAX / 4 + 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "count"));
  EXPECT_TRUE(rejects(
      ncclSignAllReduce(gBuf, gBuf, SIZE_MAX / 2 + 1, ncclBfloat16, ncclSignMajority, comm.get(), nullptr), "count"));
  // Bytes beyond PTRDIFF_MAX though size_t holds them: no buffer is that large.
  EXPECT_TRUE(rejects(
      ncclSignAllReduce(gBuf, gBuf, (size_t{1} << 62) - 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "count"));
  // One byte per element, but beyond what int64 block arithmetic holds.
  EXPECT_TRUE(
      rejects(ncclSignAllReduce(gBuf, gBuf, SIZE_MAX - 5, ncclInt8, ncclSignMajority, comm.get(), nullptr), "count"));
}

TEST(NcclSignAllReduce, ACommNcclRejectsIsAnInvalidArgument) {
  NotAComm comm;
  newLog();
  EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "comm"));
  // Even with nothing to reduce, as NCCL's own calls.
  EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 0, ncclBfloat16, ncclSignAverage, comm.get(), nullptr), "comm"));
}

TEST(NcclSignCommSetConfig, ArgumentErrors) {
  NotAComm comm;
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  newLog();
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(nullptr, &config), "comm"));
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(nullptr, nullptr), "comm"));
  ncclSignConfig_t bad = config;
  bad.size = 3;
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &bad), "config->size"));
  bad = config;
  bad.magic = 0;
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &bad), "config->magic"));
  bad = config;
  bad.algorithm = ncclSignNumAlgos;
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &bad), "config->algorithm"));
  bad = config;
  bad.zeroRule = -1;
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &bad), "config->zeroRule"));
  bad = config;
  bad.tieRule = ncclSignNumTieRules;
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &bad), "config->tieRule"));
  // A valid config (or none) on a comm NCCL rejects.
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), &config), "comm"));
  EXPECT_TRUE(rejects(ncclSignCommSetConfig(comm.get(), nullptr), "comm"));
}

TEST(NcclSignCommRelease, UnknownCommIsFineNullIsNot) {
  NotAComm comm;
  newLog();
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
  EXPECT_TRUE(rejects(ncclSignCommRelease(nullptr), "comm"));
  // A failed call leaves nothing cached behind.
  EXPECT_TRUE(rejects(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, comm.get(), nullptr), "comm"));
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
}

}  // namespace

int main(int argc, char** argv) {
  gLogPath = "/tmp/signlion_nccl_api_test." + std::to_string(getpid()) + ".log";
  setenv("SIGNLION_DEBUG_FILE", gLogPath.c_str(), 1);
  setenv("SIGNLION_DEBUG", "WARN", 1);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  std::remove(gLogPath.c_str());
  return rc;
}
