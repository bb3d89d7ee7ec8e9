// Distributed Lion's device optimizer in one process, without a
// communicator (aggregation "local"), against the host optimizer: the same
// parameters after every step, the same skipped steps, the same saved state
// (in both directions); host buffers refused. Without a GPU every test
// reports SKIPPED. (lion_kernel_test.cc: the passes alone;
// lion_nccl_mp_test.cc: the optimizer across processes on NCCL.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/lion_gpu_inputs.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;
using test::DeviceBuffer;
using test::floatBytes;
using test::inputs;
using test::sameElements;
using test::setFloat;

ncclSignLionConfig_t localConfig(bool master, bool skip) {
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.aggregation = ncclSignLionLocal;
  c.lr = 0.01f;
  c.weightDecay = 0.1f;
  c.masterWeights = master ? 1 : 0;
  c.skipNonFinite = skip ? 1 : 0;
  return c;
}

Bytes stateOf(ncclSignLion_t lion) {
  size_t bytes = 0;
  EXPECT_EQ(ncclSignLionGetStateSize(lion, &bytes), ncclSuccess);
  Bytes s(bytes);
  EXPECT_EQ(ncclSignLionSaveState(lion, s.data(), s.size()), ncclSuccess);
  return s;
}

// The optimizer on the device without a communicator ("local"), on a stream
// of its own, against the host optimizer: the same parameters after every
// step, the same skipped steps, the same saved state; a state saved on the
// host continues on the device.
TEST(LionDeviceOptimizer, LocalEqualsTheHostOptimizer) {
  REQUIRE_GPU();
  const size_t count = 4099;
  cudaStream_t stream;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16})
    for (bool master : {false, true}) {
      if (master && dt == ncclFloat32) continue;
      SCOPED_TRACE(std::string(bits::typeName(dt)) + (master ? " master" : ""));
      const ncclSignLionConfig_t c = localConfig(master, true);
      ncclSignLion_t host = nullptr, dev = nullptr;
      ASSERT_EQ(ncclSignLionCreate(&host, count, dt, &c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclSignLionCreateNccl(&dev, count, dt, &c, nullptr), ncclSuccess);
      const size_t bytes = count * bits::typeSize(dt);
      Bytes pHost = inputs(dt, count, 41, false);
      DeviceBuffer dp(bytes), dg(bytes);
      ASSERT_TRUE(dp.ok() && dg.ok());
      CUDA_ASSERT(dp.upload(0, pHost, stream));
      for (int s = 0; s < 6; s++) {
        Bytes g = inputs(dt, count, 50 + s, false);
        if (s == 3) setFloat(g, dt, count / 3, INFINITY);  // skipped on both
        CUDA_ASSERT(cudaMemcpyAsync(dg.at(0), g.data(), bytes, cudaMemcpyHostToDevice, stream));
        ASSERT_EQ(ncclSignLionStepAsync(dev, dp.at(0), dg.at(0), stream), ncclSuccess);
        int applied = -1;
        ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), &applied), ncclSuccess);
        EXPECT_EQ(applied, s == 3 ? 0 : 1);
        CUDA_ASSERT(cudaStreamSynchronize(stream));
        Bytes pDev(bytes);
        CUDA_ASSERT(dp.download(0, &pDev, stream));
        ASSERT_EQ(pDev, pHost) << "step " << s;
      }
      uint64_t a = 0, k = 0;
      ASSERT_EQ(ncclSignLionGetStepCount(dev, &a, &k), ncclSuccess);
      EXPECT_EQ(a, 5u);
      EXPECT_EQ(k, 1u);
      Bytes saved = stateOf(host);
      EXPECT_EQ(stateOf(dev), saved);

      // A host state continues on a fresh device optimizer.
      ncclSignLion_t dev2 = nullptr;
      ASSERT_EQ(ncclSignLionCreateNccl(&dev2, count, dt, &c, nullptr), ncclSuccess);
      ASSERT_EQ(ncclSignLionLoadState(dev2, saved.data(), saved.size()), ncclSuccess);
      Bytes g = inputs(dt, count, 99, false);
      CUDA_ASSERT(cudaMemcpyAsync(dg.at(0), g.data(), bytes, cudaMemcpyHostToDevice, stream));
      ASSERT_EQ(ncclSignLionStepAsync(dev2, dp.at(0), dg.at(0), stream), ncclSuccess);
      ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), nullptr), ncclSuccess);
      CUDA_ASSERT(cudaStreamSynchronize(stream));
      Bytes pDev(bytes);
      CUDA_ASSERT(dp.download(0, &pDev, stream));
      EXPECT_EQ(pDev, pHost);
      EXPECT_EQ(stateOf(dev2), stateOf(host));
      EXPECT_EQ(ncclSignLionDestroy(dev2), ncclSuccess);
      EXPECT_EQ(ncclSignLionDestroy(dev), ncclSuccess);
      EXPECT_EQ(ncclSignLionDestroy(host), ncclSuccess);
    }
  CUDA_ASSERT(cudaStreamDestroy(stream));
}

TEST(LionDeviceOptimizer, RefusesHostBuffers) {
  REQUIRE_GPU();
  const ncclSignLionConfig_t c = localConfig(false, false);
  ncclSignLion_t dev = nullptr;
  ASSERT_EQ(ncclSignLionCreateNccl(&dev, 16, ncclFloat32, &c, nullptr), ncclSuccess);
  std::vector<float> p(16, 1.0f), g(16, 1.0f);
  DeviceBuffer dp(64), dg(64);
  ASSERT_TRUE(dp.ok() && dg.ok());
  float* pinned = nullptr;
  CUDA_ASSERT(cudaMallocHost(&pinned, 64));
  EXPECT_EQ(ncclSignLionStepAsync(dev, p.data(), dg.at(0), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), g.data(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, pinned, dg.at(0), nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclSignLionStep(dev, dp.at(0), dg.at(0), nullptr), ncclInvalidUsage);
  // stream-order: ok (the step below runs on the legacy stream too)
  CUDA_ASSERT(cudaMemsetAsync(dg.at(0), 0, 64, nullptr));
  EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), dg.at(0), nullptr), ncclSuccess);
  CUDA_ASSERT(cudaDeviceSynchronize());
  CUDA_ASSERT(cudaFreeHost(pinned));
  EXPECT_EQ(ncclSignLionDestroy(dev), ncclSuccess);
}

}  // namespace
}  // namespace signlion
