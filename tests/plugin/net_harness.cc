#include "net_harness.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <thread>

#include "net/socket_net.h"

namespace signlion {
namespace nettest {

namespace {
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void* openPlugin(const std::string& nameOrPath, std::string* err) {
  void* lib = dlopen(nameOrPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr && err) *err = dlerror();
  return lib;
}

bool NetDriver::bind(void* lib, int version) {
  std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  void* p = dlsym(lib, sym.c_str());
  if (p == nullptr) return false;
  version_ = version;
  v8_ = version == 8 ? static_cast<const ncclNet_v8_t*>(p) : nullptr;
  v9_ = version == 9 ? static_cast<const ncclNet_v9_t*>(p) : nullptr;
  v10_ = version == 10 ? static_cast<const ncclNet_v10_t*>(p) : nullptr;
  v11_ = version == 11 ? static_cast<const ncclNet_v11_t*>(p) : nullptr;
  bindV12(version == 12 ? static_cast<const ncclNet_v12_t*>(p) : nullptr);
  return true;
}

// v12's function table is v11's (only rail/plane ids in the properties and
// the fused-NIC size changed): every call but getProperties goes through the
// v11 view of it.
static_assert(sizeof(ncclNet_v12_t) == sizeof(ncclNet_v11_t) &&
                  offsetof(ncclNet_v12_t, setNetAttr) == offsetof(ncclNet_v11_t, setNetAttr),
              "v12 keeps v11's function table");
void NetDriver::bindV12(const ncclNet_v12_t* v12) {
  v12_ = v12;
  if (v12 != nullptr) v11_ = reinterpret_cast<const ncclNet_v11_t*>(v12);
}

void NetDriver::bindInProcess(int version) {
  version_ = version;
  v8_ = version == 8 ? net::socketNetV8() : nullptr;
  v9_ = version == 9 ? net::socketNetV9() : nullptr;
  v10_ = version == 10 ? net::socketNetV10() : nullptr;
  v11_ = version == 11 ? net::socketNetV11() : nullptr;
  bindV12(version == 12 ? net::socketNetV12() : nullptr);
}

// Calls the member F of whichever struct is bound, for functions whose
// signature is the same in every version.
#define NET_CALL(F, ...) \
  (v8_ ? v8_->F(__VA_ARGS__) : v9_ ? v9_->F(__VA_ARGS__) : v10_ ? v10_->F(__VA_ARGS__) : v11_->F(__VA_ARGS__))

const char* NetDriver::name() const { return v8_ ? v8_->name : v9_ ? v9_->name : v10_ ? v10_->name : v11_->name; }

ncclResult_t NetDriver::init(ncclDebugLogger_t logger) {
  if (v8_) return v8_->init(logger);
  if (v9_) return v9_->init(logger);
  if (v10_) return v10_->init(logger, nullptr);
  ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return v11_->init(&ctx_, 0x1234, &cfg, logger, nullptr);
}

ncclResult_t NetDriver::finalize() {
  if (!v11_) return ncclSuccess;
  ncclResult_t r = v11_->finalize(ctx_);
  ctx_ = nullptr;
  return r;
}

ncclResult_t NetDriver::devices(int* ndev) { return NET_CALL(devices, ndev); }

namespace {
// Copies the fields v9..v11 share into the newest layout (vProps differs in size).
template <typename Props>
void copyV9(const Props& p, ncclNetProperties_v12_t* out) {
  memcpy(out, &p, offsetof(Props, vProps));  // name .. netDeviceVersion: same offsets
  out->vProps.ndevs = p.vProps.ndevs;
  for (int i = 0; i < p.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V10; i++) out->vProps.devs[i] = p.vProps.devs[i];
  out->maxP2pBytes = p.maxP2pBytes;
  out->maxCollBytes = p.maxCollBytes;
}
template <typename Net, typename Props>
ncclResult_t propsVia(const Net* net, int dev, ncclNetProperties_v12_t* out, Props* tmp) {
  ncclResult_t r = net->getProperties(dev, tmp);
  if (r == ncclSuccess) copyV9(*tmp, out);
  return r;
}
}  // namespace

ncclResult_t NetDriver::properties(int dev, ncclNetProperties_v12_t* props) {
  memset(props, 0, sizeof(*props));
  if (v8_) {
    ncclNetProperties_v8_t p;
    ncclResult_t r = v8_->getProperties(dev, &p);
    if (r != ncclSuccess) return r;
    props->name = p.name;
    props->pciPath = p.pciPath;
    props->guid = p.guid;
    props->ptrSupport = p.ptrSupport;
    props->speed = p.speed;
    props->maxComms = p.maxComms;
    props->maxRecvs = p.maxRecvs;
    props->netDeviceType = p.netDeviceType;
    return ncclSuccess;
  }
  ncclNetProperties_v9_t p9;
  ncclNetProperties_v10_t p10;
  ncclNetProperties_v11_t p11;
  if (v9_) return propsVia(v9_, dev, props, &p9);
  if (v10_) return propsVia(v10_, dev, props, &p10);
  if (v12_) return v12_->getProperties(dev, props);
  ncclResult_t r = propsVia(v11_, dev, props, &p11);
  props->maxMultiRequestSize = p11.maxMultiRequestSize;
  return r;
}

ncclResult_t NetDriver::makeVDevice(int ndevs, const int* devs, int* d) {
  if (v8_) return ncclInvalidUsage;
  if (v12_) {
    ncclNetVDeviceProps_v12_t p{};
    p.ndevs = ndevs;
    for (int i = 0; i < ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V12; i++) p.devs[i] = devs[i];
    return v12_->makeVDevice(d, &p);
  }
  ncclNetVDeviceProps_v11_t p{};  // v9..v11: the same layout
  p.ndevs = ndevs;
  for (int i = 0; i < ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V11; i++) p.devs[i] = devs[i];
  if (v9_) return v9_->makeVDevice(d, reinterpret_cast<ncclNetVDeviceProps_v9_t*>(&p));
  if (v10_) return v10_->makeVDevice(d, reinterpret_cast<ncclNetVDeviceProps_v10_t*>(&p));
  return v11_->makeVDevice(d, &p);
}

ncclResult_t NetDriver::listen(int dev, void* handle, void** listenComm) {
  if (v8_) return v8_->listen(dev, handle, listenComm);
  if (v9_) return v9_->listen(dev, handle, listenComm);
  if (v10_) return v10_->listen(dev, handle, listenComm);
  return v11_->listen(ctx_, dev, handle, listenComm);
}

ncclResult_t NetDriver::connect(int dev, void* handle, void** sendComm) {
  if (v8_) return v8_->connect(dev, handle, sendComm, nullptr);
  if (v9_) return v9_->connect(dev, handle, sendComm, nullptr);
  if (v10_) {
    ncclNetCommConfig_v10_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return v10_->connect(dev, &cfg, handle, sendComm, nullptr);
  }
  return v11_->connect(ctx_, dev, handle, sendComm, nullptr);
}

ncclResult_t NetDriver::accept(void* listenComm, void** recvComm) {
  return NET_CALL(accept, listenComm, recvComm, nullptr);
}
ncclResult_t NetDriver::regMr(void* comm, void* data, size_t size, void** mhandle) {
  return NET_CALL(regMr, comm, data, size, NCCL_PTR_HOST, mhandle);
}
ncclResult_t NetDriver::deregMr(void* comm, void* mhandle) { return NET_CALL(deregMr, comm, mhandle); }

ncclResult_t NetDriver::isend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (v8_) return v8_->isend(comm, data, (int)size, tag, mhandle, request);
  if (v9_) return v9_->isend(comm, data, size, tag, mhandle, request);
  if (v10_) return v10_->isend(comm, data, size, tag, mhandle, nullptr, request);
  return v11_->isend(comm, data, size, tag, mhandle, nullptr, request);
}

ncclResult_t NetDriver::irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** request) {
  if (v8_) {
    int narrow[8];
    for (int i = 0; i < n && i < 8; i++) narrow[i] = (int)sizes[i];
    return v8_->irecv(comm, n, data, narrow, tags, mhandles, request);
  }
  if (v9_) return v9_->irecv(comm, n, data, sizes, tags, mhandles, request);
  if (v10_) return v10_->irecv(comm, n, data, sizes, tags, mhandles, nullptr, request);
  return v11_->irecv(comm, n, data, sizes, tags, mhandles, nullptr, request);
}

ncclResult_t NetDriver::iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return NET_CALL(iflush, comm, n, data, sizes, mhandles, request);
}
ncclResult_t NetDriver::test(void* request, int* done, int* sizes) { return NET_CALL(test, request, done, sizes); }
ncclResult_t NetDriver::closeSend(void* comm) { return NET_CALL(closeSend, comm); }
ncclResult_t NetDriver::closeRecv(void* comm) { return NET_CALL(closeRecv, comm); }
ncclResult_t NetDriver::closeListen(void* comm) { return NET_CALL(closeListen, comm); }

void fillPattern(void* buf, size_t size, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  unsigned char* p = static_cast<unsigned char*>(buf);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(p + i, &x, 8);
  }
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  for (size_t k = 0; i < size; i++, k++) p[i] = (unsigned char)(x >> (8 * k));
}

size_t checkPattern(const void* buf, size_t size, uint64_t seed) {
  if (size == 0) return SIZE_MAX;
  std::vector<unsigned char> want(size);
  fillPattern(want.data(), size, seed);
  const unsigned char* p = static_cast<const unsigned char*>(buf);
  if (memcmp(p, want.data(), size) == 0) return SIZE_MAX;
  for (size_t i = 0; i < size; i++)
    if (p[i] != want[i]) return i;
  return SIZE_MAX;
}

ncclResult_t connectPair(NetDriver& net, int dev, void** sendComm, void** recvComm, std::string* err) {
  // NCCL promises the handle buffer no alignment: every pair connects through
  // one at an odd address (UBSan in README command (2) checks the plugin
  // reads and writes it accordingly).
  alignas(16) char storage[NCCL_NET_HANDLE_MAXSIZE + 1];
  char* handle = storage + 1;
  void* lcomm = nullptr;
  *sendComm = *recvComm = nullptr;
  ncclResult_t r = net.listen(dev, handle, &lcomm);
  if (r != ncclSuccess) {
    *err = "listen failed";
    return r;
  }
  std::vector<void*> recvs;
  r = connectAccept(net, dev, lcomm, 1, &handle, sendComm, &recvs, err);
  net.closeListen(lcomm);
  if (r == ncclSuccess) *recvComm = recvs[0];
  return r;
}

ncclResult_t connectAccept(NetDriver& net, int dev, void* listenComm, int n, char* const* handles, void** sendComms,
                           std::vector<void*>* recvComms, std::string* err) {
  for (int i = 0; i < n; i++) sendComms[i] = nullptr;
  size_t base = recvComms->size();
  auto missing = [&] {
    int m = n - (int)(recvComms->size() - base);
    for (int i = 0; i < n; i++) m += sendComms[i] == nullptr ? 1 : 0;
    return m;
  };
  ncclResult_t r = ncclSuccess;
  int64_t start = nowMs();
  while (r == ncclSuccess && missing() > 0 && nowMs() - start < kLoopLimitMs) {
    for (int i = 0; r == ncclSuccess && i < n; i++)
      if (sendComms[i] == nullptr) r = net.connect(dev, handles[i], &sendComms[i]);
    void* recv = nullptr;
    if (r == ncclSuccess && (int)(recvComms->size() - base) < n && (r = net.accept(listenComm, &recv)) == ncclSuccess &&
        recv != nullptr)
      recvComms->push_back(recv);
  }
  if (r == ncclSuccess && missing() > 0) r = ncclInternalError;
  if (r != ncclSuccess) {
    *err = "connect/accept failed or timed out";
    for (int i = 0; i < n; i++)
      if (sendComms[i]) net.closeSend(sendComms[i]), sendComms[i] = nullptr;
    for (size_t i = base; i < recvComms->size(); i++) net.closeRecv((*recvComms)[i]);
    recvComms->resize(base);
  }
  return r;
}

bool transfer(NetDriver& net, void* sendComm, void* recvComm, size_t size, size_t recvCap, int tag, std::string* err) {
  return transferBetween(net, sendComm, net, recvComm, size, recvCap, tag, err);
}

bool transferBetween(NetDriver& sendNet, void* sendComm, NetDriver& recvNet, void* recvComm, size_t size,
                     size_t recvCap, int tag, std::string* err) {
  std::vector<char> src(size ? size : 1), dst(recvCap ? recvCap : 1, 0x5a);
  uint64_t seed = size * 31 + (uint64_t)tag;
  fillPattern(src.data(), size, seed);
  void *smr = nullptr, *rmr = nullptr, *sreq = nullptr, *rreq = nullptr;
  bool ok = false;
  char buf[200];
  if (sendNet.regMr(sendComm, src.data(), src.size(), &smr) != ncclSuccess ||
      recvNet.regMr(recvComm, dst.data(), dst.size(), &rmr) != ncclSuccess) {
    *err = "regMr failed";
    return false;
  }
  void* rdata = dst.data();
  int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
  int64_t start = nowMs();
  ncclResult_t r = ncclSuccess;
  while ((!sdone || !rdone) && nowMs() - start < kLoopLimitMs) {
    if (rreq == nullptr && !rdone) r = recvNet.irecv(recvComm, 1, &rdata, &recvCap, &tag, &rmr, &rreq);
    if (r != ncclSuccess) break;
    if (sreq == nullptr && !sdone) r = sendNet.isend(sendComm, src.data(), size, tag, smr, &sreq);
    if (r != ncclSuccess) break;
    if (rreq && !rdone && (r = recvNet.test(rreq, &rdone, &rsize)) != ncclSuccess) break;
    if (sreq && !sdone && (r = sendNet.test(sreq, &sdone, &ssize)) != ncclSuccess) break;
  }
  if (r != ncclSuccess) {
    snprintf(buf, sizeof(buf), "transfer of %zu bytes: error %d", size, (int)r);
    *err = buf;
  } else if (!sdone || !rdone) {
    snprintf(buf, sizeof(buf), "transfer of %zu bytes did not complete", size);
    *err = buf;
  } else if (ssize != (int)size || rsize != (int)size) {
    snprintf(buf, sizeof(buf), "sizes reported: send %d recv %d, expected %zu", ssize, rsize, size);
    *err = buf;
  } else if (size_t bad = checkPattern(dst.data(), size, seed); bad != SIZE_MAX) {
    snprintf(buf, sizeof(buf), "byte %zu of %zu differs", bad, size);
    *err = buf;
  } else if (recvCap > size && dst[size] != 0x5a) {
    *err = "receive wrote past the message";
  } else {
    ok = true;
  }
  sendNet.deregMr(sendComm, smr);
  recvNet.deregMr(recvComm, rmr);
  return ok;
}

int findDevice(NetDriver& net, const std::string& ifname) {
  int ndev = 0;
  if (net.devices(&ndev) != ncclSuccess) return -1;
  for (int d = 0; d < ndev; d++) {
    ncclNetProperties_v12_t p;
    if (net.properties(d, &p) == ncclSuccess && p.name && ifname == p.name) return d;
  }
  return -1;
}

// ---- Two-process exchange ----------------------------------------------------------

namespace {

int fail(const PeerOptions& opt, const std::string& what) {
  fprintf(stderr, "peer %s: %s\n", opt.role.c_str(), what.c_str());
  return 1;
}

bool writeHandle(const std::string& path, const char* handle) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(handle, NCCL_NET_HANDLE_MAXSIZE);
    if (!f) return false;
  }
  return rename(tmp.c_str(), path.c_str()) == 0;
}

bool readHandle(const std::string& path, char* handle) {
  int64_t start = nowMs();
  while (nowMs() - start < kLoopLimitMs) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(handle, NCCL_NET_HANDLE_MAXSIZE)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

uint64_t seedFor(const std::string& senderRole, size_t i, size_t size) {
  return (senderRole == "a" ? 0xa000000ull : 0xb000000ull) + i * 1000003ull + size;
}

}  // namespace

int runPeer(const PeerOptions& opt) {
  NetDriver net;
  std::string err;
  void* lib = nullptr;
  if (opt.lib.empty()) {
    net.bindInProcess(opt.version);
  } else {
    lib = openPlugin(opt.lib, &err);
    if (lib == nullptr) return fail(opt, "dlopen: " + err);
    if (!net.bind(lib, opt.version)) return fail(opt, "no ncclNetPlugin_v" + std::to_string(opt.version));
  }
  if (net.init() != ncclSuccess) return fail(opt, "init failed");
  int dev = findDevice(net, opt.ifname);
  if (dev < 0) return fail(opt, "no device named " + opt.ifname);
  std::string other = opt.role == "a" ? "b" : "a";

  char myHandle[NCCL_NET_HANDLE_MAXSIZE], peerHandle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = nullptr, *scomm = nullptr, *rcomm = nullptr;
  if (net.listen(dev, myHandle, &lcomm) != ncclSuccess) return fail(opt, "listen failed");
  if (!writeHandle(opt.dir + "/" + opt.role + ".handle", myHandle)) return fail(opt, "cannot write handle");
  if (!readHandle(opt.dir + "/" + other + ".handle", peerHandle)) return fail(opt, "no handle from peer");
  int64_t start = nowMs();
  while ((scomm == nullptr || rcomm == nullptr) && nowMs() - start < kLoopLimitMs) {
    if (scomm == nullptr && net.connect(dev, peerHandle, &scomm) != ncclSuccess) return fail(opt, "connect error");
    if (rcomm == nullptr && net.accept(lcomm, &rcomm) != ncclSuccess) return fail(opt, "accept error");
  }
  net.closeListen(lcomm);
  if (scomm == nullptr || rcomm == nullptr) return fail(opt, "connect/accept timed out");

  // One message each way per size, both in flight at once.
  size_t maxSize = 1;
  for (size_t s : opt.sizes) maxSize = std::max(maxSize, s);
  const size_t extra = 4096;  // receives are posted larger than the message
  std::vector<char> src(maxSize), dst(maxSize + extra);
  void *smr = nullptr, *rmr = nullptr;
  if (net.regMr(scomm, src.data(), src.size(), &smr) != ncclSuccess ||
      net.regMr(rcomm, dst.data(), dst.size(), &rmr) != ncclSuccess)
    return fail(opt, "regMr failed");
  for (size_t i = 0; i < opt.sizes.size(); i++) {
    size_t size = opt.sizes[i];
    fillPattern(src.data(), size, seedFor(opt.role, i, size));
    void *sreq = nullptr, *rreq = nullptr;
    void* rdata = dst.data();
    size_t cap = size + extra;
    int tag = (int)i + 7;
    int sdone = 0, rdone = 0, ssize = -1, rsize = -1;
    start = nowMs();
    while ((!sdone || !rdone) && nowMs() - start < kLoopLimitMs) {
      if (!rdone && rreq == nullptr && net.irecv(rcomm, 1, &rdata, &cap, &tag, &rmr, &rreq) != ncclSuccess)
        return fail(opt, "irecv error");
      if (!sdone && sreq == nullptr && net.isend(scomm, src.data(), size, tag, smr, &sreq) != ncclSuccess)
        return fail(opt, "isend error");
      if (rreq && !rdone && net.test(rreq, &rdone, &rsize) != ncclSuccess) return fail(opt, "test(recv) error");
      if (sreq && !sdone && net.test(sreq, &sdone, &ssize) != ncclSuccess) return fail(opt, "test(send) error");
    }
    if (!sdone || !rdone) return fail(opt, "transfer of " + std::to_string(size) + " bytes timed out");
    if (ssize != (int)size || rsize != (int)size)
      return fail(opt, "size " + std::to_string(size) + ": test reported " + std::to_string(ssize) + "/" +
                           std::to_string(rsize));
    size_t bad = checkPattern(dst.data(), size, seedFor(other, i, size));
    if (bad != SIZE_MAX)
      return fail(opt, "size " + std::to_string(size) + ": byte " + std::to_string(bad) + " differs");
  }

  // Two rounds each way are enough for the two processes to share one
  // control connection (socket_pairing.h): one side offers ahead of its first
  // message, the other moves before its second. (The socket transport's
  // internals: a UCX comm has no control connection.)
  if (pluginIsSocket(opt.lib) && opt.sizes.size() >= 2 && (!signlion::net::commSharesControl(scomm) || !signlion::net::commSharesControl(rcomm)))
    return fail(opt, "the send and recv comm do not share one control connection after two round trips");

  // Burst: the maximum outstanding requests each way, posted before any test.
  const int kBurst = NCCL_NET_MAX_REQUESTS;
  const size_t kMsg = 1000 + 61 * 1024;  // not a multiple of the chunk; spans streams
  if ((size_t)kBurst * kMsg <= src.size()) {
    void* sreq[kBurst] = {};
    void* rreq[kBurst] = {};
    int sdone[kBurst] = {}, rdone[kBurst] = {};
    for (int k = 0; k < kBurst; k++) fillPattern(src.data() + k * kMsg, kMsg, seedFor(opt.role, 1000 + k, kMsg));
    for (int k = 0; k < kBurst; k++) {
      void* d = dst.data() + k * kMsg;
      size_t cap = kMsg;
      int tag = 100 + k;
      if (net.irecv(rcomm, 1, &d, &cap, &tag, &rmr, &rreq[k]) != ncclSuccess || rreq[k] == nullptr)
        return fail(opt, "burst irecv " + std::to_string(k) + " not posted");
      if (net.isend(scomm, src.data() + k * kMsg, kMsg, tag, smr, &sreq[k]) != ncclSuccess || sreq[k] == nullptr)
        return fail(opt, "burst isend " + std::to_string(k) + " not posted");
    }
    void* extraReq = nullptr;
    int tag = 0;
    if (net.isend(scomm, src.data(), 1, tag, smr, &extraReq) != ncclSuccess || extraReq != nullptr)
      return fail(opt, "isend beyond NCCL_NET_MAX_REQUESTS must return no request");
    int left = 2 * kBurst;
    start = nowMs();
    while (left > 0 && nowMs() - start < kLoopLimitMs) {
      for (int k = 0; k < kBurst; k++) {
        int sz = -1;
        if (!sdone[k]) {
          if (net.test(sreq[k], &sdone[k], &sz) != ncclSuccess) return fail(opt, "burst test(send) error");
          if (sdone[k]) left--;
        }
        if (!rdone[k]) {
          if (net.test(rreq[k], &rdone[k], &sz) != ncclSuccess) return fail(opt, "burst test(recv) error");
          if (rdone[k] && sz != (int)kMsg) return fail(opt, "burst recv size " + std::to_string(sz));
          if (rdone[k]) left--;
        }
      }
    }
    if (left > 0) return fail(opt, "burst did not complete");
    for (int k = 0; k < kBurst; k++)
      if (checkPattern(dst.data() + k * kMsg, kMsg, seedFor(other, 1000 + k, kMsg)) != SIZE_MAX)
        return fail(opt, "burst message " + std::to_string(k) + " differs");
  }

  net.deregMr(scomm, smr);
  net.deregMr(rcomm, rmr);
  // Both sides must finish receiving before either closes its send comm.
  std::string doneFile = opt.dir + "/" + opt.role + ".done";
  char token[NCCL_NET_HANDLE_MAXSIZE] = {1};
  writeHandle(doneFile, token);
  if (!readHandle(opt.dir + "/" + other + ".done", token)) return fail(opt, "peer never finished");
  net.closeSend(scomm);
  net.closeRecv(rcomm);
  net.finalize();
  if (lib) dlclose(lib);
  return 0;
}

}  // namespace nettest
}  // namespace signlion
