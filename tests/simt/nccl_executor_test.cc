// The NCCL executor's device path without a GPU: the executor, the
// DeviceBackend that maps every step onto kernels/ launchers and NCCL calls,
// and the kernels' own source on the SIMT emulator (tests/simt). NCCL is
// played by ranks as threads (common/fake_fabric.h) behind an NcclApi table, the one nccl_symbols.h
// fills from the real library, with NCCL's matching rule (a peer's
// point-to-point operations of a group in posting order). Device memory is
// the emulator's (a guard page after every buffer), so a launch that reads or
// writes past its scratch region, input or output faults. Every rank's output
// must equal the plain reference bit for bit.
//
// What stays for a GPU: stream and event semantics (the emulator runs every
// launch at once) and NCCL itself.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algo/schedule.h"
#include "bits/bits.h"
#include "common/config.h"
#include "common/fake_fabric.h"
#include "common/vote_inputs.h"
#include "common/warn_capture.h"
#include "nccl/call_agreement.h"
#include "nccl/device_backend.h"
#include "nccl/nccl_executor.h"
#include "nccl/nccl_plan.h"
#include "nccl/nccl_symbols.h"

// The runtime calls DeviceBackend makes beyond the emulator's (streams are
// synchronous there, so an event orders nothing that is not already done).
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  for (size_t row = 0; row < height; row++)
    memcpy(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
  return cudaSuccess;
}

namespace signlion {
namespace nccl {
namespace {

// The emulator runs one launch at a time, so one rank thread runs at a time:
// each holds the fabric's lock except while it waits for a message or a
// collective.
thread_local test::FakeFabric::Lock* tTurn = nullptr;

// One rank's end of the fabric; its address is the rank's ncclComm_t.
struct FakeComm {
  int rank = 0;
  test::FakeFabric* fabric = nullptr;
  struct Pending {
    int peer;
    void* data;
    size_t bytes;
  };
  std::vector<Pending> pending;  // receives posted in the open group
  int groupDepth = 0;
};
thread_local FakeComm* tComm = nullptr;  // ncclGroupStart/End name no comm

FakeComm* fake(ncclComm_t comm) { return reinterpret_cast<FakeComm*>(comm); }

ncclResult_t fakeGroupStart() {
  tComm->groupDepth++;
  return ncclSuccess;
}
ncclResult_t fakeGroupEnd() {
  FakeComm& c = *tComm;
  if (--c.groupDepth > 0) return ncclSuccess;
  for (const FakeComm::Pending& p : c.pending) c.fabric->take(*tTurn, p.peer, c.rank, p.data, p.bytes);
  c.pending.clear();
  return ncclSuccess;
}
ncclResult_t fakeSend(const void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || c.groupDepth == 0) return ncclInvalidUsage;
  c.fabric->post(*tTurn, c.rank, peer, buf, count * 8);
  return ncclSuccess;
}
ncclResult_t fakeRecv(void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || c.groupDepth == 0) return ncclInvalidUsage;
  c.pending.push_back({peer, buf, count * 8});
  return ncclSuccess;
}
ncclResult_t fakeAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64) return ncclInvalidUsage;
  c.fabric->allGather(*tTurn, c.rank, send, recv, count * 8);
  return ncclSuccess;
}
ncclResult_t fakeAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || op != ncclSum) return ncclInvalidUsage;
  c.fabric->allReduceSum(*tTurn, c.rank, static_cast<const uint64_t*>(send), static_cast<uint64_t*>(recv), count);
  return ncclSuccess;
}
ncclResult_t fakeAsyncError(ncclComm_t, ncclResult_t* err) {
  *err = ncclSuccess;
  return ncclSuccess;
}
const char* fakeErrorString(ncclResult_t) { return "fake NCCL error"; }

NcclApi fakeApi() {
  NcclApi api;
  api.version = 22809;
  api.getErrorString = fakeErrorString;
  api.commGetAsyncError = fakeAsyncError;
  api.groupStart = fakeGroupStart;
  api.groupEnd = fakeGroupEnd;
  api.send = fakeSend;
  api.recv = fakeRecv;
  api.allReduce = fakeAllReduce;
  api.allGather = fakeAllGather;
  return api;
}

struct Spec {
  ncclSignOp_t op;
  ncclSignZeroRule_t zero;
  ncclSignTieRule_t tie;
};

// Emulated device memory holding `bytes` (the guard page right after it).
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBytes() { cudaFree(p); }
};

// offset: element pointers that many elements past an allocation's start
// (off every vector alignment).
void runEmulated(ncclSignAlgo_t algo, int n, size_t count, ncclDataType_t dt, const Spec& sp, bool inPlace,
                 int64_t chunkBytes, size_t offset) {
  SCOPED_TRACE(std::string(algoName(algo)) + " N=" + std::to_string(n) + " count=" + std::to_string(count) + " " +
               bits::typeName(dt) + " op=" + std::to_string(sp.op) + " zero=" + std::to_string(sp.zero) +
               " tie=" + std::to_string(sp.tie) + (inPlace ? " in-place" : "") +
               " chunk=" + std::to_string(chunkBytes) + " offset=" + std::to_string(offset));
  const size_t bytes = count * bits::typeSize(dt), skip = offset * bits::typeSize(dt);
  std::vector<test::Bytes> in = test::randomVoteInputs(n, count, dt, 11 + (uint32_t)count + 17u * n);
  test::Bytes want = test::referenceOutput(in, count, dt, sp.op, sp.zero, sp.tie);
  const NcclApi api = fakeApi();
  test::FakeFabric fabric(n);
  std::vector<FakeComm> comms(n);
  std::vector<test::Bytes> out(n, test::Bytes(bytes));
  std::vector<ncclResult_t> res(n, ncclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    comms[r].rank = r;
    comms[r].fabric = &fabric;
    threads.emplace_back([&, r] {
      test::FakeFabric::Lock turn(fabric.mutex());
      tTurn = &turn;
      tComm = &comms[r];
      algo::Schedule s;
      Plan p;
      if (algo::buildSchedule(algo, n, r, algo::blocksForCount(count), algo::OpSpec{sp.op, sp.zero, sp.tie}, &s) !=
              ncclSuccess ||
          makePlan(s, chunkBytes, &p) != ncclSuccess)
        return;
      DeviceBytes scratch((size_t)p.layout.bytes()), sendAlloc(skip + bytes), recvAlloc(skip + bytes);
      char* send = static_cast<char*>(sendAlloc.p) + skip;
      char* recv = static_cast<char*>(recvAlloc.p) + skip;
      // Garbage where nothing was written yet: every word read must have been.
      memset(scratch.p, 0xA5, (size_t)p.layout.bytes());
      memcpy(inPlace ? recv : send, in[r].data(), bytes);
      if (!inPlace) memset(recv, 0xEE, bytes);
      int stream, side, fork, join;  // distinct handles; the emulator's streams are synchronous
      DeviceBackend backend(api, reinterpret_cast<ncclComm_t>(&comms[r]), reinterpret_cast<cudaStream_t>(&stream),
                            reinterpret_cast<cudaStream_t>(&side), reinterpret_cast<cudaEvent_t>(&fork),
                            reinterpret_cast<cudaEvent_t>(&join));
      res[r] = runSchedule(s, p, static_cast<uint64_t*>(scratch.p), inPlace ? recv : send, recv, count, dt, backend);
      memcpy(out[r].data(), recv, bytes);
      if (!inPlace && memcmp(send, in[r].data(), bytes) != 0) res[r] = ncclInternalError;  // input untouched
      tTurn = nullptr;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(fabric.drained()) << "messages left undelivered, or of another size than received";
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(res[r], ncclSuccess) << "rank " << r;
    size_t bad = test::firstMismatch(out[r], want);
    EXPECT_EQ(bad, std::string::npos) << "rank " << r << " first wrong element " << bad / bits::typeSize(dt);
  }
}

constexpr ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                     ncclSignAlgoFieldSum};
constexpr Spec kSpecs[] = {
    {ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero},
    {ncclSignMajority, ncclSignZeroNegative, ncclSignTiePositive},
    {ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero},
    {ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero},
    {ncclSignAverage, ncclSignZeroAbstain, ncclSignTieZero},
};

class NcclExecutorOnSimt : public ::testing::TestWithParam<ncclSignAlgo_t> {};

TEST_P(NcclExecutorOnSimt, DeviceBackendAndKernelsGiveTheReference) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  int variant = 0;
  for (int n = 1; n <= 16; n++)  // odd and even, powers of two and the folds between them
    for (size_t count : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4097}, size_t{70001}})
      for (const Spec& sp : kSpecs) {
        if (n > 8 && count == 70001) continue;  // the largest count at N <= 8 keeps the emulated run short
        variant++;
        ncclDataType_t dt = dts[variant % 4];
        if (dt == ncclInt8 && sp.op == ncclSignAverage) dt = ncclBfloat16;
        // Chunks of a few blocks, and whole transfers.
        runEmulated(GetParam(), n, count, dt, sp, variant % 2 == 0, variant % 3 == 0 ? 256 : int64_t{1} << 20,
                    variant % 5 == 0 ? 1 : 0);
        if (HasFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, NcclExecutorOnSimt, ::testing::ValuesIn(kAlgos),
                         [](const ::testing::TestParamInfo<ncclSignAlgo_t>& info) {
                           return std::string(algoName(info.param));
                         });

// SIGNLION_CHECK=1's signature check through DeviceBackend (copyIn, the
// all-gather, copyOut and its wait) on emulated device memory: agreeing ranks
// pass; when the last rank passed another count, every rank fails with
// ncclInvalidUsage naming it.
TEST(CallAgreementOnSimt, DeviceBackendCarriesTheSignatures) {
  const NcclApi api = fakeApi();
  for (int n : {2, 3, 4, 8}) {
    for (bool disagree : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(n) + (disagree ? " disagree" : " agree"));
      test::FakeFabric fabric(n);
      test::WarnCapture warns;
      std::vector<FakeComm> comms(n);
      std::vector<ncclResult_t> res(n, ncclInternalError);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; r++) {
        comms[r].rank = r;
        comms[r].fabric = &fabric;
        threads.emplace_back([&, r] {
          test::FakeFabric::Lock turn(fabric.mutex());
          tTurn = &turn;
          tComm = &comms[r];
          CallSignature mine;
          mine.seq = 3;
          mine.count = disagree && r == n - 1 ? 999 : 1000;
          mine.segment = 64 << 20;
          mine.rank = r;
          mine.kind = (uint8_t)CallKind::kSignAllReduce;
          mine.datatype = ncclBfloat16;
          DeviceBytes scratch(agreementWords(n) * 8);
          memset(scratch.p, 0xA5, agreementWords(n) * 8);
          std::vector<CallSignature> table(n);
          int stream, side, fork, join;
          DeviceBackend backend(api, reinterpret_cast<ncclComm_t>(&comms[r]), reinterpret_cast<cudaStream_t>(&stream),
                                reinterpret_cast<cudaStream_t>(&side), reinterpret_cast<cudaEvent_t>(&fork),
                                reinterpret_cast<cudaEvent_t>(&join));
          res[r] = checkAgreement(backend, mine, n, static_cast<uint64_t*>(scratch.p), table.data(), "test");
          tTurn = nullptr;
        });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < n; r++) EXPECT_EQ(res[r], disagree ? ncclInvalidUsage : ncclSuccess) << "rank " << r;
      EXPECT_EQ(warns.countContaining(" passed count "), disagree ? n : 0);
    }
  }
}

}  // namespace
}  // namespace nccl
}  // namespace signlion
