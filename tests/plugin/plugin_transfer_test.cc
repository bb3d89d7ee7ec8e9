// The plugin in one process: loading as NCCL does, every version's struct,
// and the behaviours NCCL's proxy relies on, driven through the dlopen'ed
// libnccl-net-signlion.so on loopback.
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "net/socket_device_table.h"
#include "net/socket_devices.h"
#include "net/socket_net.h"
#include "plugin_fixture.h"
#include "socket/socket_transport.h"
#include "socket/socket_wire.h"
#include "ucx/ucx_wire.h"

using namespace signlion::nettest;

// ---- Loading and structs ---------------------------------------------------------

TEST(PluginLoad, ByNameAndByPathExportEveryVersion) {
  // By name: NCCL_NET_PLUGIN=signlion makes NCCL dlopen "libnccl-net-signlion.so"
  // (found on the library search path; this binary's RUNPATH names the build's lib dir).
  for (const char* how : {"libnccl-net-signlion.so", SIGNLION_PLUGIN_PATH}) {
    std::string err;
    void* lib = openPlugin(how, &err);
    ASSERT_NE(lib, nullptr) << how << ": " << err;
    for (int v = 8; v <= 12; v++) {
      NetDriver d;
      ASSERT_TRUE(d.bind(lib, v)) << how << " lacks ncclNetPlugin_v" << v;
      EXPECT_STREQ(d.name(), "signlion") << "v" << v;
    }
    EXPECT_EQ(dlsym(lib, "ncclNetPlugin_v7"), nullptr);
    auto* v8 = static_cast<ncclNet_v8_t*>(dlsym(lib, "ncclNetPlugin_v8"));
    auto* v11 = static_cast<ncclNet_v11_t*>(dlsym(lib, "ncclNetPlugin_v11"));
    void* const* f8 = reinterpret_cast<void* const*>(&v8->init);
    for (int i = 0; i < 16; i++) EXPECT_NE(f8[i], nullptr) << "v8 function " << i;  // init .. closeListen
    void* const* f11 = reinterpret_cast<void* const*>(&v11->init);
    for (int i = 0; i < 16; i++) EXPECT_NE(f11[i], nullptr) << "v11 function " << i;
    EXPECT_NE(v11->finalize, nullptr);
    EXPECT_EQ(v11->setNetAttr, nullptr);  // optional in NCCL
    auto* v12 = static_cast<ncclNet_v12_t*>(dlsym(lib, "ncclNetPlugin_v12"));
    ASSERT_NE(v12, nullptr);
    void* const* f12 = reinterpret_cast<void* const*>(&v12->init);
    for (int i = 0; i < 16; i++) EXPECT_NE(f12[i], nullptr) << "v12 function " << i;
    EXPECT_NE(v12->finalize, nullptr);
    EXPECT_EQ(v12->setNetAttr, nullptr);
    dlclose(lib);
  }
}

TEST(PluginLoad, StructLayoutsMatchThePublishedInterface) {
  // Offsets NCCL compiles against (x86-64 / aarch64 LP64).
  EXPECT_EQ(offsetof(ncclNet_v8_t, irecvConsumed), 18 * sizeof(void*));
  EXPECT_EQ(sizeof(ncclNet_v8_t), 19 * sizeof(void*));
  EXPECT_EQ(sizeof(ncclNet_v9_t), 20 * sizeof(void*));
  EXPECT_EQ(sizeof(ncclNet_v10_t), 20 * sizeof(void*));
  EXPECT_EQ(sizeof(ncclNet_v11_t), 22 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclNet_v11_t, finalize), 20 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclNetProperties_v8_t, speed), 32u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, vProps), 64u);
  EXPECT_EQ(offsetof(ncclNetProperties_v9_t, maxP2pBytes), 88u);
  EXPECT_EQ(sizeof(ncclNetProperties_v10_t), sizeof(ncclNetProperties_v9_t));
  EXPECT_EQ(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize), 104u);
  EXPECT_EQ(sizeof(ncclNetProperties_v11_t), 112u);
  // v12 (NCCL 2.30.3+): eight devices per fused NIC move everything after
  // vProps by 16 bytes; rail and plane ids close the struct.
  EXPECT_EQ(sizeof(ncclNet_v12_t), 22 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclNet_v12_t, makeVDevice), 19 * sizeof(void*));
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, vProps), 64u);
  EXPECT_EQ(sizeof(ncclNetVDeviceProps_v12_t), 36u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, maxP2pBytes), 104u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize), 120u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, railId), 124u);
  EXPECT_EQ(offsetof(ncclNetProperties_v12_t, planeId), 126u);
  EXPECT_EQ(sizeof(ncclNetProperties_v12_t), 128u);
}

TEST_P(PluginTest, PropertiesAreHonest) {
  ncclNetProperties_v12_t p;
  ASSERT_EQ(net_.properties(dev_, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
  EXPECT_GT(p.speed, 0);
  EXPECT_GT(p.maxComms, 0);
  EXPECT_EQ(p.maxRecvs, 8);
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  if (GetParam() >= 9) {
    EXPECT_EQ(p.vProps.ndevs, 1);
    EXPECT_EQ(p.vProps.devs[0], dev_);
    EXPECT_EQ(p.maxP2pBytes, size_t(1) << 30);
    EXPECT_EQ(p.forceFlush, 0);
  }
  if (GetParam() >= 11) {
    EXPECT_EQ(p.maxMultiRequestSize, 1);
  }
  if (GetParam() >= 12) {  // no rail or plane known for an interface
    EXPECT_EQ(p.railId, NCCL_NET_ID_UNDEF);
    EXPECT_EQ(p.planeId, NCCL_NET_ID_UNDEF);
  }
}

TEST_P(PluginTest, TransfersAllSizesBitExact) {
  void *s, *r;
  pair(&s, &r);
  for (size_t size : {size_t(0), size_t(1), size_t(3), size_t(16384), size_t(16385), size_t(65536), size_t(65537),
                      size_t(131072), size_t(131073), size_t(1000003), size_t(4) << 20}) {
    std::string err;
    EXPECT_TRUE(transfer(net_, s, r, size, size, 3, &err)) << err;
    EXPECT_TRUE(transfer(net_, s, r, size, size + 777, 4, &err)) << "receive larger than message: " << err;
  }
  net_.closeSend(s);
  net_.closeRecv(r);
}

// NIC fusion's arguments (a real fusion of two interfaces needs two, which
// loopback cannot give: netns.multinic_fused_device makes them).
// v9 and later: v8 has no makeVDevice.
class PluginFusion : public PluginTest {};

TEST_P(PluginFusion, MakeVDeviceChecksItsArguments) {
  int ndev = 0;
  ASSERT_EQ(net_.devices(&ndev), ncclSuccess);
  int d = -1;
  const int one[] = {dev_};
  EXPECT_EQ(net_.makeVDevice(1, one, &d), ncclSuccess);
  EXPECT_EQ(d, dev_) << "one device fuses into itself";
  const int twice[] = {dev_, dev_};
  EXPECT_EQ(net_.makeVDevice(2, twice, &d), ncclInvalidArgument);
  const int missing[] = {dev_, ndev + 3};
  EXPECT_EQ(net_.makeVDevice(2, missing, &d), ncclInvalidArgument);
  EXPECT_EQ(net_.makeVDevice(0, one, &d), ncclInvalidArgument);
  const int five[] = {0, 1, 2, 3, 4};
  EXPECT_EQ(net_.makeVDevice(5, five, &d), ncclInvalidArgument) << "at most 4 interfaces per fused device";
  int after = 0;
  ASSERT_EQ(net_.devices(&after), ncclSuccess);
  EXPECT_EQ(after, ndev) << "nothing was made";
}

INSTANTIATE_TEST_SUITE_P(Versions, PluginTest, ::testing::Values(8, 9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
INSTANTIATE_TEST_SUITE_P(Versions, PluginFusion, ::testing::Values(9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });

// The remaining behaviours are version independent: run them on v11.
class PluginV11 : public PluginTest {};

TEST_P(PluginV11, GroupedReceiveMatchesByTag) {
  void *s, *r;
  pair(&s, &r);
  const int n = 3;
  std::vector<char> in[n], out[n];
  size_t sizes[n] = {100, 200000, 0};
  int tags[n] = {5, 6, 7};
  void* data[n];
  size_t caps[n];
  for (int i = 0; i < n; i++) {
    in[i].resize(sizes[i] + 1);
    fillPattern(in[i].data(), sizes[i], 40 + i);
    out[i].assign(sizes[i] + 64, 0);
    data[i] = out[i].data();
    caps[i] = out[i].size();
  }
  void* rreq = nullptr;
  ASSERT_EQ(net_.irecv(r, n, data, caps, tags, nullptr, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  void* sreq[n] = {};
  for (int i : {1, 2, 0}) {  // send order differs from the posted order
    ASSERT_EQ(net_.isend(s, in[i].data(), sizes[i], tags[i], nullptr, &sreq[i]), ncclSuccess);
    ASSERT_NE(sreq[i], nullptr);
  }
  int got[n] = {-1, -1, -1};
  ASSERT_EQ(waitReq(rreq, got), ncclSuccess);
  for (int i = 0; i < n; i++) {
    int sz = -1;
    ASSERT_EQ(waitReq(sreq[i], &sz), ncclSuccess);
    EXPECT_EQ(sz, (int)sizes[i]);
    EXPECT_EQ(got[i], (int)sizes[i]);
    EXPECT_EQ(checkPattern(out[i].data(), sizes[i], 40 + i), SIZE_MAX) << "sub " << i;
  }
  net_.closeSend(s);
  net_.closeRecv(r);
}

TEST_P(PluginV11, MessageLargerThanReceiveIsAnError) {
  void *s, *r;
  pair(&s, &r);
  for (size_t size : {size_t(100), size_t(1) << 20}) {  // inline and striped
    void *s2, *r2;
    pair(&s2, &r2);
    std::vector<char> buf(size);
    void* d = buf.data();
    size_t cap = size - 1;
    int tag = 0;
    void *rreq = nullptr, *sreq = nullptr;
    ASSERT_EQ(net_.irecv(r2, 1, &d, &cap, &tag, nullptr, &rreq), ncclSuccess);
    ASSERT_EQ(net_.isend(s2, buf.data(), size, 0, nullptr, &sreq), ncclSuccess);
    EXPECT_EQ(waitReq(rreq, nullptr), ncclInvalidUsage) << size;
    net_.closeSend(s2);
    net_.closeRecv(r2);
  }
  net_.closeSend(s);
  net_.closeRecv(r);
}

TEST_P(PluginV11, FullRequestTableReturnsNoRequestUntilOneCompletes) {
  void *s, *r;
  pair(&s, &r);
  std::vector<char> buf(1 << 20);
  std::vector<void*> reqs;
  void* req = nullptr;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    ASSERT_EQ(net_.isend(s, buf.data(), 16, i, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr) << i;
    reqs.push_back(req);
  }
  ASSERT_EQ(net_.isend(s, buf.data(), 16, 99, nullptr, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  // Receives too: same table size.
  std::vector<void*> rreqs;
  std::vector<std::vector<char>> rbuf(NCCL_NET_MAX_REQUESTS, std::vector<char>(16));
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    void* d = rbuf[i].data();
    size_t cap = 16;
    int tag = i;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
    rreqs.push_back(req);
  }
  void* d = buf.data();
  size_t cap = 16;
  int tag = 0;
  ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  int sz = -1;
  ASSERT_EQ(waitReq(reqs[0], &sz), ncclSuccess);
  EXPECT_EQ(sz, 16);
  // A slot is free again: the retried isend is posted.
  ASSERT_EQ(net_.isend(s, buf.data(), 16, 32, nullptr, &req), ncclSuccess);
  EXPECT_NE(req, nullptr);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// A receiver that never posts a receive: inline messages fill the control
// stream's socket buffers, and the sender's test() reports an error once the
// stream has been blocked for SIGNLION_SOCKET_TIMEOUT, instead of spinning
// for ever (the stall clock starts when a message stops part-way).
TEST_P(PluginV11, ControlStreamBlockedLongerThanTimeoutIsAnError) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "1000");
  Env inl("SIGNLION_SOCKET_INLINE", "1048576");
  void *s, *r;
  pair(&s, &r);
  std::vector<char> buf(1 << 20);
  void* last = nullptr;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {  // 32 MiB: more than the socket buffers hold
    void* req = nullptr;
    ASSERT_EQ(net_.isend(s, buf.data(), buf.size(), i, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr) << i;
    last = req;
  }
  int64_t start = nowMs();
  EXPECT_EQ(waitReq(last, nullptr, 20000), ncclRemoteError);
  EXPECT_LT(nowMs() - start, 10000);
  net_.closeSend(s);
  net_.closeRecv(r);
}

TEST_P(PluginV11, IflushIsANoOpForHostMemory) {
  void *s, *r;
  pair(&s, &r);
  char b[8];
  void* d = b;
  int size = 8;
  void* req = reinterpret_cast<void*>(1);
  EXPECT_EQ(net_.iflush(r, 1, &d, &size, nullptr, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr);
  net_.closeSend(s);
  net_.closeRecv(r);
}

TEST_P(PluginV11, CloseAndDeregisterWithRequestsInFlight) {
  for (int round = 0; round < 3; round++) {
    void *s, *r;
    pair(&s, &r);
    std::vector<char> src(8 << 20, 1), dst(8 << 20);
    void *smr, *rmr;
    ASSERT_EQ(net_.regMr(s, src.data(), src.size(), &smr), ncclSuccess);
    ASSERT_EQ(net_.regMr(r, dst.data(), dst.size(), &rmr), ncclSuccess);
    void* req = nullptr;
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(net_.isend(s, src.data() + i * (2 << 20), 2 << 20, i, smr, &req), ncclSuccess);
      void* d = dst.data() + i * (2 << 20);
      size_t cap = 2 << 20;
      int tag = i;
      if (round != 1) {
        ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, &rmr, &req), ncclSuccess);
      }
    }
    int done = 0;
    if (round == 2) {
      ASSERT_EQ(net_.test(req, &done, nullptr), ncclSuccess);  // partly progressed
    }
    EXPECT_EQ(net_.deregMr(s, smr), ncclSuccess);
    EXPECT_EQ(net_.deregMr(r, rmr), ncclSuccess);
    // Closing in either order frees the comm, its threads and requests.
    if (round == 0) {
      EXPECT_EQ(net_.closeSend(s), ncclSuccess);
      EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
    } else {
      EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
      EXPECT_EQ(net_.closeSend(s), ncclSuccess);
    }
  }
}

TEST_P(PluginV11, OneListenCommAcceptsManyConnections) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  const int kConns = 6;
  std::vector<void*> sends(kConns, nullptr), recvs;
  // Each connect keeps its state in its own copy of the handle.
  std::vector<std::vector<char>> copies(kConns, std::vector<char>(handle, handle + sizeof(handle)));
  std::vector<char*> h(kConns);
  for (int i = 0; i < kConns; i++) h[i] = copies[i].data();
  // Three connected one after the other, three started together (connect
  // and accept in turns: docs/dev/PLUGIN_INTERNALS.md, "Connect and accept").
  std::string err;
  for (int i = 0; i < 3; i++) ASSERT_EQ(connectAccept(net_, dev_, l, 1, &h[i], &sends[i], &recvs, &err), ncclSuccess) << err;
  ASSERT_EQ(connectAccept(net_, dev_, l, 3, &h[3], &sends[3], &recvs, &err), ncclSuccess) << err;
  ASSERT_EQ((int)recvs.size(), kConns);
  ASSERT_EQ(net_.closeListen(l), ncclSuccess);
  // Each sender's message arrives on exactly one receiver, intact.
  std::vector<std::vector<char>> src(kConns, std::vector<char>(300000)), dst(kConns, std::vector<char>(300000));
  std::vector<void*> sreq(kConns), rreq(kConns);
  for (int i = 0; i < kConns; i++) {
    fillPattern(src[i].data(), src[i].size(), 900 + i);
    ASSERT_EQ(net_.isend(sends[i], src[i].data(), src[i].size(), 1, nullptr, &sreq[i]), ncclSuccess);
    void* d = dst[i].data();
    size_t cap = dst[i].size();
    int tag = 1;
    ASSERT_EQ(net_.irecv(recvs[i], 1, &d, &cap, &tag, nullptr, &rreq[i]), ncclSuccess);
  }
  std::vector<int> seen(kConns, 0);
  for (int i = 0; i < kConns; i++) {
    ASSERT_EQ(waitReq(sreq[i], nullptr), ncclSuccess);
    ASSERT_EQ(waitReq(rreq[i], nullptr), ncclSuccess);
    for (int j = 0; j < kConns; j++)
      if (checkPattern(dst[i].data(), dst[i].size(), 900 + j) == SIZE_MAX) seen[j]++;
  }
  for (int j = 0; j < kConns; j++) EXPECT_EQ(seen[j], 1) << "message of sender " << j;
  for (int i = 0; i < kConns; i++) {
    net_.closeSend(sends[i]);
    net_.closeRecv(recvs[i]);
  }
}

TEST_P(PluginV11, ThreadsDriveSeparateCommsAtOnce) {
  const int kThreads = 4;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      void *s, *r;
      std::string err;
      if (connectPair(net_, dev_, &s, &r, &err) != ncclSuccess) {
        errors[t] = err;
        return;
      }
      for (size_t size : {size_t(10), size_t(70000), size_t(3) << 20}) {
        if (!transfer(net_, s, r, size, size + t, t, &err)) {
          errors[t] = err;
          break;
        }
      }
      net_.closeSend(s);
      net_.closeRecv(r);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; t++) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// Messages sent before their receive is posted: the receiver's first recv()
// pulls several headers and inline payloads into its staging buffer at once;
// they wait there (and in the sockets) until a receive claims each in turn.
TEST_P(PluginV11, MessagesSentBeforeTheirReceiveIsPostedWaitBitExact) {
  void *s, *r;
  pair(&s, &r);
  const std::vector<size_t> sizes = {0, 1, 8, 100, 4095, 16384, 16385, 70000, 9, 300000, 16384, 3, 0, 5000};
  const size_t n = sizes.size();
  std::vector<std::vector<char>> in(n), out(n);
  std::vector<void*> sreq(n, nullptr);
  for (size_t i = 0; i < n; i++) {
    in[i].resize(sizes[i] + 1);
    fillPattern(in[i].data(), sizes[i], 500 + i);
    ASSERT_EQ(net_.isend(s, in[i].data(), sizes[i], 9, nullptr, &sreq[i]), ncclSuccess);
    ASSERT_NE(sreq[i], nullptr) << i;
  }
  // Let the sender push what it can while nothing is posted on the other side.
  for (int k = 0; k < 20; k++) {
    for (size_t i = 0; i < n; i++) {
      int done = 0;
      if (sreq[i] != nullptr) {
        ASSERT_EQ(net_.test(sreq[i], &done, nullptr), ncclSuccess);
      }
      if (done) sreq[i] = nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (size_t i = 0; i < n; i++) {
    out[i].assign(sizes[i] + 64, 0);
    void* d = out[i].data();
    size_t cap = out[i].size();
    int tag = 9;
    void* rreq = nullptr;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &rreq), ncclSuccess);
    ASSERT_NE(rreq, nullptr);
    int got = -1;
    // The sender's remaining data-stream bytes move while the receiver waits.
    int64_t start = nowMs();
    int done = 0;
    while (!done && nowMs() - start < kLoopLimitMs) {
      ASSERT_EQ(net_.test(rreq, &done, &got), ncclSuccess);
      for (size_t j = 0; j < n; j++) {
        int sdone = 0;
        if (sreq[j] != nullptr) {
          ASSERT_EQ(net_.test(sreq[j], &sdone, nullptr), ncclSuccess);
        }
        if (sdone) sreq[j] = nullptr;
      }
    }
    ASSERT_EQ(done, 1) << "message " << i;
    EXPECT_EQ(got, (int)sizes[i]) << "message " << i;
    EXPECT_EQ(checkPattern(out[i].data(), sizes[i], 500 + i), SIZE_MAX) << "message " << i;
  }
  for (size_t i = 0; i < n; i++) {
    if (sreq[i] != nullptr) {
      EXPECT_EQ(waitReq(sreq[i], nullptr), ncclSuccess) << i;
    }
  }
  uint64_t sent = 0, recvd = 0, dummy;
  ASSERT_TRUE(signlion::net::commBytes(s, &sent, &dummy));
  ASSERT_TRUE(signlion::net::commBytes(r, &dummy, &recvd));
  // The socket transport counts its 8-byte message header on the wire;
  // the UCX transport counts payload only (UCX's own headers are hidden).
  uint64_t expect = socketTransport() ? 8 * n : 0;
  for (size_t sz : sizes) expect += sz;
  EXPECT_EQ(sent, expect);
  EXPECT_EQ(recvd, expect);
  net_.closeSend(s);
  net_.closeRecv(r);
}

namespace {

// One thread's side of a two-way stream of medium messages: it sends on
// `s` and receives on `r`, keeping up to kWindow of each in flight, and checks
// every received byte. Returns "" or what went wrong.
std::string mediumTraffic(NetDriver& net, void* s, void* r, uint64_t sendSeed, uint64_t recvSeed, int count) {
  const size_t kSizes[] = {32768, 131072, 131073, 262144, 524288, 40000, 16385, 200000};
  const int kWindow = 8;
  const size_t kCap = 524288 + 64;
  auto sizeOf = [&](int k) { return kSizes[k % (sizeof(kSizes) / sizeof(kSizes[0]))]; };
  std::vector<std::vector<char>> sbuf(kWindow, std::vector<char>(kCap)), rbuf(kWindow, std::vector<char>(kCap));
  std::vector<void*> sreq(kWindow, nullptr), rreq(kWindow, nullptr);
  std::vector<int> sIdx(kWindow, -1), rIdx(kWindow, -1);
  int sent = 0, received = 0, sPosted = 0, rPosted = 0;
  int64_t start = nowMs();
  while (sent < count || received < count) {
    if (nowMs() - start > kLoopLimitMs) return "timed out";
    for (int w = 0; w < kWindow; w++) {
      if (sreq[w] == nullptr && sPosted < count) {
        fillPattern(sbuf[w].data(), sizeOf(sPosted), sendSeed + sPosted);
        if (net.isend(s, sbuf[w].data(), sizeOf(sPosted), 7, nullptr, &sreq[w]) != ncclSuccess) return "isend";
        if (sreq[w] != nullptr) sIdx[w] = sPosted++;
      }
      if (rreq[w] == nullptr && rPosted < count) {
        void* d = rbuf[w].data();
        size_t cap = kCap;
        int tag = 7;
        if (net.irecv(r, 1, &d, &cap, &tag, nullptr, &rreq[w]) != ncclSuccess) return "irecv";
        if (rreq[w] != nullptr) rIdx[w] = rPosted++;
      }
      int done = 0, size = -1;
      if (sreq[w] != nullptr) {
        if (net.test(sreq[w], &done, nullptr) != ncclSuccess) return "test send";
        if (done) sreq[w] = nullptr, sent++;
      }
      done = 0;
      if (rreq[w] != nullptr) {
        if (net.test(rreq[w], &done, &size) != ncclSuccess) return "test recv";
        if (done) {
          int k = rIdx[w];
          if (size != (int)sizeOf(k)) return "message " + std::to_string(k) + ": size " + std::to_string(size);
          size_t bad = checkPattern(rbuf[w].data(), sizeOf(k), recvSeed + k);
          if (bad != SIZE_MAX) return "message " + std::to_string(k) + ": wrong byte at " + std::to_string(bad);
          rreq[w] = nullptr;
          received++;
        }
      }
    }
  }
  return "";
}

}  // namespace

// Many 32 KiB .. 512 KiB messages in flight both ways at once, on default
// settings and with small chunks: the callers move data-stream bytes inside
// isend/irecv/test while the helper threads move the rest, on the same
// streams. Every byte is checked; the byte counters must come out exact.
TEST_P(PluginV11, ManyMediumMessagesInFlightBothWaysBitExact) {
  for (const char* chunk : {"131072", "32768"}) {
    Env env("SIGNLION_SOCKET_CHUNKSIZE", chunk);
    void *s1, *r1, *s2, *r2;
    pair(&s1, &r1);  // thread A -> thread B
    pair(&s2, &r2);  // thread B -> thread A
    const int kCount = 150;
    std::string errA, errB;
    std::thread a([&] { errA = mediumTraffic(net_, s1, r2, 1000, 2000, kCount); });
    std::thread b([&] { errB = mediumTraffic(net_, s2, r1, 2000, 1000, kCount); });
    a.join();
    b.join();
    EXPECT_EQ(errA, "") << "chunk " << chunk;
    EXPECT_EQ(errB, "") << "chunk " << chunk;
    uint64_t sent1, recvd1, sent2, recvd2, dummy;
    ASSERT_TRUE(signlion::net::commBytes(s1, &sent1, &dummy));
    ASSERT_TRUE(signlion::net::commBytes(r1, &dummy, &recvd1));
    ASSERT_TRUE(signlion::net::commBytes(s2, &sent2, &dummy));
    ASSERT_TRUE(signlion::net::commBytes(r2, &dummy, &recvd2));
    EXPECT_EQ(sent1, recvd1);
    EXPECT_EQ(sent2, recvd2);
    EXPECT_EQ(sent1, sent2);  // the same sizes went each way
    net_.closeSend(s1);
    net_.closeRecv(r1);
    net_.closeSend(s2);
    net_.closeRecv(r2);
  }
}

// ---- Control-connection pairing (socket_pairing.h) -------------------------
//
// Two connections between the same two "ranks" (here both in this process)
// share one control connection after a round trip: one sender offers, the
// other moves. Which comm plays which role depends on registration order, so
// every test below holds whichever way round it went.

namespace {

// Tests every request until all are done; sizes[i] gets request i's size.
// Returns "" or what went wrong.
std::string driveAll(NetDriver& net, std::vector<void*> reqs, std::vector<int>* sizes) {
  sizes->assign(reqs.size(), -1);
  size_t left = reqs.size();
  int64_t start = nowMs();
  while (left > 0) {
    if (nowMs() - start > kLoopLimitMs) return "timed out with " + std::to_string(left) + " requests left";
    for (size_t i = 0; i < reqs.size(); i++) {
      if (reqs[i] == nullptr) continue;
      int done = 0;
      if (net.test(reqs[i], &done, &(*sizes)[i]) != ncclSuccess) return "test failed on request " + std::to_string(i);
      if (done) reqs[i] = nullptr, left--;
    }
  }
  return "";
}

// Posts a small receive on r (driven by net) and tests it until it ends or
// 10 s pass; what test() returned (ncclInternalError if it never ended).
ncclResult_t receiveResult(NetDriver& net, void* r) {
  std::vector<char> buf(64);
  void* data = buf.data();
  size_t cap = buf.size();
  int tag = 3;
  void* req = nullptr;
  if (net.irecv(r, 1, &data, &cap, &tag, nullptr, &req) != ncclSuccess || req == nullptr) return ncclInternalError;
  int done = 0;
  ncclResult_t res = ncclSuccess;
  int64_t start = nowMs();
  while (res == ncclSuccess && !done && nowMs() - start < 10000) res = net.test(req, &done, nullptr);
  return res == ncclSuccess ? ncclInternalError : res;
}

}  // namespace

TEST_P(PluginV11, PairedControlConnectionKeepsOrderAcrossTheSwitch) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  void *s[2], *r[2];
  pair(&s[0], &r[0]);
  pair(&s[1], &r[1]);
  // Inline, empty, multi-chunk and helper-sized messages in each half.
  const std::vector<size_t> sizes = {0, 8, 5000, 65536, 70000, size_t(3) << 20, 8, size_t(1) << 20, 100, 0};
  const size_t n = sizes.size(), half = n / 2;
  std::vector<char> src[2][10], dst[2][10];
  std::vector<void*> sreq[2], rreq[2];
  for (int d = 0; d < 2; d++) {
    sreq[d].assign(n, nullptr);
    rreq[d].assign(n, nullptr);
    for (size_t i = 0; i < n; i++) {
      src[d][i].resize(std::max<size_t>(sizes[i], 1));
      dst[d][i].assign(sizes[i] + 64, 0x5a);
      fillPattern(src[d][i].data(), sizes[i], 4000 + 100 * d + i);
    }
  }
  auto postSends = [&](int d, size_t begin) {
    for (size_t i = begin; i < begin + half; i++)
      ASSERT_EQ(net_.isend(s[d], src[d][i].data(), sizes[i], (int)i, nullptr, &sreq[d][i]), ncclSuccess);
  };
  auto postRecvs = [&](int d, size_t begin) {
    for (size_t i = begin; i < begin + half; i++) {
      void* data = dst[d][i].data();
      size_t cap = dst[d][i].size();
      int tag = (int)i;
      ASSERT_EQ(net_.irecv(r[d], 1, &data, &cap, &tag, nullptr, &rreq[d][i]), ncclSuccess);
    }
  };
  // 1. Both senders post their first half. The offering sender writes its
  // offer ahead of its first message; the other one is the mover.
  postSends(0, 0);
  postSends(1, 0);
  bool offered0 = signlion::net::commSharesControl(s[0]);
  bool offered1 = signlion::net::commSharesControl(s[1]);
  ASSERT_NE(offered0, offered1) << "exactly one sender offers";
  const int off = offered0 ? 0 : 1, mov = 1 - off;
  // 2. The offer's reader takes the offerer's first half; the mover's first
  // half stays unread on its old connection.
  postRecvs(off, 0);
  std::vector<int> got;
  std::vector<void*> reqs(rreq[off].begin(), rreq[off].begin() + half);
  reqs.insert(reqs.end(), sreq[off].begin(), sreq[off].begin() + half);
  ASSERT_EQ(driveAll(net_, reqs, &got), "");
  ASSERT_TRUE(signlion::net::commSharesControl(r[off])) << "the offer was read and handed on";
  ASSERT_FALSE(signlion::net::commSharesControl(r[mov])) << "the pinned reader saw no marker yet";
  // 3. The mover posts its second half: switch marker on the old
  // connection, then these messages on the shared one.
  postSends(mov, half);
  int64_t start = nowMs();
  int done = 0;
  while (!signlion::net::commSharesControl(s[mov]) && nowMs() - start < kLoopLimitMs)
    ASSERT_EQ(net_.test(sreq[mov][half], &done, nullptr), ncclSuccess);
  ASSERT_TRUE(signlion::net::commSharesControl(s[mov])) << "the mover switched";
  // 4. Everything else: the pinned reader gets the first half from the old
  // connection, the marker, then the second half from the shared one.
  postSends(off, half);
  postRecvs(off, half);
  postRecvs(mov, 0);
  postRecvs(mov, half);
  reqs.clear();
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < n; i++) {
      if (d == off && i < half) continue;  // done in 2.
      if (!(d == mov && i == half && done)) reqs.push_back(sreq[d][i]);
      reqs.push_back(rreq[d][i]);
    }
  ASSERT_EQ(driveAll(net_, reqs, &got), "");
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < n; i++)
      EXPECT_EQ(checkPattern(dst[d][i].data(), sizes[i], 4000 + 100 * d + i), SIZE_MAX)
          << "direction " << d << " message " << i;
  for (void* c : {s[0], r[0], s[1], r[1]}) EXPECT_TRUE(signlion::net::commSharesControl(c));
  std::string err;
  for (size_t size : {size_t(8), size_t(64), size_t(100000)}) {
    EXPECT_TRUE(transfer(net_, s[0], r[0], size, size + 64, 1, &err)) << err;
    EXPECT_TRUE(transfer(net_, s[1], r[1], size, size + 64, 2, &err)) << err;
  }
  for (int d = 0; d < 2; d++) {
    net_.closeSend(s[d]);
    net_.closeRecv(r[d]);
  }
}

// Closing a send comm on a shared connection ends its direction only: the
// receiver it fed gets an error (the peer closed), the other direction keeps
// working on the same socket.
TEST_P(PluginV11, ClosingOneSenderOfASharedConnectionEndsOnlyItsDirection) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  for (int which = 0; which < 2; which++) {
    SCOPED_TRACE(which);
    void *s1, *r1, *s2, *r2;
    pair(&s1, &r1);
    pair(&s2, &r2);
    std::string err;
    for (int round = 0; round < 2; round++) {
      ASSERT_TRUE(transfer(net_, s1, r1, 8, 8 + 64, 1, &err)) << err;
      ASSERT_TRUE(transfer(net_, s2, r2, 8, 8 + 64, 2, &err)) << err;
    }
    for (void* c : {s1, r1, s2, r2}) ASSERT_TRUE(signlion::net::commSharesControl(c));
    void* gone = which == 0 ? s1 : s2;
    void* orphan = which == 0 ? r1 : r2;
    void* liveS = which == 0 ? s2 : s1;
    void* liveR = which == 0 ? r2 : r1;
    ASSERT_EQ(net_.closeSend(gone), ncclSuccess);
    EXPECT_EQ(receiveResult(net_, orphan), ncclRemoteError);
    for (size_t size : {size_t(8), size_t(70000), size_t(3) << 20})
      EXPECT_TRUE(transfer(net_, liveS, liveR, size, size + 64, 4, &err)) << err;
    net_.closeRecv(orphan);
    net_.closeSend(liveS);
    net_.closeRecv(liveR);
  }
}

// A comm of a pairing closed before the offer went out. Registration order
// makes the roles known: s1 offers on its connection (r1 reads the offer), r2
// is pinned to s1's socket, s2 would move. Closing s1 or r2 undoes the
// pairing (nothing is offered, nothing pinned); closing s2 leaves an offer
// that r1 drops. In every case the other direction works.
TEST_P(PluginV11, PairingWithACommClosedBeforeTheOfferLeavesTheRestWorking) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  for (int which = 0; which < 3; which++) {
    SCOPED_TRACE(which);
    void *s1, *r1, *s2, *r2;
    pair(&s1, &r1);
    pair(&s2, &r2);
    std::string err;
    if (which == 0) {
      ASSERT_EQ(net_.closeSend(s1), ncclSuccess);
      for (size_t size : {size_t(8), size_t(5000), size_t(70000), size_t(8)})
        EXPECT_TRUE(transfer(net_, s2, r2, size, size + 64, 5, &err)) << err;
      EXPECT_FALSE(signlion::net::commSharesControl(s2)) << "the pairing was undone: nothing to move for";
      EXPECT_FALSE(signlion::net::commSharesControl(r2));
      net_.closeSend(s2);
      net_.closeRecv(r2);
      net_.closeRecv(r1);
      continue;
    }
    if (which == 1) {
      ASSERT_EQ(net_.closeRecv(r2), ncclSuccess);
    }
    if (which == 2) {
      ASSERT_EQ(net_.closeSend(s2), ncclSuccess);
    }
    for (size_t size : {size_t(8), size_t(5000), size_t(70000), size_t(8)})
      EXPECT_TRUE(transfer(net_, s1, r1, size, size + 64, 5, &err)) << err;
    // which 1: the offer was withdrawn; which 2: it went out and was dropped.
    EXPECT_EQ(signlion::net::commSharesControl(s1), which == 2);
    EXPECT_FALSE(signlion::net::commSharesControl(r1));
    net_.closeSend(s1);
    net_.closeRecv(r1);
    if (which == 1) net_.closeSend(s2);
    if (which == 2) net_.closeRecv(r2);
  }
}

// Two copies of the transport in one process (the dlopen'ed plugin and the
// in-process library) have different instance ids, so they pair as two
// processes do: the smaller id initiates, the other follows. Every message
// is checked, all four comms end up sharing, and closing one sender leaves
// the other direction working.
TEST_P(PluginV11, TwoInstancesPairAsTwoProcessesDo) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  NetDriver other;
  other.bindInProcess(11);
  ASSERT_EQ(other.init(), ncclSuccess);
  int otherDev = findDevice(other, "lo");
  ASSERT_GE(otherDev, 0);
  char ha[NCCL_NET_HANDLE_MAXSIZE], hb[NCCL_NET_HANDLE_MAXSIZE];
  void *la = nullptr, *lb = nullptr;
  ASSERT_EQ(net_.listen(dev_, ha, &la), ncclSuccess);
  ASSERT_EQ(other.listen(otherDev, hb, &lb), ncclSuccess);
  void *sA = nullptr, *rA = nullptr, *sB = nullptr, *rB = nullptr;  // A: the plugin copy, B: the other
  int64_t start = nowMs();
  while ((!sA || !rA || !sB || !rB) && nowMs() - start < kLoopLimitMs) {
    if (!sA) {
      ASSERT_EQ(net_.connect(dev_, hb, &sA), ncclSuccess);
    }
    if (!sB) {
      ASSERT_EQ(other.connect(otherDev, ha, &sB), ncclSuccess);
    }
    if (!rA) {
      ASSERT_EQ(net_.accept(la, &rA), ncclSuccess);
    }
    if (!rB) {
      ASSERT_EQ(other.accept(lb, &rB), ncclSuccess);
    }
  }
  ASSERT_TRUE(sA && rA && sB && rB);
  net_.closeListen(la);
  other.closeListen(lb);
  std::string err;
  for (size_t size : {size_t(8), size_t(5000), size_t(70000), size_t(3) << 20, size_t(64)}) {
    EXPECT_TRUE(transferBetween(net_, sA, other, rB, size, size + 64, 1, &err)) << err;
    EXPECT_TRUE(transferBetween(other, sB, net_, rA, size, size + 64, 2, &err)) << err;
  }
  for (void* c : {sA, rA, sB, rB}) EXPECT_TRUE(signlion::net::commSharesControl(c));
  ASSERT_EQ(net_.closeSend(sA), ncclSuccess);
  EXPECT_EQ(receiveResult(other, rB), ncclRemoteError);
  for (size_t size : {size_t(8), size_t(70000)})
    EXPECT_TRUE(transferBetween(other, sB, net_, rA, size, size + 64, 3, &err)) << err;
  other.closeRecv(rB);
  other.closeSend(sB);
  net_.closeRecv(rA);
  other.finalize();
}

// Neither side calls test() while a message larger than the socket buffers
// moves: the helper threads carry it, and the first test() after that finds
// both requests done.
TEST_P(PluginV11, HelpersCompleteTransfersNobodyTests) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  // 16 MiB wakes the helpers at once; 512 KiB (kCallerOnlyMax) is left to the
  // caller: what its one test() does not move (whatever had not arrived yet)
  // only an idle helper's periodic look (kPollMs) can finish.
  for (size_t size : {size_t(16) << 20, size_t(512) << 10}) {
    SCOPED_TRACE(size);
    void *s, *r;
    pair(&s, &r);
    std::vector<char> in(size), out(size);
    fillPattern(in.data(), size, 77);
    void *sreq = nullptr, *rreq = nullptr;
    ASSERT_EQ(net_.isend(s, in.data(), size, 1, nullptr, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    void* d = out.data();
    size_t cap = size;
    int tag = 1;
    // isend wrote the header; the one test() that reads it hands the payload to
    // the streams (moving at most two chunks per stream itself: 1 MiB of 16),
    // and test() is not called again. The helpers it woke may already finish
    // the message while that call runs (a preempted caller): then it is done.
    uint64_t sent = 0, recvd = 0, dummy;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &rreq), ncclSuccess);
    ASSERT_NE(rreq, nullptr);
    int rdone = 0, got = -1;
    for (int64_t start = nowMs(); nowMs() - start < kLoopLimitMs && recvd == 0;) {
      ASSERT_EQ(net_.test(rreq, &rdone, &got), ncclSuccess);
      ASSERT_TRUE(signlion::net::commBytes(r, &dummy, &recvd));
    }
    const uint64_t expect = size + 8;  // the payload and its 8-byte header
    for (int64_t start = nowMs(); nowMs() - start < kLoopLimitMs && (sent < expect || recvd < expect);) {
      signlion::net::commWait(r, 10);  // sleeps; moves nothing itself
      ASSERT_TRUE(signlion::net::commBytes(s, &sent, &dummy));
      ASSERT_TRUE(signlion::net::commBytes(r, &dummy, &recvd));
    }
    EXPECT_EQ(sent, expect);
    EXPECT_EQ(recvd, expect);
    if (!rdone) {
      ASSERT_EQ(net_.test(rreq, &rdone, &got), ncclSuccess);
    }
    EXPECT_EQ(rdone, 1);
    EXPECT_EQ(got, (int)size);
    int done = 0;
    ASSERT_EQ(net_.test(sreq, &done, nullptr), ncclSuccess);
    EXPECT_EQ(done, 1);
    EXPECT_EQ(checkPattern(out.data(), size, 77), SIZE_MAX);
    net_.closeSend(s);
    net_.closeRecv(r);
  }
}

// A caller with receives on several comms sleeps on all of them: the message
// that arrives on the second wakes it, long before the wait's bound (sleeping
// on the first comm alone would sit the whole bound out).
TEST_P(PluginV11, CommWaitAnyWakesForAnyComm) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  void *s1, *r1, *s2, *r2;
  pair(&s1, &r1);
  pair(&s2, &r2);
  char in = 42, out1 = 0, out2 = 0;
  void *req1 = nullptr, *req2 = nullptr, *sreq = nullptr;
  void* d1 = &out1;
  void* d2 = &out2;
  size_t cap = 1;
  int tag = 1;
  ASSERT_EQ(net_.irecv(r1, 1, &d1, &cap, &tag, nullptr, &req1), ncclSuccess);
  ASSERT_EQ(net_.irecv(r2, 1, &d2, &cap, &tag, nullptr, &req2), ncclSuccess);
  ASSERT_NE(req1, nullptr);
  ASSERT_NE(req2, nullptr);
  int done = 0, got = -1;
  ASSERT_EQ(net_.test(req2, &done, &got), ncclSuccess);  // nothing sent yet
  ASSERT_EQ(done, 0);
  void* comms[] = {r1, r2};
  // With nothing sent it does sleep (a wait that returned at once would make
  // the caller spin): most of 200 ms, allowing a spurious wake-up or two.
  const int64_t idleStart = nowMs();
  for (int i = 0; i < 3 && nowMs() - idleStart < 150; i++) signlion::net::commWaitAny(comms, 2, 200);
  EXPECT_GE(nowMs() - idleStart, 150) << "returned at once with nothing to do";
  ASSERT_EQ(net_.isend(s2, &in, 1, 1, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  constexpr int kBoundMs = 5000;
  const int64_t start = nowMs();
  for (int i = 0; i < 100 && !done; i++) {  // a wake-up may be spurious; each test() may finish it
    signlion::net::commWaitAny(comms, 2, kBoundMs);
    ASSERT_EQ(net_.test(req2, &done, &got), ncclSuccess);
    if (nowMs() - start > kBoundMs / 2) break;
  }
  EXPECT_LT(nowMs() - start, kBoundMs / 2) << "slept on the idle comm";
  EXPECT_EQ(done, 1);
  EXPECT_EQ(out2, 42);
  int sdone = 0;
  for (int64_t t0 = nowMs(); !sdone && nowMs() - t0 < kLoopLimitMs;) ASSERT_EQ(net_.test(sreq, &sdone, nullptr), ncclSuccess);
  // r1's receive is still posted: complete it so the comms close cleanly.
  sreq = nullptr;
  ASSERT_EQ(net_.isend(s1, &in, 1, 1, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  int rdone = 0;
  sdone = 0;
  for (int64_t t0 = nowMs(); !(rdone && sdone) && nowMs() - t0 < kLoopLimitMs;) {
    if (!rdone) ASSERT_EQ(net_.test(req1, &rdone, &got), ncclSuccess);
    if (!sdone) ASSERT_EQ(net_.test(sreq, &sdone, nullptr), ncclSuccess);
  }
  EXPECT_EQ(rdone, 1);
  EXPECT_EQ(out1, 42);
  net_.closeSend(s1);
  net_.closeRecv(r1);
  net_.closeSend(s2);
  net_.closeRecv(r2);
}

TEST_P(PluginV11, ByteCountersCountPayloadAndHeaders) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  void *s, *r;
  pair(&s, &r);
  std::string err;
  const size_t sizes[] = {100, 5 << 20};
  for (size_t size : sizes) ASSERT_TRUE(transfer(net_, s, r, size, size, 1, &err)) << err;
  uint64_t sent = 0, recvd = 0, dummy;
  ASSERT_TRUE(signlion::net::commBytes(s, &sent, &dummy));
  ASSERT_TRUE(signlion::net::commBytes(r, &dummy, &recvd));
  const uint64_t expect = sizes[0] + sizes[1] + 2 * 8;  // 8-byte message headers
  EXPECT_EQ(sent, expect);
  EXPECT_EQ(recvd, expect);
  int notAComm = 0;
  EXPECT_FALSE(signlion::net::commBytes(&notAComm, &sent, &recvd));
  net_.closeSend(s);
  net_.closeRecv(r);
}

// A handle comes from the peer through the application's bootstrap, and its
// connector-private tail is where connect() keeps its half-made comm between
// calls. A tail that is not zero (garbage on the wire, a peer that misbehaves)
// is refused with ncclInvalidArgument, never followed as a pointer (it was:
// a segmentation fault).
TEST_P(PluginV11, HandleWhoseConnectorBytesAreNotOursIsRefused) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  uint32_t magic = 0;
  memcpy(&magic, handle, sizeof(magic));
  const size_t at = magic == signlion::net::kSocketHandleMagic ? offsetof(signlion::net::SocketListenHandle, connecting)
                                                               : offsetof(signlion::net::UcxListenHandle, connecting);
  for (uintptr_t bogus : {uintptr_t{0x10}, ~uintptr_t{0} - 7}) {
    void* p = reinterpret_cast<void*>(bogus);
    memcpy(handle + at, &p, sizeof(p));
    void* out = nullptr;
    EXPECT_EQ(net_.connect(dev_, handle, &out), ncclInvalidArgument);
    EXPECT_EQ(out, nullptr);
  }
  net_.closeListen(l);
}

TEST_P(PluginV11, BadArgumentsAreRejected) {
  void *s, *r;
  pair(&s, &r);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* out = nullptr;
  int ndev = 0;
  ASSERT_EQ(net_.devices(&ndev), ncclSuccess);
  ncclNetProperties_v12_t props;
  EXPECT_EQ(net_.properties(-1, &props), ncclInvalidArgument);
  EXPECT_EQ(net_.properties(ndev, &props), ncclInvalidArgument);
  EXPECT_EQ(net_.devices(nullptr), ncclInvalidArgument);
  EXPECT_EQ(net_.listen(ndev + 3, handle, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.listen(dev_, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.connect(dev_, handle, &out), ncclInvalidArgument) << "all-zero handle";
  EXPECT_EQ(net_.connect(dev_, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.accept(nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.accept(s, &out), ncclInvalidArgument) << "send comm is not a listen comm";
  char buf[64];
  void* mr = nullptr;
  EXPECT_EQ(net_.regMr(nullptr, buf, 64, &mr), ncclInvalidArgument);
  EXPECT_EQ(net_.regMr(s, nullptr, 64, &mr), ncclInvalidArgument);
  auto* v11 = static_cast<ncclNet_v11_t*>(dlsym(lib_, "ncclNetPlugin_v11"));
  EXPECT_EQ(v11->regMr(s, buf, 64, NCCL_PTR_CUDA, &mr), ncclInvalidArgument);
  int unknown = 0;
  EXPECT_EQ(net_.deregMr(s, &unknown), ncclInvalidArgument);
  EXPECT_EQ(net_.isend(s, buf, 8, 0, &unknown, &out), ncclInvalidArgument) << "unknown mhandle";
  EXPECT_EQ(net_.isend(s, nullptr, 8, 0, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.isend(s, buf, 8, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net_.isend(r, buf, 8, 0, nullptr, &out), ncclInvalidArgument) << "recv comm passed to isend";
  EXPECT_EQ(net_.isend(s, buf, (size_t(1) << 30) + 1, 0, nullptr, &out), ncclInvalidArgument) << "oversize";
  ASSERT_EQ(net_.regMr(s, buf, 64, &mr), ncclSuccess);
  EXPECT_EQ(net_.isend(s, buf + 32, 64, 0, mr, &out), ncclInvalidArgument) << "outside the registration";
  EXPECT_EQ(net_.deregMr(s, mr), ncclSuccess);
  void* d = buf;
  size_t cap = 64;
  int tag = 0;
  EXPECT_EQ(net_.irecv(r, 0, &d, &cap, &tag, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.irecv(r, 9, &d, &cap, &tag, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.irecv(r, 1, nullptr, &cap, &tag, nullptr, &out), ncclInvalidArgument);
  EXPECT_EQ(net_.irecv(s, 1, &d, &cap, &tag, nullptr, &out), ncclInvalidArgument);
  int done = 0;
  EXPECT_EQ(net_.test(nullptr, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(net_.closeSend(r), ncclInvalidArgument);
  EXPECT_EQ(net_.closeRecv(s), ncclInvalidArgument);
  // v8 sizes are int: negative ones are refused.
  auto* v8 = static_cast<ncclNet_v8_t*>(dlsym(lib_, "ncclNetPlugin_v8"));
  EXPECT_EQ(v8->isend(s, buf, -1, 0, nullptr, &out), ncclInvalidArgument);
  // The comms still work after all that.
  std::string err;
  EXPECT_TRUE(transfer(net_, s, r, 1000, 1000, 0, &err)) << err;
  net_.closeSend(s);
  net_.closeRecv(r);
}

// Raw TCP client for the stranger tests.
static int rawConnect(const void* handle) {
  // The handle starts with magic, version, interface count, reserved, secret,
  // instance, then per interface: family, port (network order), 16 bytes of IP.
  const char* h = static_cast<const char*>(handle);
  uint16_t family, port;
  memcpy(&family, h + 24, 2);
  memcpy(&port, h + 26, 2);
  signlion::net::SocketAddress a{};
  a.sa.sa_family = family;
  if (family == AF_INET) {
    a.sin.sin_port = port;
    memcpy(&a.sin.sin_addr, h + 28, 4);
  } else {
    a.sin6.sin6_port = port;
    memcpy(&a.sin6.sin6_addr, h + 28, 16);
  }
  int fd = socket(a.sa.sa_family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  socklen_t len = a.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (connect(fd, &a.sa, len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_P(PluginV11, StrangersAreRefusedAndRealPeersStillConnect) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "3000");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  // 1: garbage bytes. 2: a silent connection that never speaks. 3: a real
  // plugin connect with the wrong secret (bytes 8..15 of the handle).
  int garbage = rawConnect(handle);
  ASSERT_GE(garbage, 0);
  char junk[64];
  fillPattern(junk, sizeof(junk), 77);
  ASSERT_EQ(write(garbage, junk, sizeof(junk)), (ssize_t)sizeof(junk));
  int silent = rawConnect(handle);
  ASSERT_GE(silent, 0);
  char wrong[NCCL_NET_HANDLE_MAXSIZE];
  memcpy(wrong, handle, sizeof(wrong));
  wrong[8] ^= 0x55;
  // connect and accept in turns (docs/dev/PLUGIN_INTERNALS.md, "Connect and accept"):
  // accept refuses all three. The wrong-secret connect either returns its
  // comm (the socket transport's connect does not wait for the listener's
  // answer: it cannot know) or fails (UCX's waits for the listener's reply,
  // and the listener closes the connection instead).
  void* bad = nullptr;
  ncclResult_t badRes = ncclSuccess;
  void* none = nullptr;
  int64_t start = nowMs();
  for (int i = 0; (i < 200 || (bad == nullptr && badRes == ncclSuccess)) && nowMs() - start < kLoopLimitMs; i++) {
    if (bad == nullptr && badRes == ncclSuccess) badRes = net_.connect(dev_, wrong, &bad);
    ASSERT_EQ(net_.accept(l, &none), ncclSuccess);
    ASSERT_EQ(none, nullptr) << "a stranger was accepted";
    usleep(1000);
  }
  ASSERT_TRUE(bad != nullptr || badRes != ncclSuccess) << "the wrong-secret connect neither returned nor failed";
  if (socketTransport()) {
    ASSERT_NE(bad, nullptr);
  }
  // The real peer connects while the silent stranger still holds its socket.
  char good[NCCL_NET_HANDLE_MAXSIZE];
  memcpy(good, handle, sizeof(good));
  void* s = nullptr;
  std::vector<void*> recvs;
  std::string err;
  char* goodHandle = good;
  ASSERT_EQ(connectAccept(net_, dev_, l, 1, &goodHandle, &s, &recvs, &err), ncclSuccess) << err;
  void* r = recvs[0];
  EXPECT_TRUE(transfer(net_, s, r, 200000, 200000, 9, &err)) << err;
  // A refused sender that connect returned learns it from test (connection
  // reset), not a hang.
  ncclResult_t res = badRes;
  std::vector<char> buf(1 << 20);
  start = nowMs();
  while (res == ncclSuccess && nowMs() - start < 10000) {
    void* req = nullptr;
    res = net_.isend(bad, buf.data(), buf.size(), 0, nullptr, &req);
    if (res == ncclSuccess && req) res = waitReq(req, nullptr, 10000);
  }
  EXPECT_NE(res, ncclSuccess);
  close(garbage);
  close(silent);
  if (bad != nullptr) net_.closeSend(bad);
  net_.closeSend(s);
  net_.closeRecv(r);
  net_.closeListen(l);
}

// UCX: a peer holding the secret that takes the listener's reply (worker
// address) and closes without confirming an endpoint is refused, and the
// refusal leaves the process's shared UCX worker in use: the setup receives
// accept posted after its reply never matched, so cancelling them is clean
// (ucp_request_cancel completes an unmatched tag receive at once). Replacing
// the worker there retired one worker per such peer until exit.
TEST_P(PluginV11, UcxPeerClosingAfterTheReplyIsRefusedWithoutANewWorker) {
  if (socketTransport()) GTEST_SKIP() << "UCX handshake";
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  // The hello restates plugin/ucx/ucx_transport.cc (wire version 2): magic
  // "SLUH", version, reserved, the secret (bytes 8..15 of the handle); the
  // reply: magic, version, reserved, address length, comm id, the address.
  struct WireHello {
    uint32_t magic;
    uint16_t version, reserved;
    uint64_t secret;
  };
  struct WireReply {
    uint32_t magic;
    uint16_t version, reserved;
    uint32_t addrLen, commId;
  };
  static_assert(sizeof(WireHello) == 16 && sizeof(WireReply) == 16, "wire layouts");
  WireHello h{0x534c5548, 2, 0, 0};
  memcpy(&h.secret, handle + 8, sizeof(h.secret));
  const int replacedBefore = PluginLog::workerReplacements().load();
  int fd = rawConnect(handle);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
  // Take the whole reply while accept sends it: accept then has posted its
  // setup receives for this connection.
  std::vector<char> in(sizeof(WireReply));
  size_t got = 0;
  bool haveHeader = false;
  void* none = nullptr;
  int64_t start = nowMs();
  while (got < in.size() && nowMs() - start < kLoopLimitMs) {
    ASSERT_EQ(net_.accept(l, &none), ncclSuccess);
    ASSERT_EQ(none, nullptr);
    ssize_t n = recv(fd, in.data() + got, in.size() - got, MSG_DONTWAIT);
    ASSERT_TRUE(n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) << "the listener closed on us";
    if (n > 0) got += (size_t)n;
    if (!haveHeader && got == sizeof(WireReply)) {
      WireReply rep;
      memcpy(&rep, in.data(), sizeof(rep));
      ASSERT_EQ(rep.magic, 0x534c5548u);
      ASSERT_GT(rep.addrLen, 0u);
      in.resize(sizeof(WireReply) + rep.addrLen);
      haveHeader = true;
    }
  }
  ASSERT_TRUE(haveHeader && got == in.size()) << "no full reply";
  const int warnsBefore = PluginLog::warns().load();
  close(fd);
  start = nowMs();
  while (PluginLog::warns().load() == warnsBefore && nowMs() - start < kLoopLimitMs) {
    ASSERT_EQ(net_.accept(l, &none), ncclSuccess);
    ASSERT_EQ(none, nullptr) << "a peer that never confirmed its endpoint was accepted";
  }
  ASSERT_NE(PluginLog::lastWarn().find("refused a connection"), std::string::npos) << PluginLog::lastWarn();
  EXPECT_EQ(PluginLog::workerReplacements().load(), replacedBefore)
      << "refusing a peer whose setup messages never came replaced the shared UCX worker";
  // The listener goes on: a real peer connects and transfers.
  void* s = nullptr;
  std::vector<void*> recvs;
  std::string err;
  char* realHandle = handle;
  ASSERT_EQ(connectAccept(net_, dev_, l, 1, &realHandle, &s, &recvs, &err), ncclSuccess) << err;
  void* r = recvs[0];
  EXPECT_TRUE(transfer(net_, s, r, 100000, 100000, 3, &err)) << err;
  net_.closeSend(s);
  net_.closeRecv(r);
  net_.closeListen(l);
  EXPECT_EQ(PluginLog::workerReplacements().load(), replacedBefore);
}

// A connector whose connect() returned may close its send comm at once
// (NCCL's caller may give up on the communicator): accept must still hand
// out the recv comm, whose receives then learn that the peer closed,
// rather than refuse a connection the other side already holds. The
// connector runs in its own thread, as the peer's proxy thread would: its
// bye (on the out-of-band socket) can reach accept between accept's worker
// progress and its read of that socket.
TEST_P(PluginV11, ConnectorClosingRightAfterConnectIsStillAccepted) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "10000");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  const int warnsBefore = PluginLog::warns().load();
  std::atomic<int> connectRes{-1};
  std::thread connector([&] {
    void* s = nullptr;
    ncclResult_t res = ncclSuccess;
    int64_t t0 = nowMs();
    while (s == nullptr && res == ncclSuccess && nowMs() - t0 < kLoopLimitMs) res = net_.connect(dev_, handle, &s);
    if (s != nullptr) res = net_.closeSend(s);  // at once: its bye follows the last setup message
    connectRes = s != nullptr ? (int)res : (res == ncclSuccess ? -2 : (int)res);
  });
  void* r = nullptr;
  int64_t start = nowMs();
  while (r == nullptr && PluginLog::warns().load() == warnsBefore && nowMs() - start < kLoopLimitMs) {
    ASSERT_EQ(net_.accept(l, &r), ncclSuccess);
  }
  connector.join();
  ASSERT_EQ(connectRes.load(), (int)ncclSuccess) << "connect or closeSend failed: " << PluginLog::lastWarn();
  ASSERT_NE(r, nullptr) << "accept refused a connection connect() had returned: " << PluginLog::lastWarn();
  // Its receive ends with the peer's close (an error), not a hang.
  char buf[64];
  void* d = buf;
  size_t cap = sizeof(buf);
  int tag = 1;
  void* req = nullptr;
  ncclResult_t res = ncclSuccess;
  start = nowMs();
  while (req == nullptr && res == ncclSuccess && nowMs() - start < kLoopLimitMs)
    res = net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req);
  if (res == ncclSuccess && req != nullptr) res = waitReq(req, nullptr, kLoopLimitMs);
  EXPECT_NE(res, ncclSuccess);
  EXPECT_NE(res, ncclInternalError) << "the receive neither completed nor failed";
  net_.closeRecv(r);
  net_.closeListen(l);
}

// A peer that passes the handshake but breaks the pairing protocol
// (socket_pairing.h) gets an error on that comm, never a crash or a hang; an
// offer naming no comm of ours is dropped and the stream goes on. The wire
// layouts below restate plugin/socket/socket_transport.cc (wire version 4).
TEST_P(PluginV11, MalformedPairingHeadersAreErrors) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  struct WireHello {
    uint32_t magic;
    uint16_t version;
    uint8_t kind, index;
    uint32_t nsocks, chunkSize;
    uint64_t secret, connId, instance;
  };
  // A message: tag, size | 2^31 when inline. A pairing header: tag 0,
  // 3 << 30 | flags (2 offer, 4 switch marker), then 8 bytes of connId.
  struct WireMsg {
    int32_t tag;
    uint32_t word;
  };
  struct WirePair {
    int32_t tag;
    uint32_t word;
    uint64_t value;
  };
  static_assert(sizeof(WireHello) == 40 && sizeof(WireMsg) == 8 && sizeof(WirePair) == 16, "wire layouts");
  constexpr uint32_t kInline = 1u << 31, kControl = 3u << 30;
  struct Case {
    const char* what;
    WirePair header;
    size_t bytes;  // of header written
    bool ok;
  };
  const Case cases[] = {
      {"offer naming no comm of ours, then a message", {0, kControl | 2, 0xdeadbeefull}, 16, true},
      {"switch marker without a pairing", {0, kControl | 4, 0}, 16, false},
      {"offer and marker flags at once", {0, kControl | 6, 0}, 16, false},
      {"switch marker with a connId", {0, kControl | 4, 1}, 16, false},
      {"offer with a tag", {3, kControl | 2, 0xdeadbeefull}, 16, false},
      {"unknown flag on a pairing header", {0, kControl | 8, 5}, 16, false},
      // No sender inlines more than 1 MiB; kept early (tag 9 has no
      // receive), this one once made the receiver allocate 2^62 bytes.
      {"inline message larger than any sender inlines", {9, kInline | ((1u << 30) - 1), 0}, 8, false},
  };
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  uint64_t secret;
  memcpy(&secret, handle + 8, sizeof(secret));
  uint64_t connId = 0x5eed0000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    int ctrl = rawConnect(handle), data = rawConnect(handle);
    ASSERT_GE(ctrl, 0);
    ASSERT_GE(data, 0);
    WireHello h{0x534c4e48, 4, 0, 0, 1, 131072, secret, ++connId, 42};
    ASSERT_EQ(write(ctrl, &h, sizeof(h)), (ssize_t)sizeof(h));
    h.kind = 1;
    ASSERT_EQ(write(data, &h, sizeof(h)), (ssize_t)sizeof(h));
    void* r = nullptr;
    int64_t start = nowMs();
    while (r == nullptr && nowMs() - start < kLoopLimitMs) ASSERT_EQ(net_.accept(l, &r), ncclSuccess);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(write(ctrl, &c.header, c.bytes), (ssize_t)c.bytes);
    WireMsg msg{7, kInline | 5};
    ASSERT_EQ(write(ctrl, &msg, sizeof(msg)), (ssize_t)sizeof(msg));
    ASSERT_EQ(write(ctrl, "hello", 5), 5);
    char buf[16] = {};
    void* d = buf;
    size_t cap = sizeof(buf);
    int tag = 7;
    void* req = nullptr;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
    int size = -1;
    ncclResult_t res = waitReq(req, &size, 10000);
    if (c.ok) {
      EXPECT_EQ(res, ncclSuccess);
      EXPECT_EQ(size, 5);
      EXPECT_EQ(std::string(buf, 5), "hello");
    } else {
      EXPECT_EQ(res, ncclRemoteError);
    }
    net_.closeRecv(r);
    close(ctrl);
    close(data);
  }
  net_.closeListen(l);
}

// ncclNet cannot cancel a connect in progress: a caller that gives up (a
// peer that never listens) finalizes its context, and that must close the
// half-made connection's sockets rather than leak them.
TEST_P(PluginV11, FinalizeClosesConnectsThatNeverFinished) {
  auto openFds = [] {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    while (readdir(d) != nullptr) n++;
    closedir(d);
    return n;
  };
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "60000");  // the connect keeps retrying until we give up
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  ASSERT_EQ(net_.listen(dev_, handle, &l), ncclSuccess);
  ASSERT_EQ(net_.closeListen(l), ncclSuccess);  // nobody listens there any more: connects are refused
  const int before = openFds();
  ASSERT_GT(before, 0);
  void* s = nullptr;
  for (int i = 0; i < 5 && s == nullptr; i++) {
    ASSERT_EQ(net_.connect(dev_, handle, &s), ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(s, nullptr) << "a connect to a closed port finished";
  EXPECT_GT(openFds(), before) << "the unfinished connect holds sockets";
  ASSERT_EQ(net_.finalize(), ncclSuccess);
  EXPECT_EQ(openFds(), before) << "finalize left the unfinished connect's sockets open";
  ASSERT_EQ(net_.init(), ncclSuccess);  // TearDown finalizes again
}

INSTANTIATE_TEST_SUITE_P(Latest, PluginV11, ::testing::Values(11),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });

// ---- Interface filter (SIGNLION_SOCKET_IFNAME, NCCL syntax) ------------------------

TEST(SocketIfname, PrefixExcludeAndExact) {
  using signlion::net::parseIfnameFilter;
  auto f = parseIfnameFilter("eth,ib");
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ib1"));
  EXPECT_FALSE(f.matches("lo"));
  auto x = parseIfnameFilter("^docker,lo");
  EXPECT_TRUE(x.matches("eth0"));
  EXPECT_FALSE(x.matches("docker0"));
  EXPECT_FALSE(x.matches("lo"));
  auto e = parseIfnameFilter("=eth0");
  EXPECT_TRUE(e.matches("eth0"));
  EXPECT_FALSE(e.matches("eth01"));
  auto ne = parseIfnameFilter("^=eth0,lo:1234");
  EXPECT_FALSE(ne.matches("eth0"));
  EXPECT_TRUE(ne.matches("eth01"));
  EXPECT_FALSE(ne.matches("lo"));
  EXPECT_TRUE(parseIfnameFilter("").matches("anything"));
}

TEST(SocketIfname, FilterSelectsDevices) {
  Env only("SIGNLION_SOCKET_IFNAME", "=lo");
  auto devs = signlion::net::findSocketDevices(16);
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "lo");
  EXPECT_GT(devs[0].speedMbps, 0);
  Env none("SIGNLION_SOCKET_IFNAME", "=no-such-if");
  EXPECT_TRUE(signlion::net::findSocketDevices(16).empty());
}

// Without SIGNLION_SOCKET_IFNAME, the variable a torch.distributed job already set:
// GLOO_SOCKET_IFNAME (exact names), then NCCL_SOCKET_IFNAME (NCCL's syntax).
TEST(SocketIfname, FollowsGlooThenNccl) {
  using signlion::net::findSocketDevices;
  using signlion::net::socketIfnameSpec;
  Env mine("SIGNLION_SOCKET_IFNAME", "");
  Env gloo("GLOO_SOCKET_IFNAME", "");
  Env nccl("NCCL_SOCKET_IFNAME", "");
  EXPECT_EQ(socketIfnameSpec().spec, "");
  EXPECT_STREQ(socketIfnameSpec().source, "");
  {
    Env n("NCCL_SOCKET_IFNAME", "^=no-such-if");
    EXPECT_EQ(socketIfnameSpec().spec, "^=no-such-if");
    EXPECT_STREQ(socketIfnameSpec().source, "NCCL_SOCKET_IFNAME");
    Env g("GLOO_SOCKET_IFNAME", "lo");  // Gloo's names are exact: "lo" is not a prefix here
    EXPECT_EQ(socketIfnameSpec().spec, "=lo");
    EXPECT_STREQ(socketIfnameSpec().source, "GLOO_SOCKET_IFNAME");
    auto devs = findSocketDevices(16);
    ASSERT_EQ(devs.size(), 1u);
    EXPECT_EQ(devs[0].name, "lo");
    Env s("SIGNLION_SOCKET_IFNAME", "=no-such-if");  // signlion's own variable wins
    EXPECT_STREQ(socketIfnameSpec().source, "SIGNLION_SOCKET_IFNAME");
    EXPECT_TRUE(findSocketDevices(16).empty());
  }
  Env n("NCCL_SOCKET_IFNAME", "=lo");
  auto devs = findSocketDevices(16);
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "lo");
  Env g("GLOO_SOCKET_IFNAME", "no-such-if");
  EXPECT_TRUE(findSocketDevices(16).empty());
}

// ---- Data streams per comm (SIGNLION_NSOCKS, SIGNLION_SOCKET_SPEED) --------------------

// Unset (0), SIGNLION_NSOCKS follows the link: one data stream below 10 Gbit/s,
// four at or above it; a value it is given wins, clamped to 1..64. Loopback's
// sysfs has no speed, so SIGNLION_SOCKET_SPEED plays the link (as it does for
// a tbf-limited veth, which reports 10000); the device reports that speed too.
// Every case moves a message across all its streams, bit exact. In process:
// the dlopen'ed copy would keep the first case's parameters.
TEST(SocketStreams, FollowTheLinkSpeedUnlessSet) {
  struct Case {
    const char* speed;
    const char* nsocks;
    int streams;
  };
  const Case cases[] = {{"100", "0", 1},   {"1000", "0", 1},    {"9999", "0", 1}, {"10000", "0", 4},
                        {"100000", "0", 4}, {"100", "3", 3},     {"25000", "1", 1}, {"100", "200", 64}};
  Env ifname("SIGNLION_SOCKET_IFNAME", "=lo");
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("SIGNLION_SOCKET_SPEED=") + c.speed + " SIGNLION_NSOCKS=" + c.nsocks);
    Env speed("SIGNLION_SOCKET_SPEED", c.speed);
    Env nsocks("SIGNLION_NSOCKS", c.nsocks);
    NetDriver net;
    net.bindInProcess(11);
    ASSERT_EQ(net.init(&PluginLog::logger), ncclSuccess);
    int dev = findDevice(net, "lo");
    ASSERT_GE(dev, 0);
    ncclNetProperties_v12_t p;
    ASSERT_EQ(net.properties(dev, &p), ncclSuccess);
    EXPECT_EQ(p.speed, atoi(c.speed));
    void *s = nullptr, *r = nullptr;
    std::string err;
    ASSERT_EQ(connectPair(net, dev, &s, &r, &err), ncclSuccess) << err;
    EXPECT_EQ(signlion::net::socketCommStreams(s), c.streams);
    EXPECT_EQ(signlion::net::socketCommStreams(r), c.streams) << "the acceptor takes the connector's count";
    EXPECT_TRUE(transfer(net, s, r, size_t(4) << 20, size_t(4) << 20, 1, &err)) << err;
    net.closeSend(s);
    net.closeRecv(r);
    net.finalize();
  }
}

// A rate the host communicator learned (socketSetLinkRate) picks the streams
// of the comms made after it, over what the interface says (loopback: the
// default 10000, four streams); SIGNLION_SOCKET_SPEED and SIGNLION_NSOCKS
// still win; 0 forgets it.
TEST(SocketStreams, FollowALearnedRateUnlessSet) {
  struct Case {
    int learned;
    const char* speed;  // "0": unset
    const char* nsocks;
    int streams;
  };
  const Case cases[] = {{100, "0", "0", 1}, {1000, "0", "0", 1},    {10000, "0", "0", 4}, {0, "0", "0", 4},
                        {100, "10000", "0", 4}, {10000, "100", "0", 1}, {100, "0", "3", 3}};
  Env ifname("SIGNLION_SOCKET_IFNAME", "=lo");
  for (const Case& c : cases) {
    SCOPED_TRACE("learned " + std::to_string(c.learned) + " SIGNLION_SOCKET_SPEED=" + c.speed +
                 " SIGNLION_NSOCKS=" + c.nsocks);
    Env speed("SIGNLION_SOCKET_SPEED", c.speed);
    Env nsocks("SIGNLION_NSOCKS", c.nsocks);
    signlion::net::socketSetLinkRate(c.learned);
    NetDriver net;
    net.bindInProcess(11);
    ASSERT_EQ(net.init(&PluginLog::logger), ncclSuccess);
    int dev = findDevice(net, "lo");
    ASSERT_GE(dev, 0);
    void *s = nullptr, *r = nullptr;
    std::string err;
    ASSERT_EQ(connectPair(net, dev, &s, &r, &err), ncclSuccess) << err;
    EXPECT_EQ(signlion::net::socketCommStreams(s), c.streams);
    EXPECT_EQ(signlion::net::socketCommStreams(r), c.streams);
    EXPECT_TRUE(transfer(net, s, r, size_t(1) << 20, size_t(1) << 20, 1, &err)) << err;
    net.closeSend(s);
    net.closeRecv(r);
    net.finalize();
  }
  signlion::net::socketSetLinkRate(0);
}
