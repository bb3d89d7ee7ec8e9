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
// The hierarchical algorithm runs here over every node layout of
// common/node_layouts.h, and through the comm context: host ids exchanged
// over the fake fabric, NCCL's grouping made by an emulated ncclCommSplit
// (once per comm, destroyed with the context).
//
// What stays for a GPU: stream and event semantics (the emulator runs every
// launch at once) and NCCL itself.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algo/schedule.h"
#include "bits/bits.h"
#include "common/config.h"
#include "common/fake_fabric.h"
#include "common/node_layouts.h"
#include "common/vote_inputs.h"
#include "common/warn_capture.h"
#include "nccl/call_agreement.h"
#include "nccl/comm_context.h"
#include "nccl/device_backend.h"
#include "nccl/nccl_executor.h"
#include "nccl/nccl_plan.h"
#include "nccl/nccl_params.h"
#include "nccl/nccl_symbols.h"
#include "nccl/node_groups.h"
#include "nccl/segments.h"
#include "nccl/sign_allreduce_nccl.h"
#include "simt/event_log.h"

namespace signlion {
namespace nccl {
namespace {

using simt::EventOp;

// The emulator runs one launch at a time, so one rank thread runs at a time:
// each holds the fabric's lock except while it waits for a message or a
// collective.
thread_local test::FakeFabric::Lock* tTurn = nullptr;

// One rank's end of the fabric; its address is the rank's ncclComm_t. A
// split comm (ncclCommSplit) names the parent ranks of its members in
// `world`; nothing of signlion's may run on one (node_groups.h), so every
// operation on it fails.
struct FakeComm {
  int rank = 0;
  int nranks = 0;
  test::FakeFabric* fabric = nullptr;
  std::vector<int> world;  // a split comm's members (parent ranks); empty: the parent
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
  if (dt != ncclUint64 || c.groupDepth == 0 || !c.world.empty()) return ncclInvalidUsage;
  c.fabric->post(*tTurn, c.rank, peer, buf, count * 8);
  return ncclSuccess;
}
ncclResult_t fakeRecv(void* buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || c.groupDepth == 0 || !c.world.empty()) return ncclInvalidUsage;
  c.pending.push_back({peer, buf, count * 8});
  return ncclSuccess;
}
ncclResult_t fakeAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || !c.world.empty()) return ncclInvalidUsage;
  c.fabric->allGather(*tTurn, c.rank, send, recv, count * 8);
  return ncclSuccess;
}
ncclResult_t fakeAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  FakeComm& c = *fake(comm);
  if (dt != ncclUint64 || op != ncclSum || !c.world.empty()) return ncclInvalidUsage;
  c.fabric->allReduceSum(*tTurn, c.rank, static_cast<const uint64_t*>(send), static_cast<uint64_t*>(recv), count);
  return ncclSuccess;
}
ncclResult_t fakeAsyncError(ncclComm_t, ncclResult_t* err) {
  *err = ncclSuccess;
  return ncclSuccess;
}
const char* fakeErrorString(ncclResult_t) { return "fake NCCL error"; }
ncclResult_t fakeCommCount(const ncclComm_t comm, int* n) {
  *n = fake(comm)->nranks;
  return ncclSuccess;
}
ncclResult_t fakeCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = fake(comm)->rank;
  return ncclSuccess;
}
ncclResult_t fakeCommCuDevice(const ncclComm_t, int* device) {
  *device = 0;
  return ncclSuccess;
}

// Split comms made and not yet destroyed, and splits ever made.
std::atomic<int> gLiveSplits{0};
std::atomic<int> gSplits{0};

// ncclCommSplit as NCCL defines it, collective over the parent: the ranks
// of one color form a comm, ranked by (key, parent rank).
ncclResult_t fakeCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  FakeComm& c = *fake(comm);
  if (!c.world.empty()) return ncclInvalidUsage;  // splits of splits are not emulated
  auto* split = new FakeComm;
  split->fabric = c.fabric;
  c.fabric->split(*tTurn, c.rank, color, key, &split->world, &split->rank);
  split->nranks = (int)split->world.size();
  gSplits++;
  gLiveSplits++;
  *newcomm = reinterpret_cast<ncclComm_t>(split);
  return ncclSuccess;
}
ncclResult_t fakeCommDestroy(ncclComm_t comm) {
  FakeComm* c = fake(comm);
  if (c->world.empty()) return ncclInvalidUsage;  // the test owns the parents
  delete c;
  gLiveSplits--;
  return ncclSuccess;
}

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
  api.commCount = fakeCommCount;
  api.commUserRank = fakeCommUserRank;
  api.commCuDevice = fakeCommCuDevice;
  api.commSplit = fakeCommSplit;
  api.commDestroy = fakeCommDestroy;
  return api;
}

// Runs body(rank, comm) on n rank threads over one fake fabric; each holds
// the fabric's lock except while it waits for a message or a collective.
void onFakeRanks(test::FakeFabric& fabric, const std::function<void(int, ncclComm_t)>& body) {
  const int n = fabric.size();
  std::vector<FakeComm> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    comms[r].rank = r;
    comms[r].nranks = n;
    comms[r].fabric = &fabric;
    threads.emplace_back([&, r] {
      test::FakeFabric::Lock turn(fabric.mutex());
      tTurn = &turn;
      tComm = &comms[r];
      body(r, reinterpret_cast<ncclComm_t>(&comms[r]));
      tTurn = nullptr;
    });
  }
  for (auto& t : threads) t.join();
}

// Distinct handles for DeviceBackend; the emulator's streams are synchronous.
// `malformed`: the flag a decode of a malformed coded result sets.
struct Lanes {
  int stream, side, fork, join;
  uint32_t malformed = 0;
  DeviceBackend backend(const NcclApi& api, ncclComm_t comm) {
    return DeviceBackend(api, comm, reinterpret_cast<cudaStream_t>(&stream), reinterpret_cast<cudaStream_t>(&side),
                         reinterpret_cast<cudaEvent_t>(&fork), reinterpret_cast<cudaEvent_t>(&join), &malformed);
  }
};

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
// (off every vector alignment). topo: the hierarchical algorithm's nodes.
void runEmulated(ncclSignAlgo_t algo, int n, size_t count, ncclDataType_t dt, const Spec& sp, bool inPlace,
                 int64_t chunkBytes, size_t offset, const algo::Topology* topo = nullptr) {
  SCOPED_TRACE(std::string(algoName(algo)) + " N=" + std::to_string(n) + " count=" + std::to_string(count) + " " +
               bits::typeName(dt) + " op=" + std::to_string(sp.op) + " zero=" + std::to_string(sp.zero) + " tie=" +
               std::to_string(sp.tie) + (inPlace ? " in-place" : "") + " chunk=" + std::to_string(chunkBytes) +
               " offset=" + std::to_string(offset) + (topo ? " nodes=" + test::layoutName(*topo) : ""));
  const size_t bytes = count * bits::typeSize(dt), skip = offset * bits::typeSize(dt);
  std::vector<test::Bytes> in = test::randomVoteInputs(n, count, dt, 11 + (uint32_t)count + 17u * n);
  test::Bytes want = test::referenceOutput(in, count, dt, sp.op, sp.zero, sp.tie);
  const NcclApi api = fakeApi();
  test::FakeFabric fabric(n);
  std::vector<test::Bytes> out(n, test::Bytes(bytes));
  std::vector<ncclResult_t> res(n, ncclInternalError);
  onFakeRanks(fabric, [&](int r, ncclComm_t comm) {
    algo::Schedule s;
    Plan p;
    if (algo::buildSchedule(algo, n, r, algo::blocksForCount(count), algo::OpSpec{sp.op, sp.zero, sp.tie}, &s, topo) !=
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
    Lanes lanes;
    DeviceBackend backend = lanes.backend(api, comm);
    res[r] = runSchedule(s, p, static_cast<uint64_t*>(scratch.p), inPlace ? recv : send, recv, count, dt, backend);
    if (lanes.malformed != 0) res[r] = ncclSystemError;  // a coded result this rank could not decode
    memcpy(out[r].data(), recv, bytes);
    if (!inPlace && memcmp(send, in[r].data(), bytes) != 0) res[r] = ncclInternalError;  // input untouched
  });
  EXPECT_TRUE(fabric.drained()) << "messages left undelivered, or of another size than received";
  for (int r = 0; r < n; r++) {
    ASSERT_EQ(res[r], ncclSuccess) << "rank " << r;
    size_t bad = test::firstMismatch(out[r], want);
    EXPECT_EQ(bad, std::string::npos) << "rank " << r << " first wrong element " << bad / bits::typeSize(dt);
  }
}

constexpr ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                     ncclSignAlgoFieldSum, ncclSignAlgoDirect, ncclSignAlgoTree};
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
      std::vector<ncclResult_t> res(n, ncclInternalError);
      onFakeRanks(fabric, [&](int r, ncclComm_t comm) {
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
        Lanes lanes;
        DeviceBackend backend = lanes.backend(api, comm);
        res[r] = checkAgreement(backend, mine, n, static_cast<uint64_t*>(scratch.p), table.data(), "test");
      });
      for (int r = 0; r < n; r++) EXPECT_EQ(res[r], disagree ? ncclInvalidUsage : ncclSuccess) << "rank " << r;
      EXPECT_EQ(warns.countContaining(" passed count "), disagree ? n : 0);
    }
  }
}

// The hierarchical schedule on the NCCL executor over every node layout
// (1..4 nodes of 1, 2, 3, 4, 8 ranks, unequal, interleaved), every op, zero
// and tie rule; across the counts each rule meets every datatype, in and
// out of place, chunks of a few blocks and whole transfers.
TEST(NcclExecutorHierarchicalOnSimt, EveryLayoutGivesTheReference) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  std::vector<Spec> specs;
  for (int z = 0; z < ncclSignNumZeroRules; z++) {
    for (int t = 0; t < ncclSignNumTieRules; t++)
      specs.push_back({ncclSignMajority, (ncclSignZeroRule_t)z, (ncclSignTieRule_t)t});
    specs.push_back({ncclSignAverage, (ncclSignZeroRule_t)z, ncclSignTieZero});
  }
  const size_t counts[] = {1, 63, 64, 65, 4097, 70001};
  for (const algo::Topology& topo : test::nodeLayouts()) {
    const int n = (int)topo.node.size();
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      if (n > 16 && counts[c] == 70001) continue;  // 4 x 8 at the largest count: long on the emulator
      for (size_t k = 0; k < specs.size(); k++) {
        if (counts[c] == 70001 && k % 3 != 0) continue;  // a few rules at the largest count
        ncclDataType_t dt = dts[(c + k) % 4];
        if (dt == ncclInt8 && specs[k].op == ncclSignAverage) dt = ncclBfloat16;
        runEmulated(ncclSignAlgoHierarchical, n, counts[c], dt, specs[k], (c + k) % 2 == 0,
                    (c + k) % 3 == 0 ? 256 : int64_t{1} << 20, (c + k) % 5 == 0 ? 1 : 0, &topo);
        if (HasFailure()) return;
      }
    }
  }
}

// What ranks with the host ids of `topo` (config.hostId "node-<i>") learn
// through CommContext::learnNodes over the fake fabric, then `calls`
// sign all-reduces of each count through the context (runSegments), each
// checked against the reference; then the plan the context makes for
// planCount elements; the context is released at the end.
struct ContextRun {
  std::vector<NodeGroups> learned;     // each rank's, before release
  std::vector<ncclSignAlgo_t> chosen;  // each rank's algorithm for planCount elements
  std::vector<bool> overTopology;      // and its schedule is the one over topo's nodes
  std::vector<ncclResult_t> res;
  std::vector<ncclResult_t> released;
};

ContextRun runThroughContext(const algo::Topology& topo, ncclSignAlgo_t algo, const NcclApi& api, int calls,
                             uint64_t planCount = 70001) {
  const int n = (int)topo.node.size();
  const size_t counts[] = {0, 1, 65, 4097, 70001};
  const ncclDataType_t dt = ncclBfloat16;
  const Spec sp{ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero};
  ContextRun run;
  run.learned.resize(n);
  run.chosen.assign(n, ncclSignAlgoAuto);
  run.overTopology.assign(n, false);
  run.res.assign(n, ncclSuccess);
  run.released.assign(n, ncclInternalError);
  test::FakeFabric fabric(n);
  onFakeRanks(fabric, [&](int r, ncclComm_t comm) {
    ResolvedConfig config;
    config.algorithm = algo;
    config.hostId = "node-" + std::to_string(topo.nodeOf(r));
    CommContext ctx(comm, CommShape{n, r, 0}, config);
    ncclResult_t& res = run.res[r];
    for (int call = 0; call < calls && res == ncclSuccess; call++) {
      for (size_t count : counts) {
        std::vector<test::Bytes> in = test::randomVoteInputs(n, count, dt, 5 + (uint32_t)count + 7u * call);
        test::Bytes want = test::referenceOutput(in, count, dt, sp.op, sp.zero, sp.tie);
        const size_t bytes = count * bits::typeSize(dt);
        DeviceBytes buf(bytes + 8);
        if (bytes > 0) memcpy(buf.p, in[r].data(), bytes);
        int stream;
        cudaStream_t s = reinterpret_cast<cudaStream_t>(&stream);
        bool capturing;
        res = ctx.beginCall(s, &capturing);
        if (res == ncclSuccess) res = ctx.learnNodes(api, s, capturing);
        if (res == ncclSuccess)
          res = runSegments(api, ctx, algo::OpSpec{sp.op, sp.zero, sp.tie}, static_cast<char*>(buf.p),
                            static_cast<char*>(buf.p), count, dt, s, capturing);
        if (res == ncclSuccess) res = ctx.endCall(s, capturing);
        if (res != ncclSuccess) break;
        if (bytes > 0 && memcmp(buf.p, want.data(), bytes) != 0) res = ncclInternalError;  // not the reference
      }
    }
    const algo::ScheduleCache<Plan>::Entry* entry = nullptr;
    if (res == ncclSuccess &&
        ctx.planFor(algo::blocksForCount(planCount), algo::OpSpec{sp.op, sp.zero, sp.tie}, &entry) == ncclSuccess) {
      const algo::Schedule& got = entry->schedule;
      run.chosen[r] = got.algo;
      algo::Schedule want;
      run.overTopology[r] = algo::buildSchedule(got.algo, n, r, got.nblocks, got.spec, &want, &topo) == ncclSuccess &&
                            want.steps.size() == got.steps.size() && want.bytesSent() == got.bytesSent() &&
                            want.bytesReceived() == got.bytesReceived();
    }
    run.learned[r] = ctx.nodes;
    run.released[r] = ctx.release();
  });
  EXPECT_TRUE(fabric.drained());
  return run;
}

// Host ids learned once per comm, NCCL's node comm made once per comm (by
// the first call, not per call) with this rank's node and local rank, the
// hierarchical schedule run over it bit for bit, and the node comm
// destroyed with the context. One node, or every rank its own node: no
// split, the flat model.
TEST(NcclNodeGroupsOnSimt, SplitOncePerCommAndReleasedWithIt) {
  const NcclApi api = fakeApi();
  for (const algo::Topology& topo : test::nodeLayouts()) {
    const int n = (int)topo.node.size();
    if (n > 12) continue;  // the layouts of 4 x 8 and 4 x 4 add nothing here but time
    SCOPED_TRACE("nodes " + test::layoutName(topo));
    const auto members = topo.members(n);
    const bool grouped = members.size() > 1 && (int)members.size() < n;
    const int splitsBefore = gSplits.load();
    ContextRun run = runThroughContext(topo, ncclSignAlgoHierarchical, api, 2);
    EXPECT_EQ(gSplits.load() - splitsBefore, grouped ? n : 0) << "one ncclCommSplit per rank and comm";
    EXPECT_EQ(gLiveSplits.load(), 0) << "node comms left after ncclSignCommRelease's release()";
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(run.res[r], ncclSuccess) << "rank " << r;
      EXPECT_EQ(run.released[r], ncclSuccess) << "rank " << r;
      const NodeGroups& g = run.learned[r];
      EXPECT_TRUE(g.learned);
      EXPECT_EQ(g.nodes, (int)members.size());
      EXPECT_EQ(g.hierarchical(), grouped);
      EXPECT_EQ(g.nodeComm != nullptr, grouped);
      if (grouped) {
        EXPECT_EQ(g.topology.node, topo.node) << "rank " << r;
        EXPECT_TRUE(run.overTopology[r]) << "rank " << r << ": not the schedule over the nodes";
      }
      EXPECT_EQ(run.chosen[r], ncclSignAlgoHierarchical);
    }
  }
}

// Auto on the NCCL path: 2 nodes x 4 grouped by host ids, a large message,
// inter-node links of a network (nccl_params.h's node cost model) choose
// the hierarchy; a small message or a flat comm do not.
TEST(NcclNodeGroupsOnSimt, AutoChoosesHierarchicalBetweenNodes) {
  algo::Topology two4;
  two4.node = {0, 0, 0, 0, 1, 1, 1, 1};
  const algo::OpSpec spec;
  ncclSignAlgo_t chosen;
  ASSERT_EQ(algo::chooseAlgorithm(8, uint64_t{64} << 20, spec, algo::kAllAlgorithms, ncclSignAlgoAuto,
                                  algo::CostModel(nodeCostParams()), &chosen, &two4),
            ncclSuccess);
  EXPECT_EQ(chosen, ncclSignAlgoHierarchical);
  ASSERT_EQ(algo::chooseAlgorithm(8, uint64_t{64} << 20, spec, algo::kAllAlgorithms, ncclSignAlgoAuto,
                                  algo::CostModel(costParams()), &chosen, nullptr),
            ncclSuccess);
  EXPECT_NE(chosen, ncclSignAlgoHierarchical);
  // Through the context: the calls run whatever auto picks for them, and
  // the plan of 64M elements is the hierarchical one over the nodes.
  const NcclApi api = fakeApi();
  ContextRun run = runThroughContext(two4, ncclSignAlgoAuto, api, 1, uint64_t{64} << 20);
  for (int r = 0; r < 8; r++) {
    EXPECT_EQ(run.res[r], ncclSuccess) << "rank " << r;
    EXPECT_EQ(run.chosen[r], ncclSignAlgoHierarchical) << "rank " << r;
    EXPECT_TRUE(run.learned[r].hierarchical());
    EXPECT_TRUE(run.overTopology[r]) << "rank " << r;
  }
  EXPECT_EQ(gLiveSplits.load(), 0);
}

// An NCCL without ncclCommSplit: a WARN on every rank, no grouping, and a
// forced hierarchical algorithm runs flat (as halving-doubling), still the
// reference.
TEST(NcclNodeGroupsOnSimt, WithoutCommSplitRunsFlat) {
  NcclApi api = fakeApi();
  api.commSplit = nullptr;
  api.commDestroy = nullptr;
  algo::Topology two3;
  two3.node = {0, 0, 0, 1, 1, 1};
  test::WarnCapture warns;
  const int splitsBefore = gSplits.load();
  ContextRun run = runThroughContext(two3, ncclSignAlgoHierarchical, api, 1);
  EXPECT_EQ(gSplits.load(), splitsBefore);
  EXPECT_EQ(warns.countContaining("has no ncclCommSplit"), 6);
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ(run.res[r], ncclSuccess) << "rank " << r;
    EXPECT_TRUE(run.learned[r].learned);
    EXPECT_FALSE(run.learned[r].hierarchical());
    EXPECT_EQ(run.chosen[r], ncclSignAlgoHierarchical);  // over no nodes: halving-doubling's messages
  }
}

// The entry point's rules (sign_allreduce_nccl.h, the body of
// ncclSignAllReduceWithConfig) on one comm: another user of the comm sets
// the comm's rules (ncclSignCommSetConfig, as a second optimizer or library
// would), yet each call runs by the rules it carries; a call without rules
// takes the comm's; ncclSignCommRelease (as an optimizer's close() makes)
// resets the comm's rules to the defaults but not a call's. Inputs of -1, 0
// and +1 tell every rule set apart, so a call run by any rules but its own
// fails the comparison.
TEST(NcclEntryOnSimt, CallsCarryTheirOwnRulesWhateverTheCommSets) {
  const NcclApi api = fakeApi();
  struct Call {
    bool release;  // ncclSignCommRelease before the call
    int zero, tie;  // the call's config; zero < -1: no config
    ncclSignZeroRule_t wantZero;
    ncclSignTieRule_t wantTie;
  };
  const int kNoConfig = -100;
  const Call calls[] = {
      {false, ncclSignZeroAbstain, ncclSignTieNegative, ncclSignZeroAbstain, ncclSignTieNegative},
      {false, ncclSignZeroPositive, ncclSignTieZero, ncclSignZeroPositive, ncclSignTieZero},
      {false, kNoConfig, 0, ncclSignZeroNegative, ncclSignTiePositive},  // the comm's, as set
      {false, NCCL_SIGN_RULE_OF_COMM, ncclSignTieZero, ncclSignZeroNegative, ncclSignTieZero},
      {true, ncclSignZeroAbstain, ncclSignTieNegative, ncclSignZeroAbstain, ncclSignTieNegative},
      {false, kNoConfig, 0, ncclSignZeroPositive, ncclSignTieZero},  // released: the defaults
      {true, ncclSignZeroPositive, ncclSignTiePositive, ncclSignZeroPositive, ncclSignTiePositive},
  };
  const size_t count = 1000;
  const ncclDataType_t dt = ncclFloat32;
  for (int n : {2, 3}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    const int ncalls = (int)(sizeof(calls) / sizeof(calls[0]));
    std::vector<std::vector<test::Bytes>> in(ncalls), want(ncalls);
    for (int k = 0; k < ncalls; k++) {
      std::mt19937 rng(40 + k);
      in[k].assign(n, test::Bytes(count * 4));
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) test::setElem(in[k][r], dt, i, (float)((int)(rng() % 3) - 1));
      want[k].push_back(test::referenceOutput(in[k], count, dt, ncclSignMajority, calls[k].wantZero, calls[k].wantTie));
      // The comm's rules at that point give another result: the call must not run by them.
      const bool commRules = calls[k].zero == kNoConfig || calls[k].zero == NCCL_SIGN_RULE_OF_COMM;
      if (!commRules)
        EXPECT_NE(want[k][0], test::referenceOutput(in[k], count, dt, ncclSignMajority, ncclSignZeroNegative,
                                                    ncclSignTiePositive))
            << "call " << k;
    }
    std::vector<std::vector<ncclResult_t>> res(n, std::vector<ncclResult_t>(ncalls, ncclInternalError));
    std::vector<std::vector<test::Bytes>> out(n, std::vector<test::Bytes>(ncalls));
    std::vector<ncclResult_t> set(n, ncclInternalError), released(n, ncclInternalError);
    test::FakeFabric fabric(n);
    onFakeRanks(fabric, [&](int r, ncclComm_t comm) {
      ncclSignConfig_t commConfig = NCCL_SIGN_CONFIG_INITIALIZER;
      commConfig.zeroRule = ncclSignZeroNegative;
      commConfig.tieRule = ncclSignTiePositive;
      set[r] = setCommConfig(&api, comm, &commConfig);
      int stream;
      cudaStream_t s = reinterpret_cast<cudaStream_t>(&stream);
      DeviceBytes buf(count * 4);
      for (int k = 0; k < ncalls; k++) {
        const Call& c = calls[k];
        if (c.release) (void)releaseComm(comm);
        ncclSignCallConfig_t config = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
        config.zeroRule = c.zero;
        config.tieRule = c.tie;
        memcpy(buf.p, in[k][r].data(), count * 4);
        res[r][k] = signAllReduce(&api, buf.p, buf.p, count, dt, ncclSignMajority,
                                  c.zero == kNoConfig ? nullptr : &config, comm, s, "ncclSignAllReduceWithConfig");
        out[r][k].assign(static_cast<uint8_t*>(buf.p), static_cast<uint8_t*>(buf.p) + count * 4);
      }
      released[r] = releaseComm(comm);
    });
    EXPECT_TRUE(fabric.drained());
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(set[r], ncclSuccess);
      EXPECT_EQ(released[r], ncclSuccess);
      for (int k = 0; k < ncalls; k++) {
        ASSERT_EQ(res[r][k], ncclSuccess) << "rank " << r << " call " << k;
        EXPECT_EQ(test::firstMismatch(out[r][k], want[k][0]), std::string::npos) << "rank " << r << " call " << k;
      }
    }
  }
}

// A coded result with a byte above 242 (the fabric delivers the 128-byte
// result shards of a 2-rank ring over 20 blocks with their first byte 0xff)
// is found by the decode kernel, which records the sender in the comm's flag:
// the call that took it has returned by then (on a GPU), so the next call on
// the comm fails, naming the peer, and so does every one after it.
TEST(NcclEntryOnSimt, MalformedCodedResultFailsTheCommsLaterCalls) {
  const NcclApi api = fakeApi();
  const size_t count = 20 * 64;
  test::FakeFabric fabric(2);
  fabric.corruptSize(128);
  std::vector<std::vector<ncclResult_t>> res(2, std::vector<ncclResult_t>(3, ncclInternalError));
  test::WarnCapture warns;
  onFakeRanks(fabric, [&](int r, ncclComm_t comm) {
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.algorithm = ncclSignAlgoRing;
    EXPECT_EQ(setCommConfig(&api, comm, &config), ncclSuccess);
    int stream;
    cudaStream_t s = reinterpret_cast<cudaStream_t>(&stream);
    DeviceBytes buf(count * 4);
    memset(buf.p, 0, count * 4);
    for (int k = 0; k < 3; k++)
      res[r][k] = signAllReduce(&api, buf.p, buf.p, count, ncclFloat32, ncclSignMajority, nullptr, comm, s, "fn");
    EXPECT_EQ(releaseComm(comm), ncclSuccess);
  });
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[r][0], ncclSuccess) << "rank " << r;  // the emulator ran the kernel inside the call
    EXPECT_EQ(res[r][1], ncclSystemError) << "rank " << r;
    EXPECT_EQ(res[r][2], ncclSystemError) << "rank " << r;
    const std::string line = "rank " + std::to_string(r) + " received a malformed coded result from rank " +
                             std::to_string(1 - r);
    EXPECT_EQ(warns.countContaining(line.c_str()), 2) << line;
  }
}

// Calls on one comm share its scratch, so each waits for the one before,
// whatever stream either ran on; a call captured into a CUDA graph does so at
// every replay, and the calls after a replay wait for it. The context asks
// CUDA for that with one event, the comm's last use: an eager call waits for
// it and records it; a captured call makes the same wait and record external
// event nodes (cudaEventWaitExternal, cudaEventRecordExternal), which each
// launch of the graph performs. The emulator runs everything at once, so
// this checks what the context asks of CUDA; the GPU test
// ReplayAndEagerCallsOnTwoStreamsWaitForEachOther checks the order itself.
TEST(NcclCommContextOnSimt, CallsInAndOutOfCaptureWaitForAndMarkTheCommsLastUse) {
  int comm, stream1, stream2;
  cudaStream_t s1 = reinterpret_cast<cudaStream_t>(&stream1), s2 = reinterpret_cast<cudaStream_t>(&stream2);
  CommContext ctx(reinterpret_cast<ncclComm_t>(&comm), CommShape{1, 0, 0}, ResolvedConfig{});
  std::vector<EventOp> log;
  simt::eventLog() = &log;
  auto call = [&](cudaStream_t s, bool capture) {
    simt::capturing() = capture;
    bool capturing = !capture;
    EXPECT_EQ(ctx.beginCall(s, &capturing), ncclSuccess);
    EXPECT_EQ(capturing, capture);
    EXPECT_EQ(ctx.endCall(s, capturing), ncclSuccess);
    simt::capturing() = false;
  };
  call(s1, false);  // the warm-up, eager
  call(s1, true);   // captured on s1
  call(s2, false);  // eager on s2 (after a replay of the capture, on a GPU)
  call(s2, true);   // captured on s2 (a second graph)
  simt::eventLog() = nullptr;
  ASSERT_EQ(log.size(), 8u);
  const cudaEvent_t lastUse = log[1].event;
  struct Want {
    char kind;
    cudaStream_t stream;
    unsigned int flags;
  };
  const Want want[] = {{'w', s1, cudaEventWaitDefault},  {'r', s1, cudaEventRecordDefault},
                       {'w', s1, cudaEventWaitExternal}, {'r', s1, cudaEventRecordExternal},
                       {'w', s2, cudaEventWaitDefault},  {'r', s2, cudaEventRecordDefault},
                       {'w', s2, cudaEventWaitExternal}, {'r', s2, cudaEventRecordExternal}};
  for (size_t i = 0; i < log.size(); i++) {
    SCOPED_TRACE("event operation " + std::to_string(i));
    EXPECT_EQ(log[i].kind, want[i].kind);
    EXPECT_EQ(log[i].stream, want[i].stream);
    EXPECT_EQ(log[i].event, lastUse);
    EXPECT_EQ(log[i].flags, want[i].flags);
  }
  EXPECT_EQ(ctx.release(), ncclSuccess);
}

// A call config the entry point cannot honour is refused before NCCL or the
// device is touched, with a WARN naming the field.
TEST(NcclEntryOnSimt, BadCallConfigIsNamed) {
  const NcclApi api = fakeApi();
  test::FakeFabric fabric(1);
  onFakeRanks(fabric, [&](int, ncclComm_t comm) {
    test::WarnCapture warns;
    DeviceBytes buf(64);
    int stream;
    cudaStream_t s = reinterpret_cast<cudaStream_t>(&stream);
    ncclSignCallConfig_t c = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
    c.zeroRule = ncclSignNumZeroRules;
    EXPECT_EQ(signAllReduce(&api, buf.p, buf.p, 4, ncclFloat32, ncclSignMajority, &c, comm, s, "fn"),
              ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->zeroRule'"), 1);
    c = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
    c.tieRule = ncclSignNumTieRules;
    EXPECT_EQ(signAllReduce(&api, buf.p, buf.p, 4, ncclFloat32, ncclSignMajority, &c, comm, s, "fn"),
              ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->tieRule'"), 1);
    c = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
    c.version = NCCL_SIGN_VERSION_CODE + 100;  // another minor version's layout
    EXPECT_EQ(signAllReduce(&api, buf.p, buf.p, 4, ncclFloat32, ncclSignMajority, &c, comm, s, "fn"),
              ncclInvalidArgument);
    EXPECT_EQ(warns.countContaining("'config->version'"), 1);
    EXPECT_EQ(releaseComm(comm), ncclSuccess);
  });
}

}  // namespace
}  // namespace nccl
}  // namespace signlion
