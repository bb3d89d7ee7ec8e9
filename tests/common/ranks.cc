#include "common/ranks.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

namespace signlion {
namespace test {

std::vector<ncclResult_t> runRanks(int nranks, const std::function<ncclSignConfig_t(int)>& configOf,
                                   const std::function<void(int, ncclSignComm_t&)>& body) {
  ncclSignUniqueId id;
  EXPECT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<ncclResult_t> initRes(nranks, ncclInternalError);
  for (int r = 0; r < nranks; r++) {
    threads.emplace_back([&, r] {
      ncclSignConfig_t config = configOf(r);
      ncclSignComm_t comm = nullptr;
      initRes[r] = ncclSignCommInitRank(&comm, nranks, id, r, &config);
      if (initRes[r] != ncclSuccess) return;
      body(r, comm);
      EXPECT_EQ(ncclSignCommDestroy(comm), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
  return initRes;
}

void withRanks(int nranks, const std::function<ncclSignConfig_t(int)>& configOf,
               const std::function<void(int, ncclSignComm_t)>& body) {
  std::vector<ncclResult_t> initRes = runRanks(nranks, configOf, [&](int r, ncclSignComm_t& comm) { body(r, comm); });
  for (int r = 0; r < nranks; r++) ASSERT_EQ(initRes[r], ncclSuccess) << "init of rank " << r << " of " << nranks;
}

void withRanks(int nranks, const ncclSignConfig_t& config, const std::function<void(int, ncclSignComm_t)>& body) {
  withRanks(
      nranks, [&](int) { return config; }, body);
}

uint64_t bytesSentByOneCall(ncclSignComm_t comm, const void* in, void* out, size_t count) {
  uint64_t s0 = 0, r0 = 0, s1 = 0, r1 = 0;
  EXPECT_EQ(ncclSignCommGetWireBytes(comm, &s0, &r0), ncclSuccess);
  EXPECT_EQ(ncclSignHostAllReduce(in, out, count, ncclFloat32, ncclSignMajority, comm), ncclSuccess);
  EXPECT_EQ(ncclSignCommGetWireBytes(comm, &s1, &r1), ncclSuccess);
  return s1 - s0;
}

}  // namespace test
}  // namespace signlion
