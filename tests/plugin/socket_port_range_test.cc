// SIGNLION_SOCKET_PORT_RANGE: the parser, and listenOnFreePort keeping to the
// range, moving past ports in use, and failing (not falling back to an
// ephemeral port a firewall may block) when the range is full or malformed.
// The whole path through a firewall is netns.firewall_documented_ports_only
// (tests/cluster.cmake).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/param.h"
#include "net/socket_port_range.h"
#include "net/socket_stream.h"

namespace signlion {
namespace net {
namespace {

SocketAddress loopback() {
  SocketAddress a{};
  a.sin.sin_family = AF_INET;
  a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int portOf(const SocketAddress& a) { return ntohs(a.sin.sin_port); }

class SocketPortRange : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int fd : fds_) close(fd);
    unsetenv("SIGNLION_SOCKET_PORT_RANGE");
    paramResetCache();
  }
  void setRange(const std::string& spec) {
    setenv("SIGNLION_SOCKET_PORT_RANGE", spec.c_str(), 1);
    paramResetCache();
  }
  bool listenOne(SocketAddress* bound) {
    int fd = -1;
    if (!listenOnFreePort(loopback(), 16, &fd, bound)) return false;
    fds_.push_back(fd);
    return true;
  }
  // A base port whose next n ports are all free now, below the kernel's
  // ephemeral range (so no outgoing connection takes one meanwhile).
  int freeBlock(int n) {
    for (int base = 20000 + (getpid() % 500) * 8; base < 32000; base += 8 * n) {
      setRange(std::to_string(base) + "-" + std::to_string(base + n - 1));
      std::vector<int> got;
      SocketAddress b;
      int fd = -1;
      while (got.size() < static_cast<size_t>(n) && listenOnFreePort(loopback(), 1, &fd, &b)) got.push_back(fd);
      bool all = got.size() == static_cast<size_t>(n) && portOf(b) == base + n - 1;
      for (int f : got) close(f);
      if (all) return base;
    }
    return -1;
  }
  std::vector<int> fds_;
};

TEST_F(SocketPortRange, Parses) {
  PortRange r;
  std::string why;
  EXPECT_TRUE(parsePortRange("", &r, &why));
  EXPECT_EQ(r.lo, 0);
  EXPECT_TRUE(parsePortRange("50000-50099", &r, &why));
  EXPECT_EQ(r.lo, 50000);
  EXPECT_EQ(r.hi, 50099);
  EXPECT_TRUE(parsePortRange("7", &r, &why));
  EXPECT_EQ(r.lo, 7);
  EXPECT_EQ(r.hi, 7);
  EXPECT_TRUE(parsePortRange("1-65535", &r, &why));
  for (const char* bad : {"abc", "10-5", "0-10", "5-65536", "70000", "1-2-3", " 5-6", "5-", "-5", "5:6", "+5"}) {
    why.clear();
    EXPECT_FALSE(parsePortRange(bad, &r, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
    EXPECT_EQ(r.lo, 0) << bad;
  }
}

TEST_F(SocketPortRange, UnsetTakesAnEphemeralPort) {
  SocketAddress b;
  ASSERT_TRUE(listenOne(&b));
  EXPECT_GT(portOf(b), 0);
}

TEST_F(SocketPortRange, KeepsToTheRangeAndFailsWhenItIsFull) {
  int base = freeBlock(3);
  ASSERT_GT(base, 0) << "no 3 free ports in a row between 20000 and 32000";
  setRange(std::to_string(base) + "-" + std::to_string(base + 2));
  SocketAddress b;
  for (int i = 0; i < 3; i++) {
    ASSERT_TRUE(listenOne(&b));
    EXPECT_EQ(portOf(b), base + i);  // the lowest free port: the one before is held
  }
  int fd = -1;
  EXPECT_FALSE(listenOnFreePort(loopback(), 16, &fd, &b));  // full: an error, never a port outside
  EXPECT_EQ(fd, -1);
  // A port freed is taken again at once (SO_REUSEADDR).
  close(fds_[1]);
  fds_.erase(fds_.begin() + 1);
  ASSERT_TRUE(listenOne(&b));
  EXPECT_EQ(portOf(b), base + 1);
}

TEST_F(SocketPortRange, MalformedRangeFailsToListen) {
  setRange("50000-49999");
  SocketAddress b;
  int fd = -1;
  EXPECT_FALSE(listenOnFreePort(loopback(), 16, &fd, &b));
  EXPECT_EQ(fd, -1);
}

}  // namespace
}  // namespace net
}  // namespace signlion
