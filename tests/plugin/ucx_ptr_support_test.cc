// The UCX transport's ptrSupport decision (plugin/ucx/ucx_ptr_support.h):
// NCCL_PTR_CUDA only when the UCX context lists CUDA memory and
// SIGNLION_UCX_CUDA_POINTERS asks for it, since its iflush does not flush.
// The decision alone: Debian's UCX lists no CUDA memory, so the transport
// itself always reports NCCL_PTR_HOST here.
#include <gtest/gtest.h>

#include "plugin_fixture.h"
#include "ucx/ucx_ptr_support.h"

using namespace signlion::nettest;
using signlion::net::signlionParamUcxCudaPointers;
using signlion::net::ucxPtrSupportFor;

TEST(UcxPtrSupport, CudaOnlyWhenUcxListsItAndTheUserAsks) {
  EXPECT_EQ(ucxPtrSupportFor(false, false), NCCL_PTR_HOST);
  EXPECT_EQ(ucxPtrSupportFor(false, true), NCCL_PTR_HOST) << "asked, but this UCX cannot register CUDA memory";
  EXPECT_EQ(ucxPtrSupportFor(true, false), NCCL_PTR_HOST) << "iflush does not flush: not without the opt-in";
  EXPECT_EQ(ucxPtrSupportFor(true, true), NCCL_PTR_HOST | NCCL_PTR_CUDA);
}

TEST(UcxPtrSupport, OptInIsOffUnlessSet) {
  {
    Env unset("SIGNLION_UCX_CUDA_POINTERS", "");
    EXPECT_EQ(signlionParamUcxCudaPointers(), 0);
  }
  Env on("SIGNLION_UCX_CUDA_POINTERS", "1");
  EXPECT_EQ(signlionParamUcxCudaPointers(), 1);
}
