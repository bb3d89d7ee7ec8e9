// The public C ABI as a user links it: libnccl-sign.so, nccl_sign.h only.
#include <gtest/gtest.h>

#include "nccl_sign.h"

TEST(Abi, VersionMatchesHeader) {
  int v = -1;
  ASSERT_EQ(ncclSignGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_SIGN_VERSION_CODE);
  EXPECT_EQ(ncclSignGetVersion(nullptr), ncclInvalidArgument);
}

TEST(Abi, ErrorStringsNeverNull) {
  for (int r = 0; r <= ncclNumResults; r++) EXPECT_NE(ncclSignGetErrorString(static_cast<ncclResult_t>(r)), nullptr);
}

TEST(Abi, ConfigInitializerIsValid) {
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  EXPECT_EQ(config.size, sizeof(ncclSignConfig_t));
  EXPECT_EQ(ncclSignConfigCheck(&config), ncclSuccess);
  EXPECT_EQ(ncclSignConfigCheck(nullptr), ncclSuccess);
  config.magic = 0;
  EXPECT_EQ(ncclSignConfigCheck(&config), ncclInvalidArgument);
}
