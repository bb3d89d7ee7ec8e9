#include "net/socket_device_table.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/param.h"
#include "net/socket_params.h"

namespace signlion {
namespace net {
namespace {

std::mutex gDevMutex;
std::vector<SocketDevice> gDevs;
// Fused devices, numbered after the physical ones; forgotten when a
// parameter change rescans the interfaces (their indices no longer hold).
std::vector<NicSet> gFused;
uint64_t gDevEpoch = ~0ull;
std::deque<std::string> gInterned;  // strings handed to NCCL live forever

const char* intern(const std::string& s) {
  for (const std::string& x : gInterned)
    if (x == s) return x.c_str();
  gInterned.push_back(s);
  return gInterned.back().c_str();
}

// Caller holds gDevMutex.
void refreshDevicesLocked() {
  uint64_t epoch = gParamEpoch.load(std::memory_order_acquire);
  if (epoch == gDevEpoch) return;
  gDevs = findSocketDevices(kSocketMaxDevs);
  gFused.clear();
  gDevEpoch = epoch;
  for (size_t i = 0; i < gDevs.size(); i++)
    INFO(kSubsysNet | kSubsysInit, "NET/signlion: dev %zu: %s %s, %d Mbps", i, gDevs[i].name.c_str(),
         addressString(gDevs[i].addr).c_str(), gDevs[i].speedMbps);
}

// Caller holds gDevMutex and has refreshed.
bool nicsLocked(int dev, NicSet* out) {
  int nphys = (int)gDevs.size();
  if (dev >= 0 && dev < nphys) {
    *out = NicSet{};
    out->n = 1;
    out->devs[0] = dev;
    out->addr[0] = gDevs[dev].addr;
    return true;
  }
  if (dev >= nphys && dev < nphys + (int)gFused.size()) {
    *out = gFused[dev - nphys];
    return true;
  }
  return false;
}

// The link rate a host communicator learned (socketSetLinkRate); 0: none.
std::atomic<int> gLinkRateMbps{0};

// Caller holds gDevMutex and has refreshed.
int streamsLocked(const NicSet& nics) {
  static_assert(kSocketMaxStreams == 64, "SIGNLION_NSOCKS's range (socket_params.h) is [0, kSocketMaxStreams]");
  const int64_t set = signlionParamNsocks();
  if (set != 0) return (int)set;
  // SIGNLION_SOCKET_SPEED (in every device's speed, speedReal) wins over a
  // learned rate, which wins over what the interfaces say.
  const int learned = gLinkRateMbps.load(std::memory_order_relaxed);
  int slowest = 0;
  for (int i = 0; i < nics.n; i++) {
    const SocketDevice& d = gDevs[nics.devs[i]];
    int speed = d.speedMbps;
    if (signlionParamSocketSpeed() == 0 && learned > 0) speed = learned;
    else if (!d.speedReal) speed = 0;  // unknown: one stream is safe on any link
    slowest = i == 0 ? speed : std::min(slowest, speed);
  }
  return socketStreamsForRate(slowest, nics.n);
}

}  // namespace

int socketStreamsForRate(int mbps, int nics) {
  return std::max(nics, mbps >= kSocketFastLinkMbps ? kSocketFastLinkStreams : 1);
}

void socketSetLinkRate(int mbps) { gLinkRateMbps.store(std::max(0, mbps), std::memory_order_relaxed); }

int socketDeviceStreams(const NicSet& nics) {
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  return streamsLocked(nics);
}

bool deviceNics(int dev, NicSet* out) {
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  return nicsLocked(dev, out);
}

ncclResult_t socketInit(LogSink logger) {
  if (logger != nullptr) logSetSink(logger);
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  if (gDevs.empty()) {
    IfnameSpec spec = socketIfnameSpec();
    WARN("NET/signlion: no usable network interface (%s=%s)", spec.source[0] ? spec.source : "SIGNLION_SOCKET_IFNAME",
         spec.spec.c_str());
    return ncclSystemError;
  }
  if (signlionParamNsocks() != 0)
    INFO(kSubsysNet | kSubsysInit, "NET/signlion: %zu device(s), %lld streams x %lld threads per comm", gDevs.size(),
         (long long)signlionParamNsocks(), (long long)signlionParamNthreads());
  else
    INFO(kSubsysNet | kSubsysInit,
         "NET/signlion: %zu device(s), streams per comm from the link (%d at %d Mbps or more, else 1 per interface), "
         "%lld threads per comm",
         gDevs.size(), kSocketFastLinkStreams, kSocketFastLinkMbps, (long long)signlionParamNthreads());
  return ncclSuccess;
}

ncclResult_t socketDevices(int* ndev) {
  ARGCHECK(ndev != nullptr, "devices", "ndev", "NULL");
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  *ndev = (int)(gDevs.size() + gFused.size());
  return ncclSuccess;
}

ncclResult_t socketGetProperties(int dev, SocketProps* props) {
  ARGCHECK(props != nullptr, "getProperties", "props", "NULL");
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  NicSet nics;
  ARGCHECK(nicsLocked(dev, &nics), "getProperties", "dev", "%d not in [0, %zu)", dev, gDevs.size() + gFused.size());
  // A fused device: its interfaces' names joined by '+', their speeds summed.
  std::string name;
  props->speedMbps = 0;
  for (int i = 0; i < nics.n; i++) {
    const SocketDevice& d = gDevs[nics.devs[i]];
    name += (i ? "+" : "") + d.name;
    props->speedMbps += d.speedMbps;
    props->devs[i] = nics.devs[i];
  }
  props->ndevs = nics.n;
  const SocketDevice& first = gDevs[nics.devs[0]];
  props->name = intern(name);
  props->pciPath = first.pciPath.empty() ? nullptr : intern(first.pciPath);
  props->guid = (uint64_t)dev;
  // Each comm holds 1 + its data streams' descriptors; leave a quarter of the limit to the application.
  rlimit rl{};
  int64_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (int64_t)rl.rlim_cur : 65536;
  int64_t perComm = 1 + streamsLocked(nics);
  props->maxComms = (int)std::max<int64_t>(1, fds * 3 / 4 / perComm);
  props->maxRecvs = kSocketMaxRecvs;
  return ncclSuccess;
}

ncclResult_t socketMakeVDevice(int ndevs, const int* devs, int* d) {
  ARGCHECK(d != nullptr, "makeVDevice", "d", "NULL");
  ARGCHECK(devs != nullptr, "makeVDevice", "props", "NULL");
  ARGCHECK(ndevs >= 1, "makeVDevice", "props->ndevs", "%d is not positive", ndevs);
  // NCCL asks for up to 8 under ncclNet v12, and takes a failed fusion as
  // "keep these apart" (it tries smaller groups, then the interfaces alone):
  // a limit of ours, not a wrong argument, so no WARN.
  if (ndevs > kSocketMaxFusedNics) {
    INFO(kSubsysNet | kSubsysInit, "NET/signlion: not fusing %d interfaces: at most %d per device", ndevs,
         kSocketMaxFusedNics);
    return ncclInvalidUsage;
  }
  std::lock_guard<std::mutex> lk(gDevMutex);
  refreshDevicesLocked();
  int nphys = (int)gDevs.size();
  NicSet set;
  set.n = ndevs;
  for (int i = 0; i < ndevs; i++) {
    ARGCHECK(devs[i] >= 0 && devs[i] < nphys, "makeVDevice", "props->devs", "devs[%d] = %d is not a physical device", i,
             devs[i]);
    for (int j = 0; j < i; j++)
      ARGCHECK(devs[j] != devs[i], "makeVDevice", "props->devs", "device %d listed twice", devs[i]);
    set.devs[i] = devs[i];
    set.addr[i] = gDevs[devs[i]].addr;
    ARGCHECK(set.addr[i].sa.sa_family == set.addr[0].sa.sa_family, "makeVDevice", "props->devs",
             "%s and %s have different address families", gDevs[devs[0]].name.c_str(), gDevs[devs[i]].name.c_str());
  }
  if (ndevs == 1) {  // nothing to fuse: the device itself
    *d = devs[0];
    return ncclSuccess;
  }
  // NCCL fuses on its own whenever the plugin can (NCCL_NET_MERGE_LEVEL,
  // PORT by default), and places every interface without a PCI device (a
  // bridge, a veth, a VM's host-only network) as a port of one NIC under the
  // first CPU, so at PORT level they are one group: it would stripe
  // a comm over interfaces that may not reach the peer (virbr0 has the same
  // address on every host). Fuse only interfaces the user named.
  const IfnameSpec spec = socketIfnameSpec();
  if (!spec.namesInterfaces()) {
    std::string names;
    for (int i = 0; i < ndevs; i++) names += (i ? "+" : "") + gDevs[devs[i]].name;
    INFO(kSubsysNet | kSubsysInit,
         "NET/signlion: not fusing %s: fusion needs SIGNLION_SOCKET_IFNAME (or GLOO_/NCCL_SOCKET_IFNAME) to name "
         "the interfaces, %s",
         names.c_str(), spec.spec.empty() ? "none is set" : "an exclude list names none");
    return ncclInvalidUsage;
  }
  for (size_t k = 0; k < gFused.size(); k++) {  // the same interfaces in the same order: that device again
    bool same = gFused[k].n == ndevs;
    for (int i = 0; same && i < ndevs; i++) same = gFused[k].devs[i] == devs[i];
    if (same) {
      *d = nphys + (int)k;
      return ncclSuccess;
    }
  }
  ARGCHECK(nphys + (int)gFused.size() < kSocketMaxDevs * 4, "makeVDevice", "props", "too many fused devices (%d)",
           (int)gFused.size());
  gFused.push_back(set);
  *d = nphys + (int)gFused.size() - 1;
  INFO(kSubsysNet | kSubsysInit, "NET/signlion: dev %d fuses %d interfaces", *d, ndevs);
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
