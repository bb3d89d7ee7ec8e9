#include "common/ranks.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace signlion {
namespace test {

void withRanks(int nranks, const ncclSignConfig_t& config, const std::function<void(int, ncclSignComm_t)>& body) {
  withRanks(
      nranks, [&](int) { return config; }, body);
}

void withRanks(int nranks, const std::function<ncclSignConfig_t(int)>& configOf,
               const std::function<void(int, ncclSignComm_t)>& body) {
  ncclSignUniqueId id;
  ASSERT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<ncclResult_t> initRes(nranks, ncclInternalError);
  for (int r = 0; r < nranks; r++) {
    threads.emplace_back([&, r] {
      ncclSignComm_t comm = nullptr;
      const ncclSignConfig_t config = configOf(r);
      initRes[r] = ncclSignCommInitRank(&comm, nranks, id, r, &config);
      if (initRes[r] != ncclSuccess) return;
      body(r, comm);
      EXPECT_EQ(ncclSignCommDestroy(comm), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; r++) ASSERT_EQ(initRes[r], ncclSuccess) << "init of rank " << r << " of " << nranks;
}

}  // namespace test
}  // namespace signlion
