// nccl/: NCCL found at run time (the toolkit's libnccl.so.2 here), versioned,
// and refused when too old or incomplete; a communicator NCCL does not know
// is rejected through NCCL itself. No GPU needed.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/param.h"
#include "nccl/comm_context.h"
#include "nccl/nccl_symbols.h"

namespace signlion {
namespace nccl {
namespace {

// The library CMake found, so the test does not depend on the loader's path.
void pointAtToolkitNccl() {
  setenv("SIGNLION_NCCL_LIBRARY", SIGNLION_TEST_NCCL_LIBRARY, 1);
  paramResetCache();
}

TEST(NcclSymbols, LoadsAndVersionsTheToolkitsNccl) {
  pointAtToolkitNccl();
  NcclApi api;
  ASSERT_EQ(loadNcclApi(&api), ncclSuccess);
  EXPECT_EQ(api.version, NCCL_VERSION_CODE) << "the library is not the one nccl.h describes";
  EXPECT_GE(api.version, kMinNcclVersion);
  EXPECT_NE(std::strstr(api.path, "libnccl"), nullptr) << api.path;
  int v = 0;
  ASSERT_EQ(api.getVersion(&v), ncclSuccess);
  EXPECT_EQ(v, api.version);
  EXPECT_NE(api.getErrorString(ncclInvalidArgument), nullptr);
  for (void* fn : {(void*)api.commCount, (void*)api.commUserRank, (void*)api.commCuDevice, (void*)api.commGetAsyncError,
                   (void*)api.groupStart, (void*)api.groupEnd, (void*)api.send, (void*)api.recv, (void*)api.allReduce,
                   (void*)api.allGather})
    EXPECT_NE(fn, nullptr);
  // The optional pair of the node grouping: every accepted NCCL (2.19+) has it.
  EXPECT_NE((void*)api.commSplit, nullptr);
  EXPECT_NE((void*)api.commDestroy, nullptr);
  // Loaded now: a second search finds it already in the process (step 1).
  NcclApi again;
  ASSERT_EQ(loadNcclApi(&again), ncclSuccess);
  EXPECT_EQ(again.getVersion, api.getVersion);
}

TEST(NcclSymbols, ProcessWideTableIsMadeOnce) {
  pointAtToolkitNccl();
  const NcclApi* a = nullptr;
  const NcclApi* b = nullptr;
  ASSERT_EQ(ncclApi(&a), ncclSuccess);
  ASSERT_EQ(ncclApi(&b), ncclSuccess);
  EXPECT_EQ(a, b);
}

TEST(NcclSymbols, RefusesVersionsBefore2_19) {
  EXPECT_EQ(checkNcclVersion(21900), ncclSuccess);
  EXPECT_EQ(checkNcclVersion(22809), ncclSuccess);
  EXPECT_EQ(checkNcclVersion(21809), ncclInvalidUsage);
  EXPECT_EQ(checkNcclVersion(2804), ncclInvalidUsage);  // 2.8.4, NCCL's old encoding
}

TEST(NcclSymbols, RefusesALibraryWithoutNcclEntryPoints) {
  void* libm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(libm, nullptr);
  NcclApi api;
  EXPECT_EQ(resolveNcclApi(libm, "libm.so.6", &api), ncclSystemError);
}

TEST(NcclSymbols, ACommNcclDoesNotKnowIsAnInvalidArgument) {
  pointAtToolkitNccl();
  const NcclApi* api = nullptr;
  ASSERT_EQ(ncclApi(&api), ncclSuccess);
  std::vector<char> notAComm(1 << 16, 0);  // NCCL checks a magic word at its start
  CommShape shape;
  EXPECT_EQ(queryComm(*api, reinterpret_cast<ncclComm_t>(notAComm.data()), "test", &shape), ncclInvalidArgument);
}

}  // namespace
}  // namespace nccl
}  // namespace signlion
