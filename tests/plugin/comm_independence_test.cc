// What one comm does never reaches another: closes with requests in flight
// leave the process's other comms working (net_concurrency_main.cc drives
// the same at random from many threads in two processes; these are its
// defects, each in its smallest deterministic form).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plugin_fixture.h"

using namespace signlion::nettest;

namespace {

class CommIndependence : public PluginTest {
 protected:
  // A send on s and a receive on r of size bytes, both completed; "" or what failed.
  std::string transferOk(void* s, void* r, size_t size, int tag) {
    std::string err;
    return transfer(net_, s, r, size, size, tag, &err) ? "" : err + " " + PluginLog::lastWarn();
  }
};

}  // namespace

// A receive whose message is already there completes inside irecv; closing
// its comm before testing it must not touch the next request the process
// posts (UCX reuses the completed request's memory for it: the close
// cancelled another comm's receive, "Request canceled").
TEST_P(CommIndependence, CloseWithAReceiveDoneInsideIrecvLeavesOtherCommsReceives) {
  void *s1, *r1, *s2, *r2;
  pair(&s1, &r1);
  pair(&s2, &r2);
  char msg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  void* sreq = nullptr;
  ASSERT_EQ(net_.isend(s1, msg, sizeof(msg), 1, nullptr, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  ASSERT_EQ(waitReq(sreq, nullptr), ncclSuccess);
  // Let the message reach r1's side before the receive is posted: a
  // transfer on the other pair moves the process's progress.
  ASSERT_EQ(transferOk(s2, r2, 64, 7), "");
  char in1[8];
  void* d = in1;
  size_t cap = sizeof(in1);
  int tag = 1;
  void* rreq1 = nullptr;
  ASSERT_EQ(net_.irecv(r1, 1, &d, &cap, &tag, nullptr, &rreq1), ncclSuccess);
  ASSERT_NE(rreq1, nullptr);
  // The next receive of the process, on the other comm, before r1's close.
  std::vector<char> in2(64, 0);
  d = in2.data();
  cap = in2.size();
  tag = 2;
  void* rreq2 = nullptr;
  ASSERT_EQ(net_.irecv(r2, 1, &d, &cap, &tag, nullptr, &rreq2), ncclSuccess);
  ASSERT_NE(rreq2, nullptr);
  ASSERT_EQ(net_.closeRecv(r1), ncclSuccess);  // rreq1 never tested: in flight for the caller
  std::vector<char> out2(64, 9);
  void* sreq2 = nullptr;
  ASSERT_EQ(net_.isend(s2, out2.data(), out2.size(), 2, nullptr, &sreq2), ncclSuccess);
  ASSERT_NE(sreq2, nullptr);
  int size = -1;
  EXPECT_EQ(waitReq(rreq2, &size, 10000), ncclSuccess) << PluginLog::lastWarn();
  EXPECT_EQ(size, 64);
  EXPECT_EQ(in2, out2);
  EXPECT_EQ(waitReq(sreq2, nullptr, 10000), ncclSuccess);
  EXPECT_EQ(net_.closeSend(s1), ncclSuccess);
  EXPECT_EQ(net_.closeSend(s2), ncclSuccess);
  EXPECT_EQ(net_.closeRecv(r2), ncclSuccess);
}

// Send comms made one after the other by one process (towards the same
// peer process, here itself): one closed with a large send in flight (a
// force close of its endpoint over UCX) leaves the next working, both
// ways. UCX pairs endpoints that two workers create towards each other
// (or, within one worker, every two); one worker for both sides merged
// such send comms into one connection.
TEST_P(CommIndependence, SendCommClosedWithASendInFlightLeavesTheNextSendCommWorking) {
  for (int round = 0; round < 3; round++) {
    void *s1, *r1, *s2, *r2;
    pair(&s1, &r1);
    pair(&s2, &r2);
    ASSERT_EQ(transferOk(s1, r1, 100, 1), "") << "round " << round;
    ASSERT_EQ(transferOk(s2, r2, 100, 1), "") << "round " << round;
    std::vector<char> big(size_t(4) << 20, 3);
    void* sreq = nullptr;
    ASSERT_EQ(net_.isend(s1, big.data(), big.size(), 5, nullptr, &sreq), ncclSuccess);
    ASSERT_NE(sreq, nullptr);
    int done = 0;
    ASSERT_EQ(net_.test(sreq, &done, nullptr), ncclSuccess);
    ASSERT_EQ(net_.closeSend(s1), ncclSuccess);  // the receiver never posted tag 5
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(transferOk(s2, r2, i % 2 ? 100 : size_t(1) << 20, 10 + i), "") << "round " << round << " transfer " << i;
    }
    EXPECT_EQ(net_.closeRecv(r1), ncclSuccess);
    EXPECT_EQ(net_.closeSend(s2), ncclSuccess);
    EXPECT_EQ(net_.closeRecv(r2), ncclSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(Latest, CommIndependence, ::testing::Values(11),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
