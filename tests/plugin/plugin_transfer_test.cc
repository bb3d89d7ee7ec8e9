// Transfers through the dlopen'ed plugin on loopback: grouped receives
// matched by tag, the request table's limit, receives posted after their
// message, many messages in flight both ways, and what happens on the way
// (errors, closes with requests in flight, threads on separate comms).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "net/socket_net.h"
#include "plugin_fixture.h"

using namespace signlion::nettest;

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
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "3000");  // deregMr's wait where UCX cannot cancel
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
    // deregMr cancels the transfers on its region (docs/PLUGIN.md), except
    // sends no receive was posted for where UCX cannot cancel them: it then
    // says so after SIGNLION_SOCKET_TIMEOUT.
    EXPECT_EQ(net_.deregMr(s, smr), round == 1 && sendsUncancellable() ? ncclSystemError : ncclSuccess);
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

INSTANTIATE_TEST_SUITE_P(Latest, PluginV11, ::testing::Values(11),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
