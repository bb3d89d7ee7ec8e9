// Distributed Lion's device optimizer in one process, without a
// communicator (aggregation "local"), against the host optimizer: the same
// parameters after every step, the same skipped steps, the same saved state
// (in both directions); host buffers refused; steps replayed from CUDA graphs
// ordered with steps on other streams. Without a GPU every test reports
// SKIPPED. (lion_kernel_test.cc: the passes alone;
// lion_nccl_mp_test.cc: the optimizer across processes on NCCL.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
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

// Steps share the optimizer's state (momentum, master copy, vote scratch),
// so each runs after the step enqueued before it on whatever stream, and so
// does each replay of a graph that captured a step: a replay on one stream
// and an eager step, or a second graph's replay, on another run in the order
// they were enqueued, the first held back (a 10 ms host function before it on
// its stream), so that steps not ordered would run the other way round. Two
// Lion steps do not commute (the momentum carries the first into the second;
// checked on the host for every pair), so the parameters after both equal
// the host optimizer's after the same two steps in that order only. A state
// saved right after a held replay holds its momentum and master copy.
TEST(LionDeviceOptimizer, ReplayedStepsAreOrderedWithStepsOnOtherStreams) {
  REQUIRE_GPU();
  const size_t count = 4099;
  const ncclDataType_t dt = ncclBfloat16;
  const size_t bytes = count * bits::typeSize(dt);
  const ncclSignLionConfig_t c = localConfig(true, true);
  cudaStream_t s1, s2;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_ASSERT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  ncclSignLion_t host = nullptr, dev = nullptr;
  ASSERT_EQ(ncclSignLionCreate(&host, count, dt, &c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclSignLionCreateNccl(&dev, count, dt, &c, nullptr), ncclSuccess);
  Bytes pHost = inputs(dt, count, 41, false);
  DeviceBuffer dp(bytes), gradsOn1(bytes), gradsOn2(bytes);  // the grads of the steps on s1, on s2
  ASSERT_TRUE(dp.ok() && gradsOn1.ok() && gradsOn2.ok());
  CUDA_ASSERT(dp.upload(0, pHost, s1));
  // The first step fills the master copy (decided when a step is enqueued):
  // eager, so that the graphs capture plain steps.
  uint32_t seed = 60;
  Bytes g = inputs(dt, count, seed++, false);
  CUDA_ASSERT(gradsOn1.upload(0, g, s1));
  ASSERT_EQ(ncclSignLionStepAsync(dev, dp.at(0), gradsOn1.at(0), s1), ncclSuccess);
  ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), nullptr), ncclSuccess);
  CUDA_ASSERT(cudaStreamSynchronize(s1));

  auto capture = [&](const DeviceBuffer& grads, cudaStream_t s) -> cudaGraphExec_t {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(ncclSignLionStepAsync(dev, dp.at(0), grads.at(0), s), ncclSuccess);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    if (graph != nullptr) {
      EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    return exec;
  };
  cudaGraphExec_t graph1 = capture(gradsOn1, s1), graph2 = capture(gradsOn2, s2);
  ASSERT_TRUE(graph1 != nullptr && graph2 != nullptr);
  auto hold = [](cudaStream_t s) {
    auto sleep10ms = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
    return cudaLaunchHostFunc(s, sleep10ms, nullptr);
  };
  // One step of the device optimizer: a graph's replay, or eager on s2.
  struct Step {
    const char* what;
    cudaStream_t stream;
    const DeviceBuffer* grads;
    std::function<cudaError_t()> run;
  };
  const Step replay1{"graph 1 replayed on s1", s1, &gradsOn1, [&] { return cudaGraphLaunch(graph1, s1); }};
  const Step replay2{"graph 2 replayed on s2", s2, &gradsOn2, [&] { return cudaGraphLaunch(graph2, s2); }};
  const Step eager2{"an eager step on s2", s2, &gradsOn2, [&] {
                      return ncclSignLionStepAsync(dev, dp.at(0), gradsOn2.at(0), s2) == ncclSuccess
                                 ? cudaSuccess
                                 : cudaErrorUnknown;
                    }};
  // The host optimizer's parameters after steps g1 then g2 from its state
  // now, on a copy (the host optimizer itself is left as it is).
  auto hostAfter = [&](const Bytes& g1, const Bytes& g2) {
    ncclSignLion_t other = nullptr;
    EXPECT_EQ(ncclSignLionCreate(&other, count, dt, &c, nullptr), ncclSuccess);
    const Bytes state = stateOf(host);
    EXPECT_EQ(ncclSignLionLoadState(other, state.data(), state.size()), ncclSuccess);
    Bytes p = pHost;
    EXPECT_EQ(ncclSignLionStep(other, p.data(), g1.data(), nullptr), ncclSuccess);
    EXPECT_EQ(ncclSignLionStep(other, p.data(), g2.data(), nullptr), ncclSuccess);
    EXPECT_EQ(ncclSignLionDestroy(other), ncclSuccess);
    return p;
  };
  auto pair = [&](const Step& first, const Step& second) {
    SCOPED_TRACE(std::string(first.what) + " (held), then " + second.what);
    const Bytes g1 = inputs(dt, count, seed++, false), g2 = inputs(dt, count, seed++, false);
    ASSERT_NE(hostAfter(g1, g2), hostAfter(g2, g1)) << "the two orders must differ for the check to tell them apart";
    CUDA_ASSERT(first.grads->upload(0, g1, first.stream));
    CUDA_ASSERT(hold(first.stream));
    CUDA_ASSERT(first.run());
    CUDA_ASSERT(second.grads->upload(0, g2, second.stream));
    CUDA_ASSERT(second.run());
    CUDA_ASSERT(cudaStreamSynchronize(first.stream));
    CUDA_ASSERT(cudaStreamSynchronize(second.stream));
    ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g1.data(), nullptr), ncclSuccess);
    ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g2.data(), nullptr), ncclSuccess);
    Bytes pDev(bytes);
    CUDA_ASSERT(dp.download(0, &pDev, s1));
    ASSERT_TRUE(sameElements(dt, pDev, pHost));
  };
  pair(replay1, eager2);
  pair(eager2, replay1);
  pair(replay1, replay2);

  // The state copies wait for a replay launched before them. The saved
  // state ends with the momentum and the master copy (the header's step
  // count is the host's count of steps called, which replays are not).
  g = inputs(dt, count, seed++, false);
  CUDA_ASSERT(gradsOn1.upload(0, g, s1));
  CUDA_ASSERT(hold(s1));
  CUDA_ASSERT(cudaGraphLaunch(graph1, s1));
  const Bytes saved = stateOf(dev);
  ASSERT_EQ(ncclSignLionStep(host, pHost.data(), g.data(), nullptr), ncclSuccess);
  const Bytes want = stateOf(host);
  const size_t tail = 2 * count * sizeof(float);
  ASSERT_EQ(saved.size(), want.size());
  ASSERT_GT(saved.size(), tail);
  EXPECT_TRUE(std::equal(saved.end() - tail, saved.end(), want.end() - tail))
      << "the momentum and master copy saved after a held replay";

  CUDA_ASSERT(cudaStreamSynchronize(s1));
  cudaGraphExecDestroy(graph1);
  cudaGraphExecDestroy(graph2);
  EXPECT_EQ(ncclSignLionDestroy(dev), ncclSuccess);
  EXPECT_EQ(ncclSignLionDestroy(host), ncclSuccess);
  CUDA_ASSERT(cudaStreamDestroy(s1));
  CUDA_ASSERT(cudaStreamDestroy(s2));
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
