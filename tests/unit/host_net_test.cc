// host::Net::open: which device of the built-in transport the host
// communicator uses (docs/PLUGIN.md, "NIC fusion"). Opens the network only;
// nothing is sent.
#include "host/net.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "common/param.h"

namespace {

// Sets SIGNLION_SOCKET_IFNAME for one test, restoring it after.
class Ifname {
 public:
  explicit Ifname(const char* value) {
    const char* old = getenv("SIGNLION_SOCKET_IFNAME");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("SIGNLION_SOCKET_IFNAME", value, 1);
    signlion::paramResetCache();
  }
  ~Ifname() {
    if (had_)
      setenv("SIGNLION_SOCKET_IFNAME", old_.c_str(), 1);
    else
      unsetenv("SIGNLION_SOCKET_IFNAME");
    signlion::paramResetCache();
  }

 private:
  bool had_ = false;
  std::string old_;
};

}  // namespace

// "^docker" names interfaces to leave out, not interfaces to use: like
// SIGNLION_SOCKET_IFNAME unset (which excludes docker* and lo), it may let
// in interfaces that do not reach the peers, so the host communicator keeps
// device 0 instead of striping over all of them.
TEST(HostNet, AnExcludeListFusesNothing) {
  Ifname spec("^docker");
  std::unique_ptr<signlion::host::Net> net;
  ASSERT_EQ(signlion::host::Net::open(nullptr, &net), ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(net->api().devices(&ndev), ncclSuccess);
  if (ndev < 2) GTEST_SKIP() << "one usable interface here: nothing to fuse";
  EXPECT_EQ(net->dev(), 0) << "fused " << ndev << " devices from an exclude list";
}
