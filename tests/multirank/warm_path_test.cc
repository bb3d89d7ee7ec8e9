// A warm communicator allocates nothing on the calling thread: schedules are
// cached, scratch is the registered arena, transfer lists keep their capacity.
// Counted by replacing the global operator new of this test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "common/param.h"
#include "nccl_sign.h"

namespace {
thread_local long tAllocations = 0;
}

void* operator new(size_t n) {
  tAllocations++;
  if (void* p = malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
// The nothrow forms too: every new of this binary must meet the replaced
// delete (a sanitizer's own nothrow new would not).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  tAllocations++;
  return malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
void operator delete[](void* p, size_t) noexcept { free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { free(p); }

namespace {

// Allocations on each rank's thread during three warm calls (after two to
// warm up) of the sign and the sum all-reduce; -1 where a call failed.
// hostOf(r): rank r's host id (nullptr: the machine's).
std::vector<long> warmAllocations(ncclSignAlgo_t algo, int n, size_t count, const char* (*hostOf)(int)) {
  ncclSignUniqueId id;
  EXPECT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  std::vector<long> warmAllocs(n, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      ncclSignConfig_t cfg = NCCL_SIGN_CONFIG_INITIALIZER;
      cfg.algorithm = algo;
      if (hostOf != nullptr) cfg.hostId = hostOf(r);
      ncclSignComm_t comm;
      if (ncclSignCommInitRank(&comm, n, id, r, &cfg) != ncclSuccess) return;
      std::vector<float> x(count, r % 2 ? 1.0f : -1.0f), y(count);
      bool ok = true;
      for (int warm = 0; warm < 2; warm++) {
        ok &= ncclSignHostAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSignMajority, comm) == ncclSuccess;
        ok &= ncclSignHostSumAllReduce(x.data(), y.data(), count, ncclFloat32, comm) == ncclSuccess;
      }
      long before = tAllocations;
      for (int it = 0; it < 3; it++) {
        ok &= ncclSignHostAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSignMajority, comm) == ncclSuccess;
        ok &= ncclSignHostSumAllReduce(x.data(), y.data(), count, ncclFloat32, comm) == ncclSuccess;
      }
      if (ok) warmAllocs[r] = tAllocations - before;
      ncclSignCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  return warmAllocs;
}

TEST(WarmPath, NoAllocationOnTheCallingThread) {
  const int n = 4;
  const size_t count = 300000;  // several chunks per transfer
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                              ncclSignAlgoFieldSum, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    std::vector<long> warmAllocs = warmAllocations(algo, n, count, nullptr);
    for (int r = 0; r < n; r++) EXPECT_EQ(warmAllocs[r], 0) << "algorithm " << algo << " rank " << r;
  }
}

// The same in segments (five, the last one short), whose votes are packed
// ahead into a buffer the executor keeps: on two nodes of two ranks too.
TEST(WarmPath, NoAllocationWithSegmentsPackedAhead) {
  setenv("SIGNLION_HOST_SEGMENT", "65536", 1);
  signlion::paramResetCache();
  const int n = 4;
  const size_t count = 300000;
  for (ncclSignAlgo_t algo :
       {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoHierarchical, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    std::vector<long> warmAllocs =
        warmAllocations(algo, n, count, [](int r) -> const char* { return r < 2 ? "node-a" : "node-b"; });
    for (int r = 0; r < n; r++) EXPECT_EQ(warmAllocs[r], 0) << "algorithm " << algo << " rank " << r;
  }
  unsetenv("SIGNLION_HOST_SEGMENT");
  signlion::paramResetCache();
}

}  // namespace
