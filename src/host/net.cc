#include "host/net.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/checks.h"
#include "net/socket_device_table.h"
#include "net/socket_devices.h"
#include "net/socket_net.h"
#include "net/socket_params.h"

namespace signlion {
namespace host {

namespace {

// Net plugin libraries, each loaded once per process and counted by the
// Nets that use it, all under one lock. Ranks as threads may open their
// communicators at once: the dynamic loader's own lock orders a library's
// static initialisers (its ncclNetPlugin_v11 among them) before another
// thread's dlopen returns, but nothing a race detector sees does; this lock
// does, and it makes loading explicitly once-only.
struct LoadedPlugin {
  std::string lib;
  void* dl;
  const ncclNet_v11_t* api;
  int users;
};

std::mutex& pluginsMutex() {
  static std::mutex mu;
  return mu;
}

std::vector<LoadedPlugin>& loadedPlugins() {
  static std::vector<LoadedPlugin> plugins;
  return plugins;
}

// The library `lib` (a file name for dlopen, or a path) and its v11 struct,
// loaded now or already; released by releasePlugin(dl).
ncclResult_t acquirePlugin(const std::string& lib, void** dl, const ncclNet_v11_t** api) {
  std::lock_guard<std::mutex> lock(pluginsMutex());
  for (LoadedPlugin& p : loadedPlugins()) {
    if (p.lib == lib) {
      p.users++;
      *dl = p.dl;
      *api = p.api;
      return ncclSuccess;
    }
  }
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    WARN("ncclSignCommInitRank: invalid argument 'config->netPlugin' (or SIGNLION_NET_PLUGIN): cannot load %s: %s",
         lib.c_str(), dlerror());
    return ncclInvalidArgument;
  }
  auto* v11 = static_cast<const ncclNet_v11_t*>(dlsym(handle, "ncclNetPlugin_v11"));
  if (v11 == nullptr) {
    WARN(
        "ncclSignCommInitRank: invalid argument 'config->netPlugin' (or SIGNLION_NET_PLUGIN): %s exports no "
        "ncclNetPlugin_v11",
        lib.c_str());
    dlclose(handle);
    return ncclInvalidArgument;
  }
  loadedPlugins().push_back({lib, handle, v11, 1});
  *dl = handle;
  *api = v11;
  return ncclSuccess;
}

void releasePlugin(void* dl) {
  std::lock_guard<std::mutex> lock(pluginsMutex());
  std::vector<LoadedPlugin>& plugins = loadedPlugins();
  for (size_t i = 0; i < plugins.size(); i++) {
    if (plugins[i].dl != dl) continue;
    if (--plugins[i].users == 0) {
      dlclose(dl);
      plugins.erase(plugins.begin() + (std::ptrdiff_t)i);
    }
    return;
  }
}

}  // namespace

ncclResult_t Net::open(const char* plugin, std::unique_ptr<Net>* out) {
  std::unique_ptr<Net> n(new Net());
  bool builtin = plugin == nullptr || *plugin == '\0' || strcmp(plugin, net::kSocketNetName) == 0;
  if (builtin) {
    n->api_ = net::socketNetV11();
  } else {
    std::string lib(plugin);
    bool isPath = lib.find('/') != std::string::npos || (lib.size() > 3 && lib.compare(lib.size() - 3, 3, ".so") == 0);
    if (!isPath) lib = "libnccl-net-" + lib + ".so";
    NCCLCHECK(acquirePlugin(lib, &n->dl_, &n->api_));
    // Optional: any other NCCL net plugin lacks it.
    n->abortComm_ = reinterpret_cast<ncclResult_t (*)(void*)>(dlsym(n->dl_, kAbortCommSymbol));
  }
  // Only the built-in transport's comms may be read as ours (byte counters,
  // waits): a dlopen'ed library of the same name may be another build with
  // another comm layout.
  n->ours_ = n->api_ == net::socketNetV11();
  if (n->ours_) n->abortComm_ = net::socketAbortComm;
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  NCCLCHECK(n->api_->init(&n->ctx_, 0, &config, nullptr, nullptr));
  int ndev = 0;
  NCCLCHECK(n->api_->devices(&ndev));
  if (ndev < 1) {
    WARN("network %s has no device (check SIGNLION_SOCKET_IFNAME)", n->api_->name);
    return ncclSystemError;
  }
  // Several interfaces named on purpose (SIGNLION_SOCKET_IFNAME, or the Gloo or
  // NCCL variable it follows): one device striped over them. Not without
  // any, which then means every interface, some of which may not reach the
  // peers; nor with an exclude list ("^docker"), which means the same
  // (IfnameSpec::namesInterfaces; makeVDevice refuses those too).
  if (n->ours_ && ndev > 1 && net::socketIfnameSpec().namesInterfaces()) {
    ncclNetVDeviceProps_v11_t fuse{};
    for (int d = 0; d < ndev && fuse.ndevs < net::kSocketMaxFusedNics; d++) {
      ncclNetProperties_v11_t props;
      NCCLCHECK(n->api_->getProperties(d, &props));
      if (props.vProps.ndevs == 1 && props.vProps.devs[0] == d) fuse.devs[fuse.ndevs++] = d;  // an interface
    }
    if (fuse.ndevs > 1) NCCLCHECK(n->api_->makeVDevice(&n->dev_, &fuse));  // the same set again: the same device
  }
  INFO(kSubsysInit | kSubsysNet, "host communicator network: %s (%d devices, using %d)%s", n->api_->name, ndev, n->dev_,
       builtin ? " built in" : "");
  *out = std::move(n);
  return ncclSuccess;
}

Net::~Net() {
  if (api_ != nullptr && ctx_ != nullptr && api_->finalize != nullptr) api_->finalize(ctx_);
  if (dl_ != nullptr) releasePlugin(dl_);
}

void Net::wait(void* comm, int timeoutMs) const { waitAny(&comm, 1, timeoutMs); }

void Net::waitAny(void* const* comms, size_t n, int timeoutMs) const {
  if (ours_) {
    net::commWaitAny(comms, n, timeoutMs);
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void Net::abortComm(void* comm) const {
  if (abortComm_ != nullptr && comm != nullptr) (void)abortComm_(comm);
}

bool Net::wireBytes(void* comm, uint64_t* sent, uint64_t* received) const {
  return ours_ && net::commBytes(comm, sent, received);
}

int Net::setLinkRate(int64_t mbps) const {
  if (!ours_) return 0;
  net::socketSetLinkRate((int)std::min<int64_t>(mbps, 1 << 30));
  net::NicSet nics;
  return net::deviceNics(dev_, &nics) ? net::socketDeviceStreams(nics) : 0;
}

bool Net::setSendPacing(void* sendComm, uint64_t bytesPerSec) const {
  return ours_ && net::commSetPacing(sendComm, bytesPerSec);
}

bool Net::loopback() const {
  ncclNetProperties_v11_t props;
  return ours_ && api_->getProperties(dev_, &props) == ncclSuccess && props.name != nullptr &&
         strcmp(props.name, "lo") == 0;
}

}  // namespace host
}  // namespace signlion
