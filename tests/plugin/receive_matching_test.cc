// Receive matching through the dlopen'ed plugin, as independent ncclNet test
// suites and NCCL's proxy exercise it: a message goes to the oldest posted
// receive (single or grouped) that holds its tag, in the order the sender
// posted messages with that tag, whatever order the tags arrive in and
// whether or not a receive for the tag is posted yet.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "plugin_fixture.h"

using namespace signlion::nettest;

namespace {

class ReceiveMatching : public PluginTest {
 protected:
  // One single receive of cap bytes into buf for tag; its request, or
  // nullptr (a test failure already recorded).
  void* postReceive(void* r, void* buf, size_t cap, int tag) {
    void* req = nullptr;
    EXPECT_EQ(net_.irecv(r, 1, &buf, &cap, &tag, nullptr, &req), ncclSuccess);
    EXPECT_NE(req, nullptr);
    return req;
  }
  // isend until it returns a request ("no request" is "try again": the UCX
  // transport's first isend waits for the listener's answer), 5 s at most.
  void* sendRetrying(void* s, void* buf, size_t size, int tag) {
    void* req = nullptr;
    for (int64_t t0 = nowMs(); req == nullptr && nowMs() - t0 < 5000;)
      if (net_.isend(s, buf, size, tag, nullptr, &req) != ncclSuccess) break;
    EXPECT_NE(req, nullptr) << "isend of tag " << tag << " returned no request for 5 s, or failed";
    return req;
  }
};

// One message: its tag, size and pattern seed; where it must land.
struct Msg {
  int tag;
  size_t size;
  uint64_t seed;
  std::vector<char> src, dst;
  int recv = -1;  // index of the receive request it belongs to
  int sub = -1;   // slot inside that request
};

// Posts the receives described by `groups` (each a list of message indices
// that one irecv takes, in slot order), then the sends in `sendOrder` (at
// most 32 outstanding, retried while the table is full), and checks every
// message landed bit-exact in its own slot with its own size.
void exchange(NetDriver& net, void* s, void* r, std::vector<Msg>& msgs, const std::vector<std::vector<int>>& groups,
              const std::vector<int>& sendOrder) {
  std::vector<void*> rreqs;
  for (size_t g = 0; g < groups.size(); g++) {
    void* data[8];
    size_t caps[8];
    int tags[8];
    int n = (int)groups[g].size();
    for (int k = 0; k < n; k++) {
      Msg& m = msgs[groups[g][k]];
      m.recv = (int)g;
      m.sub = k;
      data[k] = m.dst.data();
      caps[k] = m.dst.size();
      tags[k] = m.tag;
    }
    void* req = nullptr;
    ASSERT_EQ(net.irecv(r, n, data, caps, tags, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr) << "receive " << g;
    rreqs.push_back(req);
  }
  // Sends: keep up to 32 in flight, testing receives too so both sides move.
  std::vector<void*> sreqs;
  size_t next = 0;
  int64_t start = nowMs();
  std::vector<std::vector<int>> got(rreqs.size(), std::vector<int>(8, -1));
  std::vector<void*> rleft = rreqs;
  size_t rdone = 0;
  while (next < sendOrder.size() || !sreqs.empty() || rdone < rleft.size()) {
    ASSERT_LT(nowMs() - start, kLoopLimitMs) << "transfers did not complete";
    while (next < sendOrder.size()) {
      Msg& m = msgs[sendOrder[next]];
      void* req = nullptr;
      ASSERT_EQ(net.isend(s, m.src.data(), m.size, m.tag, nullptr, &req), ncclSuccess);
      if (req == nullptr) break;  // table full: retry after a completion
      sreqs.push_back(req);
      next++;
    }
    for (size_t i = 0; i < sreqs.size();) {
      int done = 0;
      ASSERT_EQ(net.test(sreqs[i], &done, nullptr), ncclSuccess);
      if (done)
        sreqs.erase(sreqs.begin() + i);
      else
        i++;
    }
    for (size_t i = 0; i < rleft.size(); i++) {
      if (rleft[i] == nullptr) continue;
      int done = 0;
      ASSERT_EQ(net.test(rleft[i], &done, got[i].data()), ncclSuccess) << "receive " << i;
      if (done) rleft[i] = nullptr, rdone++;
    }
  }
  for (size_t i = 0; i < msgs.size(); i++) {
    const Msg& m = msgs[i];
    EXPECT_EQ(got[m.recv][m.sub], (int)m.size) << "message " << i << " tag " << m.tag;
    EXPECT_EQ(checkPattern(m.dst.data(), m.size, m.seed), SIZE_MAX) << "message " << i << " tag " << m.tag;
  }
}

// Posts one receive of n slots for msgs[idx[0..n)] and waits for it; checks
// each slot's size and bytes.
void receiveInto(NetDriver& net, void* r, std::vector<Msg>& msgs, const std::vector<int>& idx) {
  void* data[8];
  size_t caps[8];
  int tags[8];
  int n = (int)idx.size();
  for (int k = 0; k < n; k++) {
    data[k] = msgs[idx[k]].dst.data();
    caps[k] = msgs[idx[k]].dst.size();
    tags[k] = msgs[idx[k]].tag;
  }
  void* req = nullptr;
  ASSERT_EQ(net.irecv(r, n, data, caps, tags, nullptr, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  int got[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int done = 0;
  int64_t start = nowMs();
  while (!done && nowMs() - start < kLoopLimitMs)
    ASSERT_EQ(net.test(req, &done, got), ncclSuccess) << PluginLog::lastWarn();
  ASSERT_EQ(done, 1);
  for (int k = 0; k < n; k++) {
    const Msg& m = msgs[idx[k]];
    EXPECT_EQ(got[k], (int)m.size) << "tag " << m.tag;
    EXPECT_EQ(checkPattern(m.dst.data(), m.size, m.seed), SIZE_MAX) << "tag " << m.tag;
  }
}

Msg makeMsg(int tag, size_t size, uint64_t seed) {
  Msg m;
  m.tag = tag;
  m.size = size;
  m.seed = seed;
  m.src.resize(std::max<size_t>(size, 1));
  fillPattern(m.src.data(), size, seed);
  m.dst.assign(size + 32, 0x5a);
  return m;
}

}  // namespace

// Grouped receives of 1..8 with their tags interleaved across groups and
// across single receives; sends in an order that follows none of the
// receives. Inline, empty and spread messages mixed.
TEST_P(ReceiveMatching, GroupedReceivesWithTagsInterleavedAcrossGroups) {
  void *s, *r;
  pair(&s, &r);
  const size_t kSizes[] = {8, 0, 70000, 100, 300000, 4096, 65536, 65537, 3};
  for (int n = 1; n <= 8; n++) {
    SCOPED_TRACE("group size " + std::to_string(n));
    std::vector<Msg> msgs;
    std::vector<std::vector<int>> groups(3);
    // Group A takes tags 0, 3, 6, ...; a single receive in between takes
    // tag 1000; group B takes 1, 4, 7, ...; another single takes 2000.
    for (int k = 0; k < n; k++) {
      groups[0].push_back((int)msgs.size());
      msgs.push_back(makeMsg(3 * k, kSizes[k % 9], 100 * n + k));
    }
    groups[1].push_back((int)msgs.size());
    msgs.push_back(makeMsg(1000, 5000, 100 * n + 50));
    for (int k = 0; k < n; k++) {
      groups[2].push_back((int)msgs.size());
      msgs.push_back(makeMsg(3 * k + 1, kSizes[(k + 4) % 9], 100 * n + 60 + k));
    }
    groups.push_back({(int)msgs.size()});
    msgs.push_back(makeMsg(2000, 200000, 100 * n + 90));
    // Send B's and A's messages alternately from the end, the singles in between.
    std::vector<int> order;
    order.push_back(groups[3][0]);
    for (int k = n - 1; k >= 0; k--) {
      order.push_back(groups[2][k]);
      if (k == n / 2) order.push_back(groups[1][0]);
      order.push_back(groups[0][k]);
    }
    exchange(net_, s, r, msgs, groups, order);
  }
  net_.closeSend(s);
  net_.closeRecv(r);
}

// Several receives hold the same tag: messages with that tag fill them in
// the order both sides posted them, also when other tags come in between.
TEST_P(ReceiveMatching, SameTagFillsReceivesInPostOrder) {
  void *s, *r;
  pair(&s, &r);
  std::vector<Msg> msgs;
  for (int k = 0; k < 6; k++) msgs.push_back(makeMsg(k % 2 == 0 ? 7 : 8, 1000 + 40000 * k, 300 + k));
  // Receives: {7, 8}, {7}, {8, 7}, {8}; sends: 8, 8, 7, 7, 7, 8 by index order of their tag.
  std::vector<std::vector<int>> groups = {{0, 1}, {2}, {3, 4}, {5}};
  std::vector<int> order = {1, 3, 0, 2, 4, 5};
  exchange(net_, s, r, msgs, groups, order);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// Small messages that arrive before any receive for their tag is posted, in
// a tag order of their own, wait until their receives come; a spread
// message with no receive yet does not hold back the small ones behind it.
TEST_P(ReceiveMatching, EarlyInlineMessagesWithTagsOutOfOrder) {
  void *s, *r;
  pair(&s, &r);
  const int kEarly = 12;
  const int kTags[kEarly] = {9, 2, 11, 5, 0, 7, 3, 10, 1, 8, 6, 4};
  std::vector<Msg> msgs;
  for (int k = 0; k < kEarly; k++) msgs.push_back(makeMsg(kTags[k], k % 3 == 0 ? 0 : 10 * k + 1, 700 + k));
  msgs.push_back(makeMsg(50, 1 << 20, 750));  // spread, its receive comes last
  msgs.push_back(makeMsg(99, 64, 799));       // the one receive posted first
  std::vector<void*> sreqs;
  for (Msg& m : msgs) {
    void* req = nullptr;
    ASSERT_EQ(net_.isend(s, m.src.data(), m.size, m.tag, nullptr, &req), ncclSuccess);
    ASSERT_NE(req, nullptr);
    sreqs.push_back(req);
  }
  // Tag 99 is behind every other message on the wire.
  receiveInto(net_, r, msgs, {(int)msgs.size() - 1});
  // Now the early ones, by ascending tag: singles and a group of three.
  std::vector<int> byTag(kEarly);
  for (int k = 0; k < kEarly; k++) byTag[kTags[k]] = k;
  for (int t = 0; t < kEarly;) {
    int n = t == 4 ? 3 : 1;
    receiveInto(net_, r, msgs, std::vector<int>(byTag.begin() + t, byTag.begin() + t + n));
    t += n;
  }
  receiveInto(net_, r, msgs, {kEarly});  // the spread one
  for (void* q : sreqs) EXPECT_EQ(waitReq(q, nullptr), ncclSuccess);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// The maximum outstanding requests on both sides at once: 32 receives (24
// singles and 8 groups of 8) posted, then 88 sends, 32 in flight at a time,
// in the reverse order of the receives' tags.
TEST_P(ReceiveMatching, MaximumOutstandingRequestsBothSidesReverseTagOrder) {
  void *s, *r;
  pair(&s, &r);
  std::vector<Msg> msgs;
  std::vector<std::vector<int>> groups;
  for (int g = 0; g < NCCL_NET_MAX_REQUESTS; g++) {
    int n = g % 4 == 3 ? 8 : 1;
    groups.emplace_back();
    for (int k = 0; k < n; k++) {
      int i = (int)msgs.size();
      groups.back().push_back(i);
      msgs.push_back(makeMsg(i, i % 5 == 0 ? 150000 : 8 * i, 1000 + i));
    }
  }
  ASSERT_EQ(msgs.size(), 88u);
  std::vector<int> order(msgs.size());
  std::iota(order.rbegin(), order.rend(), 0);
  exchange(net_, s, r, msgs, groups, order);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// A message that no posted receive ever claims fails the receive that waits
// beside it after SIGNLION_SOCKET_TIMEOUT, with a WARN naming its tag.
TEST_P(ReceiveMatching, MessageNoReceiveClaimsIsAnErrorAfterTheTimeout) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "1000");
  void *s, *r;
  pair(&s, &r);
  char buf[16] = {};
  ASSERT_NE(sendRetrying(s, buf, 8, 4242), nullptr);
  void* rreq = postReceive(r, buf, sizeof(buf), 1);
  ASSERT_NE(rreq, nullptr);
  int before = PluginLog::warns().load();
  int64_t start = nowMs();
  EXPECT_EQ(waitReq(rreq, nullptr, 20000), ncclInvalidUsage);
  EXPECT_GE(nowMs() - start, 900);
  EXPECT_LT(nowMs() - start, 10000);
  EXPECT_GT(PluginLog::warns().load(), before);
  EXPECT_NE(PluginLog::lastWarn().find("tag 4242"), std::string::npos) << PluginLog::lastWarn();
  net_.closeSend(s);
  net_.closeRecv(r);
}

// A sender that connected but sends nothing for longer than the timeout is
// a live peer, not a silent one: the receive posted meanwhile waits, and
// completes once the message comes. (The UCX transport's sender wrote no
// heartbeat before its first isend: its receiver failed this receive with
// "peer silent".)
TEST_P(ReceiveMatching, ReceiveOutwaitsASenderIdleSinceConnect) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "500");
  void *s, *r;
  pair(&s, &r);
  char src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8] = {};
  void* rreq = postReceive(r, dst, sizeof(dst), 3);
  ASSERT_NE(rreq, nullptr);
  int done = 0;
  for (int64_t start = nowMs(); nowMs() - start < 1500;) {  // three timeouts, the sender untouched
    ASSERT_EQ(net_.test(rreq, &done, nullptr), ncclSuccess) << PluginLog::lastWarn();
    ASSERT_EQ(done, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  void* sreq = sendRetrying(s, src, sizeof(src), 3);
  ASSERT_NE(sreq, nullptr);
  int sizes[1] = {-1};
  EXPECT_EQ(waitReq(rreq, sizes, 10000), ncclSuccess) << PluginLog::lastWarn();
  EXPECT_EQ(sizes[0], 8);
  EXPECT_EQ(memcmp(src, dst, sizeof(src)), 0);
  EXPECT_EQ(waitReq(sreq, nullptr, 10000), ncclSuccess);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// Matching under many tags: 30 rounds of 64 messages, 1000 distinct tags
// (reused from round 16 on), each round's receives posted as grouped ones
// of 1..8 slots, its sends shuffled.
TEST_P(ReceiveMatching, ManyTagsInShuffledRounds) {
  void *s, *r;
  pair(&s, &r);
  uint64_t rng = 12345;
  auto next = [&rng](uint64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
  };
  for (int round = 0; round < 30; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<Msg> msgs;
    std::vector<std::vector<int>> groups;
    size_t groupSize = 0;
    for (int k = 0; k < 64; k++) {
      size_t size = next(9) == 0 ? 70000 + next(200000) : next(3000);
      msgs.push_back(makeMsg((round * 64 + k) % 1000, size, round * 64 + k));
      if (groups.empty() || groups.back().size() == groupSize) {
        groups.emplace_back();
        groupSize = 1 + next(8);
      }
      groups.back().push_back(k);
    }
    std::vector<int> order(64);
    std::iota(order.begin(), order.end(), 0);
    for (int k = 63; k > 0; k--) std::swap(order[k], order[next(k + 1)]);
    exchange(net_, s, r, msgs, groups, order);
    if (HasFatalFailure()) break;
  }
  net_.closeSend(s);
  net_.closeRecv(r);
}

// A message whose receive comes late is no error while the comm keeps
// moving: here the receiver takes 25 messages of another tag one at a time,
// 100 ms apart (2.5 s in all, SIGNLION_SOCKET_TIMEOUT 1 s), before it posts
// the receive for the message that arrived first. Only a comm that is stuck
// (receives waiting, nothing arriving) for the timeout is an error.
TEST_P(ReceiveMatching, LateReceiveWhileOtherMessagesFlowIsNoError) {
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "1000");
  void *s, *r;
  pair(&s, &r);
  std::vector<Msg> msgs;
  msgs.push_back(makeMsg(7, 8, 11));  // arrives first, claimed last
  void* first = nullptr;
  ASSERT_EQ(net_.isend(s, msgs[0].src.data(), msgs[0].size, msgs[0].tag, nullptr, &first), ncclSuccess);
  ASSERT_NE(first, nullptr);
  for (int i = 0; i < 25; i++) {
    msgs.push_back(makeMsg(8, 100 + i, 20 + i));
    Msg& m = msgs.back();
    void* d = m.dst.data();
    size_t cap = m.dst.size();
    void* rreq = nullptr;
    ASSERT_EQ(net_.irecv(r, 1, &d, &cap, &m.tag, nullptr, &rreq), ncclSuccess);
    ASSERT_NE(rreq, nullptr);
    // The receive waits 100 ms with nothing to take (the early message beside it).
    int64_t until = nowMs() + 100;
    int done = 0;
    while (nowMs() < until) {
      ASSERT_EQ(net_.test(rreq, &done, nullptr), ncclSuccess) << "message " << i << ": " << PluginLog::lastWarn();
      ASSERT_EQ(done, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    void* sreq = nullptr;
    ASSERT_EQ(net_.isend(s, m.src.data(), m.size, m.tag, nullptr, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    int got = -1;
    ASSERT_EQ(waitReq(rreq, &got), ncclSuccess) << "message " << i << ": " << PluginLog::lastWarn();
    EXPECT_EQ(got, (int)m.size);
    EXPECT_EQ(checkPattern(m.dst.data(), m.size, m.seed), SIZE_MAX);
    ASSERT_EQ(waitReq(sreq, nullptr), ncclSuccess);
  }
  receiveInto(net_, r, msgs, {0});
  EXPECT_EQ(waitReq(first, nullptr), ncclSuccess);
  net_.closeSend(s);
  net_.closeRecv(r);
}

// More early messages than a comm keeps (256), all of a tag no receive
// holds, ahead of the one the receiver waits for: the comm stops reading and
// the waiting receive fails after SIGNLION_SOCKET_TIMEOUT with a WARN that
// says the kept-message limit is why, not a hang.
TEST_P(ReceiveMatching, KeptMessageLimitIsAClearErrorAfterTheTimeout) {
  // UCP keeps unclaimed messages in its worker's unexpected queue, which has
  // no count limit to reach (docs/dev/PLUGIN_INTERNALS.md, "UCX transport"): the UCX form
  // of this contract is the next test.
  if (!socketTransport()) GTEST_SKIP() << "the UCX transport has no kept-message limit (UCP's unexpected queue)";
  Env timeout("SIGNLION_SOCKET_TIMEOUT", "1000");
  void *s, *r;
  pair(&s, &r);
  char src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
  void* rreq = postReceive(r, dst, sizeof(dst), 6);
  ASSERT_NE(rreq, nullptr);
  const int kEarly = 300;
  std::vector<void*> sreqs;
  int posted = 0, rdone = 0;
  ncclResult_t rres = ncclSuccess;
  int64_t start = nowMs();
  while (rres == ncclSuccess && nowMs() - start < 20000) {
    while (posted <= kEarly) {
      void* q = nullptr;
      ASSERT_EQ(net_.isend(s, src, sizeof(src), posted == kEarly ? 6 : 5, nullptr, &q), ncclSuccess);
      if (q == nullptr) break;
      sreqs.push_back(q);
      posted++;
    }
    for (size_t i = 0; i < sreqs.size();) {
      int done = 0;
      ASSERT_EQ(net_.test(sreqs[i], &done, nullptr), ncclSuccess);
      if (done)
        sreqs.erase(sreqs.begin() + i);
      else
        i++;
    }
    rres = net_.test(rreq, &rdone, nullptr);
    ASSERT_EQ(rdone, 0) << "the receive cannot complete: its message is behind the limit";
  }
  EXPECT_EQ(rres, ncclInvalidUsage);
  EXPECT_LT(nowMs() - start, 10000);
  std::string warn = PluginLog::lastWarn();
  EXPECT_NE(warn.find("tag 5"), std::string::npos) << warn;
  EXPECT_NE(warn.find("256 kept"), std::string::npos) << warn;
  net_.closeSend(s);
  net_.closeRecv(r);
}

// The UCX transport's form of the test above: UCP keeps every unclaimed
// message (its unexpected queue has no count limit), so the receive behind
// 300 of them completes bit-exact, and receives posted later claim the 300
// in their send order, none lost. (The bound on the socket transport's kept
// messages is its own; docs/PLUGIN.md says what UCX bounds instead.)
TEST_P(ReceiveMatching, UcxKeepsEveryUnclaimedMessageInSendOrder) {
  if (socketTransport()) GTEST_SKIP() << "the socket transport keeps at most 256 (the test above)";
  void *s, *r;
  pair(&s, &r);
  const int kEarly = 300;
  std::vector<uint32_t> src(kEarly + 1), dst(kEarly + 1, 0xffffffffu);
  for (int i = 0; i <= kEarly; i++) src[i] = 0x5a000000u + (uint32_t)i;
  void* rreq = postReceive(r, &dst[kEarly], sizeof(uint32_t), 6);
  ASSERT_NE(rreq, nullptr);
  std::vector<void*> sreqs;
  int posted = 0, rdone = 0;
  int64_t start = nowMs();
  while ((!rdone || !sreqs.empty() || posted <= kEarly) && nowMs() - start < 20000) {
    while (posted <= kEarly) {
      void* q = nullptr;
      ASSERT_EQ(net_.isend(s, &src[posted], sizeof(uint32_t), posted == kEarly ? 6 : 5, nullptr, &q), ncclSuccess);
      if (q == nullptr) break;
      sreqs.push_back(q);
      posted++;
    }
    for (size_t i = 0; i < sreqs.size();) {
      int done = 0;
      ASSERT_EQ(net_.test(sreqs[i], &done, nullptr), ncclSuccess) << PluginLog::lastWarn();
      if (done)
        sreqs.erase(sreqs.begin() + i);
      else
        i++;
    }
    if (!rdone) {
      ASSERT_EQ(net_.test(rreq, &rdone, nullptr), ncclSuccess) << PluginLog::lastWarn();
    }
  }
  ASSERT_TRUE(rdone) << "the receive behind " << kEarly << " unclaimed messages did not complete";
  ASSERT_TRUE(sreqs.empty());
  EXPECT_EQ(dst[kEarly], src[kEarly]);
  for (int i = 0; i < kEarly; i++) {
    void* q = postReceive(r, &dst[i], sizeof(uint32_t), 5);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(waitReq(q, nullptr, 10000), ncclSuccess) << "message " << i;
    ASSERT_EQ(dst[i], src[i]) << "message " << i << " out of send order";
  }
  int warns = PluginLog::otherWarns();
  net_.closeSend(s);
  net_.closeRecv(r);
  EXPECT_EQ(PluginLog::otherWarns(), warns) << PluginLog::lastWarn();
}

INSTANTIATE_TEST_SUITE_P(Latest, ReceiveMatching, ::testing::Values(12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
