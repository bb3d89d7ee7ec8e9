// The C API's opaque handles (ncclSignComm_t, ncclSignLion_t) as a user can
// misuse them: a destroyed handle, a pointer that never was a handle. Each is
// ncclInvalidArgument with a WARN naming it, never a read through the
// pointer (the check used to read the object's magic: freed memory after a
// destroy, a crash for (ncclSignComm_t)0x1000). Built and run under
// AddressSanitizer too (SIGNLION_SANITIZE=address), where such a read fails
// the test. Through libnccl-sign.so and nccl_sign.h only, as a user links it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "nccl_sign.h"

namespace {

// A one-rank communicator: init needs no peer.
ncclSignComm_t oneRankComm() {
  ncclSignUniqueId id;
  if (ncclSignGetUniqueId(&id) != ncclSuccess) return nullptr;
  ncclSignComm_t comm = nullptr;
  if (ncclSignCommInitRank(&comm, 1, id, 0, nullptr) != ncclSuccess) return nullptr;
  return comm;
}

// An optimizer that needs no communicator.
ncclSignLion_t localLion(size_t count) {
  ncclSignLionConfig_t config = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  config.aggregation = ncclSignLionLocal;
  ncclSignLion_t lion = nullptr;
  if (ncclSignLionCreate(&lion, count, ncclFloat32, &config, nullptr) != ncclSuccess) return nullptr;
  return lion;
}

// Addresses that never were a handle: unmapped, a stack variable, a heap block.
std::vector<void*> foreignPointers(int* onStack, std::vector<uint64_t>* onHeap) {
  return {reinterpret_cast<void*>(uintptr_t{0x1000}), onStack, onHeap->data()};
}

TEST(LiveHandles, DestroyedCommIsInvalidArgument) {
  ncclSignComm_t comm = oneRankComm();
  ASSERT_NE(comm, nullptr);
  ASSERT_EQ(ncclSignCommDestroy(comm), ncclSuccess);
  int n = -1;
  testing::internal::CaptureStderr();
  EXPECT_EQ(ncclSignCommCount(comm, &n), ncclInvalidArgument);
  float x = 1, y = 0;
  EXPECT_EQ(ncclSignHostAllReduce(&x, &y, 1, ncclFloat32, ncclSignMajority, comm), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommDestroy(comm), ncclInvalidArgument);  // a second destroy
  EXPECT_EQ(ncclSignCommAbort(comm), ncclInvalidArgument);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, -1);
  EXPECT_NE(err.find("ncclSignCommCount: invalid argument 'comm'"), std::string::npos) << err;
  EXPECT_NE(err.find("not a live ncclSignComm_t"), std::string::npos) << err;
  EXPECT_NE(err.find("ncclSignCommDestroy: invalid argument 'comm'"), std::string::npos) << err;
}

TEST(LiveHandles, AbortedCommIsInvalidArgument) {
  ncclSignComm_t comm = oneRankComm();
  ASSERT_NE(comm, nullptr);
  ASSERT_EQ(ncclSignCommAbort(comm), ncclSuccess);
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclSignCommGetAsyncError(comm, &async), ncclInvalidArgument);
  EXPECT_EQ(ncclSignCommDestroy(comm), ncclInvalidArgument);
}

TEST(LiveHandles, ForeignPointerIsInvalidArgumentNotACrash) {
  int onStack = 0;
  std::vector<uint64_t> onHeap(64, 0x7369676e636f6d6dull);  // the old magic, everywhere
  for (void* p : foreignPointers(&onStack, &onHeap)) {
    const auto comm = static_cast<ncclSignComm_t>(p);
    int n = -1, rank = -1;
    uint64_t s = 0, r = 0;
    testing::internal::CaptureStderr();
    EXPECT_EQ(ncclSignCommCount(comm, &n), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignCommUserRank(comm, &rank), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignCommGetWireBytes(comm, &s, &r), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignBarrier(comm), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignCommDestroy(comm), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignCommAbort(comm), ncclInvalidArgument) << p;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("not a live ncclSignComm_t"), std::string::npos) << err;
  }
}

TEST(LiveHandles, DestroyedOrForeignLionIsInvalidArgument) {
  ncclSignLion_t lion = localLion(256);
  ASSERT_NE(lion, nullptr);
  ASSERT_EQ(ncclSignLionDestroy(lion), ncclSuccess);
  int onStack = 0;
  std::vector<uint64_t> onHeap(64, 0x6c696f6e6f707431ull);  // the old magic, everywhere
  std::vector<void*> handles = foreignPointers(&onStack, &onHeap);
  handles.push_back(lion);
  for (void* p : handles) {
    const auto l = static_cast<ncclSignLion_t>(p);
    uint64_t applied = 0, skipped = 0;
    size_t bytes = 0;
    testing::internal::CaptureStderr();
    EXPECT_EQ(ncclSignLionGetStepCount(l, &applied, &skipped), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignLionGetStateSize(l, &bytes), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignLionSetHyperparameters(l, 1e-4f, 0.9f, 0.99f, 0), ncclInvalidArgument) << p;
    EXPECT_EQ(ncclSignLionDestroy(l), ncclInvalidArgument) << p;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("not a live optimizer"), std::string::npos) << err;
  }
}

// Threads each make, use and destroy their own comms and optimizers while
// the others do: every live handle stays valid, every destroyed one is
// refused. Under ThreadSanitizer (SIGNLION_SANITIZE=thread) this is the
// registry's race check.
TEST(LiveHandles, ConcurrentCommsOnSeveralThreads) {
  constexpr int kThreads = 4, kRounds = 3, kCalls = 50;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([t, &failures] {
      for (int round = 0; round < kRounds; round++) {
        ncclSignComm_t comm = oneRankComm();
        ncclSignLion_t lion = localLion(128);
        if (comm == nullptr || lion == nullptr) {
          failures[t]++;
          ncclSignLionDestroy(lion);
          ncclSignCommDestroy(comm);
          continue;
        }
        std::vector<float> in(64, t % 2 ? 1.0f : -1.0f), out(64, 0);
        for (int i = 0; i < kCalls; i++) {
          int n = 0;
          uint64_t applied = 0, skipped = 0;
          failures[t] += ncclSignCommCount(comm, &n) != ncclSuccess || n != 1;
          failures[t] += ncclSignHostAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSignMajority, comm) !=
                             ncclSuccess ||
                         out[0] != in[0];
          failures[t] += ncclSignLionGetStepCount(lion, &applied, &skipped) != ncclSuccess;
        }
        failures[t] += ncclSignLionDestroy(lion) != ncclSuccess;
        failures[t] += ncclSignCommDestroy(comm) != ncclSuccess;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

}  // namespace
