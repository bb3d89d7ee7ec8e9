// What the plugin refuses, and that it refuses it cleanly: handles and
// arguments that are not ours, strangers on the listening socket, peers that
// close during the handshake or break the pairing protocol, connects that
// never finish.
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/socket_devices.h"
#include "plugin_fixture.h"
#include "socket/socket_wire.h"
#include "ucx/ucx_wire.h"

using namespace signlion::nettest;

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
  // The hello restates plugin/ucx/ucx_wire.h (wire version 2): magic
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
// layouts below restate plugin/socket/socket_wire.h (wire version 4).
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
