// Teardown in any order, through the dlopen'ed plugin: a recv comm closed
// while its peer still sends announces the close; the peer's pending and new
// sends then complete (their data discarded) and its own close frees
// everything, with no error and no WARN.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/socket_net.h"
#include "plugin_fixture.h"

using namespace signlion::nettest;

namespace {

class Teardown : public PluginTest {
 protected:
  // Posts `count` sends of the given sizes in turn (retrying while the
  // request table is full) and tests them all until done; "" or what failed.
  std::string sendAll(void* s, const std::vector<size_t>& sizes, int count, std::vector<void*> inFlight = {}) {
    std::vector<char> buf(size_t(4) << 20, 7);
    int posted = 0;
    int64_t start = nowMs();
    while (posted < count || !inFlight.empty()) {
      if (nowMs() - start > 20000) return "sends still in flight after 20 s";
      while (posted < count) {
        void* req = nullptr;
        ncclResult_t res = net_.isend(s, buf.data(), sizes[posted % sizes.size()], posted, nullptr, &req);
        if (res != ncclSuccess) return "isend " + std::to_string(posted) + " failed: " + std::to_string(res);
        if (req == nullptr) break;
        inFlight.push_back(req);
        posted++;
      }
      for (size_t i = 0; i < inFlight.size();) {
        int done = 0;
        ncclResult_t res = net_.test(inFlight[i], &done, nullptr);
        if (res != ncclSuccess) return "test failed: " + std::to_string(res) + " " + PluginLog::lastWarn();
        if (done)
          inFlight.erase(inFlight.begin() + i);
        else
          i++;
      }
    }
    return "";
  }
};

const std::vector<size_t> kMixed = {100, size_t(1) << 20, 0, 70000, size_t(4) << 20, 8, 65536};

}  // namespace

// The receiver takes two messages, closes with more in flight (one receive
// posted, not complete); the sender's pending and 40 new sends complete.
TEST_P(Teardown, ReceiverClosedFirstLetsPendingAndNewSendsComplete) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "5000");
  void *s, *r;
  pair(&s, &r);
  std::vector<char> src(size_t(4) << 20, 1), dst(size_t(4) << 20);
  std::vector<void*> sreqs;
  for (int i = 0; i < 8; i++) {
    void* req = nullptr;
    ASSERT_EQ(net_.isend(s, src.data(), kMixed[i % kMixed.size()], i, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
    sreqs.push_back(req);
  }
  for (int i = 0; i < 3; i++) {
    void* d = dst.data();
    size_t cap = dst.size();
    int tag = i;
    void* req = nullptr;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
    if (i < 2) {
      ASSERT_EQ(waitReq(req, nullptr), ncclSuccess);
    }
  }
  int warns = PluginLog::otherWarns();
  ASSERT_EQ(net_.closeRecv(r), ncclSuccess);
  EXPECT_EQ(sendAll(s, kMixed, 40, sreqs), "");
  EXPECT_EQ(net_.closeSend(s), ncclSuccess);
  EXPECT_EQ(PluginLog::otherWarns(), warns) << PluginLog::lastWarn();
}

// The same before anything was received, and with sends posted only after
// the close.
TEST_P(Teardown, ReceiverClosedBeforeAnySendLetsSendsComplete) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "5000");
  void *s, *r;
  pair(&s, &r);
  int warns = PluginLog::otherWarns();
  ASSERT_EQ(net_.closeRecv(r), ncclSuccess);
  EXPECT_EQ(sendAll(s, kMixed, 60), "");
  EXPECT_EQ(net_.closeSend(s), ncclSuccess);
  EXPECT_EQ(PluginLog::otherWarns(), warns) << PluginLog::lastWarn();
}

// On a control connection shared by both directions (pairing) the closed
// receiver's socket stays open for its process's sender: the peer's sender
// still learns of the close and completes (far more than the socket buffers
// hold) instead of stalling until the timeout, and the other direction
// keeps working.
TEST_P(Teardown, ReceiverClosedFirstOnASharedControlConnection) {
  SKIP_UNLESS_SOCKET_TRANSPORT();
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "6000");
  void *s1, *r1, *s2, *r2;
  pair(&s1, &r1);
  pair(&s2, &r2);
  std::string err;
  for (size_t size : {size_t(8), size_t(70000), size_t(8)}) {
    ASSERT_TRUE(transfer(net_, s1, r1, size, size, 1, &err)) << err;
    ASSERT_TRUE(transfer(net_, s2, r2, size, size, 2, &err)) << err;
  }
  for (void* c : {s1, r1, s2, r2}) ASSERT_TRUE(signlion::net::commSharesControl(c));
  int warns = PluginLog::otherWarns();
  ASSERT_EQ(net_.closeRecv(r1), ncclSuccess);
  // 3000 inline messages of 16 KiB: 48 MiB, far beyond the socket buffers.
  int64_t start = nowMs();
  EXPECT_EQ(sendAll(s1, {16384, 16384, 16384, 1000}, 3000), "");
  EXPECT_LT(nowMs() - start, 6000) << "the sender waited for the timeout";
  for (size_t size : {size_t(8), size_t(3) << 20}) EXPECT_TRUE(transfer(net_, s2, r2, size, size, 3, &err)) << err;
  EXPECT_EQ(net_.closeSend(s1), ncclSuccess);
  EXPECT_EQ(net_.closeSend(s2), ncclSuccess);
  EXPECT_EQ(net_.closeRecv(r2), ncclSuccess);
  EXPECT_EQ(PluginLog::otherWarns(), warns) << PluginLog::lastWarn();
}

// Both ends closed with requests in flight on both sides, in either order
// and after partial progress: everything is freed (ASan in README command (2)).
TEST_P(Teardown, BothSidesClosedWithRequestsInFlightInEitherOrder) {
  for (int order = 0; order < 2; order++) {
    void *s, *r;
    pair(&s, &r);
    // Each receive its own region of dst: receives in flight at once must not
    // share memory (two of them filling one buffer is a race of the test's).
    const size_t slot = size_t(2) << 20;
    std::vector<char> src(slot, 3), dst(12 * slot);
    for (int i = 0; i < 12; i++) {
      void* req = nullptr;
      size_t size = i % 2 ? 1000 : slot;
      ASSERT_EQ(net_.isend(s, src.data(), size, i, nullptr, &req), ncclSuccess);
      int done = 0;
      if (req != nullptr) {
        ASSERT_EQ(net_.test(req, &done, nullptr), ncclSuccess);
      }
      void* d = dst.data() + i * slot;
      size_t cap = slot;
      int tag = 11 - i;  // claims out of order
      ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
      if (req != nullptr) {
        ASSERT_EQ(net_.test(req, &done, nullptr), ncclSuccess);
      }
    }
    if (order == 0) {
      EXPECT_EQ(net_.closeSend(s), ncclSuccess);
      EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
    } else {
      EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
      EXPECT_EQ(net_.closeSend(s), ncclSuccess);
    }
  }
}

// An orderly close (nothing in flight, the receiver idle in this process,
// as ranks that are threads of one process close their comms) does not wait
// out the close's own bound: the UCX transport's flush waited for a peer
// worker nobody progressed until its 2 s limit, every close of every comm.
// The bound is 2 s per close; four closes in under 4 s in all (each takes a
// few ms when it works) show that none waited for it.
TEST_P(Teardown, OrderlyCloseWithThePeerInThisProcessIsNotHeldToItsBound) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "30000");
  std::string err;
  int64_t closing = 0;
  for (int i = 0; i < 4; i++) {
    void *s, *r;
    pair(&s, &r);
    ASSERT_TRUE(transfer(net_, s, r, 1000, 1000, i, &err)) << err;
    int64_t start = nowMs();
    EXPECT_EQ(net_.closeSend(s), ncclSuccess);
    closing += nowMs() - start;
    EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
  }
  EXPECT_LT(closing, 4000) << "the closes waited for their bound";
}

// signlionNetAbortComm, which the host communicator's abort calls on every
// link before it closes them: once the aborted comm is closed, its peer
// fails (ncclRemoteError) instead of completing as after the orderly closes
// above, long before SIGNLION_SOCKET_TIMEOUT could end its wait: a sender's
// pending sends (far more than the socket buffers hold, none received) and
// new ones, a receiver's posted receive. The close after the abort waits on
// nothing. Anything but a live send or recv comm is ncclInvalidArgument.
TEST_P(Teardown, AbortedCommFailsThePeersOperationsAtOnce) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "30000");
  using AbortFn = ncclResult_t (*)(void*);
  auto abortComm = reinterpret_cast<AbortFn>(dlsym(lib_, "signlionNetAbortComm"));
  ASSERT_NE(abortComm, nullptr) << "the plugin exports no signlionNetAbortComm";
  int dummy = 0;
  EXPECT_EQ(abortComm(nullptr), ncclInvalidArgument);
  EXPECT_EQ(abortComm(&dummy), ncclInvalidArgument);
  for (bool abortReceiver : {true, false}) {
    SCOPED_TRACE(abortReceiver ? "receiver aborted" : "sender aborted");
    void *s, *r;
    pair(&s, &r);
    std::string err;
    ASSERT_TRUE(transfer(net_, s, r, 70000, 70000, 1, &err)) << err;
    std::vector<char> buf(size_t(4) << 20, 3);
    std::vector<void*> reqs;
    void* recvReq = nullptr;
    if (abortReceiver) {
      for (int i = 0; i < 8; i++) {  // 32 MiB: beyond what the socket buffers hold
        void* req = nullptr;
        ASSERT_EQ(net_.isend(s, buf.data(), buf.size(), 10 + i, nullptr, &req), ncclSuccess);
        if (req != nullptr) reqs.push_back(req);
      }
      ASSERT_FALSE(reqs.empty());
    } else {
      void* d = buf.data();
      size_t cap = buf.size();
      int tag = 10;
      ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, nullptr, &recvReq), ncclSuccess);
      ASSERT_NE(recvReq, nullptr);
    }
    int64_t start = nowMs();
    ASSERT_EQ(abortComm(abortReceiver ? r : s), ncclSuccess);
    EXPECT_EQ(abortReceiver ? net_.closeRecv(r) : net_.closeSend(s), ncclSuccess);
    EXPECT_LT(nowMs() - start, 1000) << "the close after an abort waited on the peer";
    ncclResult_t seen = ncclSuccess;
    if (abortReceiver) {
      // Some send fails: a pending one or, once every pending one is
      // through, the next one posted.
      for (int round = 0; seen == ncclSuccess && nowMs() - start < 10000; round++) {
        for (size_t i = 0; i < reqs.size() && seen == ncclSuccess;) {
          int done = 0;
          seen = net_.test(reqs[i], &done, nullptr);
          if (done)
            reqs.erase(reqs.begin() + (std::ptrdiff_t)i);  // a done request is tested no more
          else
            i++;
        }
        if (seen == ncclSuccess && reqs.empty()) {
          void* req = nullptr;
          seen = net_.isend(s, buf.data(), 1000, 100 + round, nullptr, &req);
          if (req != nullptr) reqs.push_back(req);
        }
      }
    } else {
      seen = waitReq(recvReq, nullptr, 10000);
    }
    EXPECT_EQ(seen, ncclRemoteError) << "the peer of the aborted comm";
    EXPECT_LT(nowMs() - start, 5000) << "the peer saw the abort only after a timeout";
    EXPECT_EQ(abortReceiver ? net_.closeSend(s) : net_.closeRecv(r), ncclSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(Latest, Teardown, ::testing::Values(12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
