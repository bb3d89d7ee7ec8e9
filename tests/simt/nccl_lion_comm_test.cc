// Distributed Lion's device optimizer (src/lion/nccl_lion_comm.cc) on the
// SIMT emulator, through its C entry points: how its steps order themselves
// against each other and against the copies of its state, in and out of CUDA
// graph capture. The emulator runs every launch at once, so the order itself
// is left to the GPU test (tests/gpu/lion_device_test.cc,
// LionDeviceOptimizer.ReplayedStepsAreOrderedWithStepsOnOtherStreams); here
// the log of what the optimizer asks of CUDA events (event_log.h) is read.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "nccl_sign.h"
#include "simt/event_log.h"

namespace signlion {
namespace {

using simt::EventOp;

struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBytes() { cudaFree(p); }
};

// A step reuses the momentum, master copy and vote scratch of the step
// before it, and the copies of the state (ncclSignLionGetStepCount, Save,
// Load) read them: every step waits for the optimizer's last-step event and
// records it, and each copy waits for it. A step captured into a CUDA graph
// must do so at every replay, whatever stream the replay and the steps
// around it run on: its wait and record are external event nodes
// (cudaEventWaitExternal, cudaEventRecordExternal), as ncclSignAllReduce's
// calls make theirs. Steps: eager on s1, captured on s1, eager on s2 (after
// a replay of the first graph, on a GPU), captured on s2 (a second graph);
// then the step count, copied on the optimizer's own stream.
TEST(NcclLionCommOnSimt, StepsInAndOutOfCaptureWaitForAndMarkTheLastStep) {
  const size_t count = 1000;
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.aggregation = ncclSignLionLocal;  // no communicator: the optimizer's own events only
  c.masterWeights = 1;
  c.skipNonFinite = 1;
  ncclSignLion_t lion = nullptr;
  ASSERT_EQ(ncclSignLionCreateNccl(&lion, count, ncclBfloat16, &c, nullptr), ncclSuccess);
  DeviceBytes params(count * 2), grads(count * 2);
  memset(params.p, 0x3f, count * 2);
  memset(grads.p, 0x3c, count * 2);
  int stream1, stream2;
  cudaStream_t s1 = reinterpret_cast<cudaStream_t>(&stream1), s2 = reinterpret_cast<cudaStream_t>(&stream2);

  std::vector<EventOp> log;
  simt::eventLog() = &log;
  auto step = [&](cudaStream_t s, bool capture) {
    simt::capturing() = capture;
    EXPECT_EQ(ncclSignLionStepAsync(lion, params.p, grads.p, s), ncclSuccess);
    simt::capturing() = false;
  };
  step(s1, false);
  step(s1, true);
  step(s2, false);
  step(s2, true);
  uint64_t applied = 0, skipped = 0;
  EXPECT_EQ(ncclSignLionGetStepCount(lion, &applied, &skipped), ncclSuccess);
  simt::eventLog() = nullptr;

  // Named so that a failure shows the whole sequence: the event of the first
  // record (the last-step event), the test's streams, and any other stream
  // as the optimizer's own.
  ASSERT_FALSE(log.empty());
  const cudaEvent_t stepped = log.size() > 1 ? log[1].event : nullptr;
  auto text = [&](const EventOp& op) {
    std::string s = op.kind == 'w' ? "wait on " : op.kind == 'r' ? "record on " : "? on ";
    s += op.stream == s1 ? "s1" : op.stream == s2 ? "s2" : "its own stream";
    s += op.event == stepped ? " of the last-step event" : " of another event";
    if (op.kind == 'w') s += op.flags == cudaEventWaitExternal ? " (external)" : op.flags == 0 ? "" : " (other flags)";
    if (op.kind == 'r') s += op.flags == cudaEventRecordExternal ? " (external)" : op.flags == 0 ? "" : " (other flags)";
    return s;
  };
  std::vector<std::string> got;
  for (const EventOp& op : log) got.push_back(text(op));
  const std::vector<std::string> want = {
      "wait on s1 of the last-step event",
      "record on s1 of the last-step event",
      "wait on s1 of the last-step event (external)",
      "record on s1 of the last-step event (external)",
      "wait on s2 of the last-step event",
      "record on s2 of the last-step event",
      "wait on s2 of the last-step event (external)",
      "record on s2 of the last-step event (external)",
      "wait on its own stream of the last-step event",
  };
  EXPECT_EQ(got, want);
  EXPECT_EQ(ncclSignLionDestroy(lion), ncclSuccess);
}

}  // namespace
}  // namespace signlion
