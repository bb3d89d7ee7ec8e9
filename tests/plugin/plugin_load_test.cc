// The plugin in one process, loaded as NCCL loads it: every version's
// struct, its properties, and transfers of every size through each version,
// driven through the dlopen'ed libnccl-net-signlion.so on loopback.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/socket_devices.h"
#include "plugin_fixture.h"

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

// The UCX transport reports one device whatever the interfaces: the data go
// where UCX sends them (UCX_NET_DEVICES), and NCCL would take each device for
// a NIC of its own. The device is the first interface the variable selects:
// with an exclude list that excludes nothing, every interface (loopback too)
// is a candidate. In a process of its own (as CTest runs it) the transport's
// first init sees this spec; it had a device per interface before.
TEST(UcxDevices, OneDeviceWhateverTheInterfaces) {
  if (pluginIsSocket(pluginUnderTest(SIGNLION_PLUGIN_PATH))) GTEST_SKIP() << "the UCX transport's devices";
  Env every("SIGNLION_SOCKET_IFNAME", "^=no-such-if");
  const std::vector<signlion::net::SocketDevice> all = signlion::net::findSocketDevices(16);
  std::string err;
  void* lib = openPlugin(pluginUnderTest(SIGNLION_PLUGIN_PATH), &err);
  ASSERT_NE(lib, nullptr) << err;
  NetDriver net;
  ASSERT_TRUE(net.bind(lib, 12));
  ASSERT_EQ(net.init(&PluginLog::logger), ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(net.devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, 1) << all.size() << " interfaces";
  ncclNetProperties_v12_t p;
  ASSERT_EQ(net.properties(0, &p), ncclSuccess);
  ASSERT_FALSE(all.empty());
  if (all.size() > 1) {
    EXPECT_EQ(std::string(p.name), all[0].name) << "the first interface selected";
  }
  EXPECT_EQ(p.vProps.ndevs, 1);
  net.finalize();
  dlclose(lib);
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
  // Five devices: more than ncclNet v9-v11's props hold (a wrong argument);
  // v12's hold 8, and the socket transport fuses at most 4: a limit, refused
  // without a WARN (NCCL then tries fewer). The UCX transport fuses none.
  const int five[] = {0, 1, 2, 3, 4};
  const ncclResult_t tooMany = GetParam() == 12 && socketTransport() ? ncclInvalidUsage : ncclInvalidArgument;
  const int warns = PluginLog::warns();
  EXPECT_EQ(net_.makeVDevice(5, five, &d), tooMany) << "at most 4 interfaces per fused device";
  if (tooMany == ncclInvalidUsage) {
    EXPECT_EQ(PluginLog::warns(), warns) << PluginLog::lastWarn();
  }
  int after = 0;
  ASSERT_EQ(net_.devices(&after), ncclSuccess);
  EXPECT_EQ(after, ndev) << "nothing was made";
}

INSTANTIATE_TEST_SUITE_P(Versions, PluginTest, ::testing::Values(8, 9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
INSTANTIATE_TEST_SUITE_P(Versions, PluginFusion, ::testing::Values(9, 10, 11, 12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });
