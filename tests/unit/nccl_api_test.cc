// ncclSignAllReduce, ncclSignCommSetConfig and ncclSignCommRelease through
// libnccl-sign.so, as a framework calls them: every argument error is
// ncclInvalidArgument, returned before anything is enqueued, without a GPU.
// (The GPU behavior is tests/gpu/nccl_sign_allreduce_test.cc's.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "nccl_sign.h"

namespace {

// Memory NCCL will not take for a communicator (its magic word is missing).
struct NotAComm {
  std::vector<char> bytes = std::vector<char>(1 << 16, 0);
  ncclComm_t get() { return reinterpret_cast<ncclComm_t>(bytes.data()); }
};

// Stand-ins for device buffers: every test below fails before they are used.
float gBuf[128];

TEST(NcclSignAllReduce, NullCommIsAnInvalidArgument) {
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSignMajority, nullptr, nullptr),
            ncclInvalidArgument);
}

TEST(NcclSignAllReduce, NullBuffersWithElementsAreInvalidArguments) {
  NotAComm comm;
  EXPECT_EQ(ncclSignAllReduce(nullptr, gBuf, 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSignAllReduce(gBuf, nullptr, 1, ncclFloat32, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
}

TEST(NcclSignAllReduce, DatatypesAndOpsOutsideTheContractAreInvalidArguments) {
  NotAComm comm;
  for (ncclDataType_t dt : {ncclFloat64, ncclInt32, ncclUint8, ncclUint64, (ncclDataType_t)99})
    EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 8, dt, ncclSignMajority, comm.get(), nullptr), ncclInvalidArgument)
        << "datatype " << (int)dt;
  for (int op : {-1, (int)ncclSignNumOps, 17})
    EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 8, ncclFloat32, (ncclSignOp_t)op, comm.get(), nullptr),
              ncclInvalidArgument)
        << "op " << op;
  // int8 votes have no average (the result would not fit the datatype).
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 8, ncclInt8, ncclSignAverage, comm.get(), nullptr), ncclInvalidArgument);
}

TEST(NcclSignAllReduce, CountsThatOverflowAreInvalidArguments) {
  NotAComm comm;
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, SIZE_MAX / 2, ncclFloat32, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, SIZE_MAX / 3, ncclBfloat16, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
  // One byte per element, but beyond what int64 block arithmetic holds.
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, SIZE_MAX - 5, ncclInt8, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
}

TEST(NcclSignAllReduce, ACommNcclRejectsIsAnInvalidArgument) {
  NotAComm comm;
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 0, ncclBfloat16, ncclSignAverage, comm.get(), nullptr),
            ncclInvalidArgument);
}

TEST(NcclSignCommSetConfig, ArgumentErrors) {
  NotAComm comm;
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  EXPECT_EQ(ncclSignCommSetConfig(nullptr, &config), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommSetConfig(nullptr, nullptr), ncclInvalidArgument);
  ncclSignConfig_t bad = config;
  bad.size = 3;
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &bad), ncclInvalidArgument);
  bad = config;
  bad.magic = 0;
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &bad), ncclInvalidArgument);
  bad = config;
  bad.algorithm = ncclSignNumAlgos;
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &bad), ncclInvalidArgument);
  bad = config;
  bad.zeroRule = -1;
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &bad), ncclInvalidArgument);
  bad = config;
  bad.tieRule = ncclSignNumTieRules;
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &bad), ncclInvalidArgument);
  // A valid config on a comm NCCL rejects.
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), &config), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommSetConfig(comm.get(), nullptr), ncclInvalidArgument);
}

TEST(NcclSignCommRelease, UnknownCommIsFineNullIsNot) {
  NotAComm comm;
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
  EXPECT_EQ(ncclSignCommRelease(nullptr), ncclInvalidArgument);
  // A failed call leaves nothing cached behind.
  EXPECT_EQ(ncclSignAllReduce(gBuf, gBuf, 128, ncclFloat32, ncclSignMajority, comm.get(), nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommRelease(comm.get()), ncclSuccess);
}

}  // namespace
