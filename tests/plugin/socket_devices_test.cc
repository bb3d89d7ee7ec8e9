// The socket transport's devices, in process: which interfaces pass
// SIGNLION_SOCKET_IFNAME (NCCL's syntax, following Gloo's and NCCL's
// variables) and how many data streams a comm opens on them.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "net/socket_device_table.h"
#include "net/socket_devices.h"
#include "plugin_fixture.h"
#include "socket/socket_transport.h"

using namespace signlion::nettest;

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

// NIC fusion only of interfaces the spec names: NCCL calls makeVDevice on its
// own for interfaces it finds close together (every one without a PCI device
// is), so with no spec, or an exclude list, a fusion is refused
// (ncclInvalidUsage: NCCL then keeps them apart); named, the same two fuse.
// Needs two interfaces of one address family besides docker ones (loopback
// counts): skipped with fewer. netns.multinic_fused_device checks the same
// with two veths and no spec at all.
TEST(SocketIfname, FusesOnlyInterfacesTheSpecNames) {
  Env gloo("GLOO_SOCKET_IFNAME", "");
  Env nccl("NCCL_SOCKET_IFNAME", "");
  std::string names[2];
  {
    Env every("SIGNLION_SOCKET_IFNAME", "^=no-such-if");  // excludes nothing, names nothing
    NetDriver net;
    net.bindInProcess(12);
    ASSERT_EQ(net.init(&PluginLog::logger), ncclSuccess);
    int ndev = 0;
    ASSERT_EQ(net.devices(&ndev), ncclSuccess);
    // The first pair that is not refused for its arguments (two address families).
    ncclResult_t r = ncclInvalidArgument;
    for (int a = 0; a < ndev && r == ncclInvalidArgument; a++)
      for (int b = a + 1; b < ndev && r == ncclInvalidArgument; b++) {
        const int pair[] = {a, b};
        int d = -1;
        r = net.makeVDevice(2, pair, &d);
        ncclNetProperties_v12_t pa, pb;
        ASSERT_EQ(net.properties(a, &pa), ncclSuccess);
        ASSERT_EQ(net.properties(b, &pb), ncclSuccess);
        names[0] = pa.name;
        names[1] = pb.name;
      }
    net.finalize();
    if (r == ncclInvalidArgument) GTEST_SKIP() << "fewer than two interfaces of one address family";
    EXPECT_EQ(r, ncclInvalidUsage) << names[0] << "+" << names[1] << " fused under an exclude list";
    int after = 0;
    ASSERT_EQ(net.devices(&after), ncclSuccess);
    EXPECT_EQ(after, ndev) << "nothing was made";
  }
  const std::string both = "=" + names[0] + "," + names[1];
  for (const char* spec : {"", "^docker", both.c_str()}) {
    SCOPED_TRACE(std::string("SIGNLION_SOCKET_IFNAME=") + spec);
    Env mine("SIGNLION_SOCKET_IFNAME", spec);
    NetDriver net;
    net.bindInProcess(12);
    ASSERT_EQ(net.init(&PluginLog::logger), ncclSuccess);
    const int pair[] = {findDevice(net, names[0]), findDevice(net, names[1])};
    if (pair[0] < 0 || pair[1] < 0) {  // the default spec leaves loopback out when there is another interface
      EXPECT_STREQ(spec, "");
      net.finalize();
      continue;
    }
    int ndev = 0, after = 0, d = -1;
    ASSERT_EQ(net.devices(&ndev), ncclSuccess);
    const bool named = spec == both.c_str();
    EXPECT_EQ(net.makeVDevice(2, pair, &d), named ? ncclSuccess : ncclInvalidUsage);
    ASSERT_EQ(net.devices(&after), ncclSuccess);
    EXPECT_EQ(after, named ? ndev + 1 : ndev);
    net.finalize();
  }
}

// ---- Data streams per comm (SIGNLION_NSOCKS, SIGNLION_SOCKET_SPEED) --------------------

// Unset (0), SIGNLION_NSOCKS follows the link: one data stream below 10 Gbit/s,
// four at or above it; a value it is given wins, 1..64 (200 is WARNed and read
// as unset, param.h's rule). Loopback's sysfs has no speed, so
// SIGNLION_SOCKET_SPEED plays the link (as it does for a tbf-limited veth,
// which reports 10000); the device reports that speed too.
// Every case moves a message across all its streams, bit exact. In process:
// the dlopen'ed copy would keep the first case's parameters.
TEST(SocketStreams, FollowTheLinkSpeedUnlessSet) {
  struct Case {
    const char* speed;
    const char* nsocks;
    int streams;
  };
  const Case cases[] = {{"100", "0", 1},   {"1000", "0", 1},    {"9999", "0", 1}, {"10000", "0", 4},
                        {"100000", "0", 4}, {"100", "3", 3},     {"25000", "1", 1}, {"100", "200", 1}};
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
