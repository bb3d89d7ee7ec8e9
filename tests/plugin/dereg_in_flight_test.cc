// deregMr of a region with transfers still in flight on it, as NCCL's proxy
// does on ncclCommAbort or a failed connection: it deregisters and frees a
// connection's buffers before it closes the comms, with sends and receives
// on them never tested to completion. Once deregMr returns, no byte of the
// region may be read or written by the plugin (its helper threads, its
// control path, UCX): here the region is overwritten with a new pattern
// right after deregMr (and poisoned under AddressSanitizer, so an access is
// reported where it happens), the peer then drives the traffic the
// cancelled transfers would have met, and the test checks that the peer
// received no byte of the new pattern and that the region kept it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plugin_fixture.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SIGNLION_TEST_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SIGNLION_TEST_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SIGNLION_TEST_POISON(p, n) ((void)(p), (void)(n))
#define SIGNLION_TEST_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

using namespace signlion::nettest;

namespace {

constexpr char kBefore = 'A';  // the region's bytes while registered
constexpr char kAfter = 'Z';   // written right after deregMr: the plugin must never move one

// A heap region the way NCCL's proxy holds a connection's buffer.
struct Region {
  explicit Region(size_t n) : size(n), p(static_cast<char*>(malloc(n))) { memset(p, kBefore, n); }
  ~Region() {
    SIGNLION_TEST_UNPOISON(p, size);
    free(p);
  }
  // What the caller does once deregMr returned: the bytes are no longer the
  // plugin's (poisoned: any access by the plugin is an ASan report).
  void release() {
    memset(p, kAfter, size);
    SIGNLION_TEST_POISON(p, size);
  }
  size_t countNot(char c) {
    SIGNLION_TEST_UNPOISON(p, size);
    size_t n = 0;
    for (size_t i = 0; i < size; i++) n += p[i] != c;
    return n;
  }
  size_t size;
  char* p;
};

class DeregInFlight : public PluginTest {
 protected:
  // Tests every request in reqs until each is done or failed, limitMs in
  // all; done or failed ones are removed. Returns how many failed.
  int drive(std::vector<void*>* reqs, int64_t limitMs) {
    int failed = 0;
    int64_t start = nowMs();
    while (!reqs->empty() && nowMs() - start < limitMs) {
      for (size_t i = 0; i < reqs->size();) {
        int done = 0;
        ncclResult_t res = net_.test((*reqs)[i], &done, nullptr);
        if (res != ncclSuccess || done) {
          failed += res != ncclSuccess;
          reqs->erase(reqs->begin() + (std::ptrdiff_t)i);
        } else {
          i++;
        }
      }
    }
    return failed;
  }
};

// Sends from a registered region, far more than the socket buffers hold,
// none received yet; deregMr; then the peer posts the receives and drains
// what comes. Before deregMr cancelled them, the socket transport's helper
// threads and UCX's rendezvous went on reading the region: the peer
// received kAfter bytes (and ASan reported the reads).
TEST_P(DeregInFlight, SendsInFlightReadNoByteOfTheRegionAfterDeregMr) {
  if (sendsUncancellable())
    GTEST_SKIP() << "UCX_TLS=" << getenv("UCX_TLS") << ": without peer error handling UCX cannot cancel a send";
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "10000");
  void *s, *r;
  pair(&s, &r);
  constexpr size_t kMsg = size_t(4) << 20;
  constexpr int kSends = 8;  // 32 MiB
  Region region(kMsg * kSends);
  void* mh = nullptr;
  ASSERT_EQ(net_.regMr(s, region.p, region.size, &mh), ncclSuccess);
  std::vector<void*> sends;
  for (int i = 0; i < kSends; i++) {
    void* req = nullptr;
    ASSERT_EQ(net_.isend(s, region.p + i * kMsg, kMsg, i, mh, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
    int done = 0;
    ASSERT_EQ(net_.test(req, &done, nullptr), ncclSuccess);
    if (!done) sends.push_back(req);
  }
  ASSERT_FALSE(sends.empty()) << "32 MiB with no receive posted went out at once";
  EXPECT_EQ(net_.deregMr(s, mh), ncclSuccess) << PluginLog::lastWarn();
  region.release();
  // The peer takes whatever comes, message by message.
  std::vector<char> dst(kMsg);
  size_t afterBytes = 0;
  int received = 0;
  for (int i = 0; i < kSends; i++) {
    void* d = dst.data();
    size_t cap = kMsg;
    int tag = i;
    void* req = nullptr;
    if (net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req) != ncclSuccess || req == nullptr) break;
    int sizes[1] = {0};
    if (waitReq(req, sizes, 12000) != ncclSuccess) break;
    received++;
    for (int k = 0; k < sizes[0]; k++) afterBytes += dst[k] == kAfter;
    std::fill(dst.begin(), dst.end(), 0);
  }
  EXPECT_EQ(afterBytes, 0u) << "the peer received bytes written into the region after deregMr (" << received
                            << " of " << kSends << " messages received)";
  EXPECT_LT(received, kSends) << "every send went through after deregMr";
  // The cancelled sends fail; none reports success with its data unsent.
  const size_t inFlight = sends.size();
  EXPECT_EQ(drive(&sends, 5000), (int)inFlight) << "a send cancelled by deregMr reported success";
  EXPECT_TRUE(sends.empty()) << sends.size() << " sends neither done nor failed";
  EXPECT_EQ(net_.closeSend(s), ncclSuccess);
  EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
  EXPECT_EQ(region.countNot(kAfter), 0u) << "the region changed after deregMr";
}

// Receives posted on a registered region, their messages not sent yet;
// deregMr; then the peer sends them, after a message no receive holds yet
// whose receive is posted next. Before deregMr cancelled them, the
// messages were matched to the deregistered receives and written into the
// region (socket: the control path and data streams; UCX: its rendezvous).
TEST_P(DeregInFlight, ReceivesInFlightWriteNoByteOfTheRegionAfterDeregMr) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "10000");
  void *s, *r;
  pair(&s, &r);
  constexpr size_t kMsg = size_t(1) << 20;  // spread over the data streams, rendezvous in UCX
  constexpr int kRecvs = 4;
  Region region(kMsg * kRecvs);
  void* mh = nullptr;
  ASSERT_EQ(net_.regMr(r, region.p, region.size, &mh), ncclSuccess);
  std::vector<void*> recvs;
  for (int i = 0; i < kRecvs; i++) {
    void* d = region.p + i * kMsg;
    size_t cap = kMsg;
    int tag = 1 + i;
    void* req = nullptr;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &tag, &mh, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
    int done = 0;
    ASSERT_EQ(net_.test(req, &done, nullptr), ncclSuccess);
    ASSERT_EQ(done, 0);
    recvs.push_back(req);
  }
  EXPECT_EQ(net_.deregMr(r, mh), ncclSuccess) << PluginLog::lastWarn();
  region.release();
  std::vector<char> src(kMsg, 'S');
  std::vector<void*> sends;
  for (int i = 0; i <= kRecvs; i++) {  // tag 0 first: no receive holds it yet
    void* req = nullptr;
    if (net_.isend(s, src.data(), kMsg, i, nullptr, &req) != ncclSuccess) break;
    if (req != nullptr) sends.push_back(req);
  }
  std::vector<char> other(kMsg);
  void* d = other.data();
  size_t cap = kMsg;
  int tag = 0;
  void* req = nullptr;
  if (net_.irecv(r, 1, &d, &cap, &tag, nullptr, &req) == ncclSuccess && req != nullptr) recvs.push_back(req);
  // Both sides driven together (the peer's sends and our receives share
  // this thread), until every request is done or failed.
  std::vector<void*> all = sends;
  all.insert(all.end(), recvs.begin(), recvs.end());
  int failed = drive(&all, 8000);
  EXPECT_TRUE(all.empty()) << all.size() << " requests neither done nor failed";
  EXPECT_GT(failed, 0) << "the receives cancelled by deregMr reported success";
  EXPECT_EQ(net_.closeSend(s), ncclSuccess);
  EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
  EXPECT_EQ(region.countNot(kAfter), 0u) << "bytes of the region were written after deregMr";
}

// The ordinary deregMr (every request on the region complete) leaves the
// comm working, with no WARN: later transfers go through.
TEST_P(DeregInFlight, DeregMrWithNothingInFlightLeavesTheCommWorking) {
  void *s, *r;
  pair(&s, &r);
  const int warns = PluginLog::otherWarns();
  std::string err;
  Region a(size_t(1) << 20);
  void *sm = nullptr, *rm = nullptr;
  ASSERT_EQ(net_.regMr(s, a.p, a.size, &sm), ncclSuccess);
  ASSERT_EQ(net_.regMr(r, a.p, a.size, &rm), ncclSuccess);
  ASSERT_TRUE(transfer(net_, s, r, 100000, 100000, 1, &err)) << err;
  EXPECT_EQ(net_.deregMr(s, sm), ncclSuccess);
  EXPECT_EQ(net_.deregMr(r, rm), ncclSuccess);
  ASSERT_TRUE(transfer(net_, s, r, 100000, 100000, 2, &err)) << err;
  EXPECT_EQ(PluginLog::otherWarns(), warns) << PluginLog::lastWarn();
  EXPECT_EQ(net_.closeSend(s), ncclSuccess);
  EXPECT_EQ(net_.closeRecv(r), ncclSuccess);
}

INSTANTIATE_TEST_SUITE_P(Latest, DeregInFlight, ::testing::Values(12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });

}  // namespace
