// One control connection shared by the two directions between two
// processes (socket_pairing.h), driven through the plugin on loopback.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <climits>
#include <string>
#include <vector>

#include "net/socket_net.h"
#include "plugin_fixture.h"

using namespace signlion::nettest;

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
