// The socket transport dressed as ncclNet v8, v9, v10, v11 and v12: the
// adapters are transport/net_versions.h's; SocketOps forwards to
// socket_transport.h.
#include "net/socket_net.h"

#include "common/checks.h"
#include "socket/socket_transport.h"
#include "transport/net_versions.h"

namespace signlion {
namespace net {
namespace {

// The socket transport (socket_transport.h) as NetVersions' T.
struct SocketOps {
  static constexpr const char* kName = kSocketNetName;
  static constexpr int kMaxRecvs = kSocketMaxRecvs;
  static constexpr size_t kMaxMessage = kSocketMaxMessage;
  using Pending = PendingConnects;
  static int ptrSupport() { return NCCL_PTR_HOST; }
  static ncclResult_t init(LogSink logger) { return socketInit(logger); }
  static ncclResult_t devices(int* ndev) { return socketDevices(ndev); }
  static ncclResult_t getProperties(int dev, TransportProps* props) {
    ARGCHECK(props != nullptr, "getProperties", "props", "NULL");
    static_assert(kSocketMaxFusedNics <= TransportProps::kMaxFused, "fused devices");
    SocketProps p;
    NCCLCHECK(socketGetProperties(dev, &p));
    *props = TransportProps{p.name, p.pciPath, p.guid, p.speedMbps, p.maxComms, p.ndevs, {}};
    for (int i = 0; i < p.ndevs; i++) props->devs[i] = p.devs[i];
    return ncclSuccess;
  }
  static ncclResult_t makeVDevice(int ndevs, const int* devs, int* d) { return socketMakeVDevice(ndevs, devs, d); }
  static ncclResult_t listen(int dev, void* handle, void** l) { return socketListen(dev, handle, l); }
  static ncclResult_t connect(int dev, int tc, void* handle, void** s, Pending* pending) {
    return socketConnect(dev, tc, handle, s, pending);
  }
  static void abandonConnects(Pending* pending) { socketAbandonConnects(pending); }
  static ncclResult_t accept(void* l, void** r) { return socketAccept(l, r); }
  static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) {
    return socketRegMr(comm, data, size, type, mh);
  }
  static ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t off, int fd, void** mh) {
    return socketRegMrDmaBuf(comm, data, size, type, off, fd, mh);
  }
  static ncclResult_t deregMr(void* comm, void* mh) { return socketDeregMr(comm, mh); }
  static ncclResult_t isend(void* s, void* data, size_t size, int tag, void* mh, void** req) {
    return socketIsend(s, data, size, tag, mh, req);
  }
  static ncclResult_t irecv(void* r, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
    return socketIrecv(r, n, data, sizes, tags, mh, req);
  }
  static ncclResult_t iflush(void* r, int n, void** data, int* sizes, void** mh, void** req) {
    return socketIflush(r, n, data, sizes, mh, req);
  }
  static ncclResult_t test(void* req, int* done, int* sizes) { return socketTest(req, done, sizes); }
  static ncclResult_t closeSend(void* s) { return socketCloseSend(s); }
  static ncclResult_t closeRecv(void* r) { return socketCloseRecv(r); }
  static ncclResult_t closeListen(void* l) { return socketCloseListen(l); }
};
using SocketNet = NetVersions<SocketOps>;

}  // namespace

const ncclNet_v8_t* socketNetV8() { return SocketNet::v8(); }
const ncclNet_v9_t* socketNetV9() { return SocketNet::v9(); }
const ncclNet_v10_t* socketNetV10() { return SocketNet::v10(); }
const ncclNet_v11_t* socketNetV11() { return SocketNet::v11(); }
const ncclNet_v12_t* socketNetV12() { return SocketNet::v12(); }

bool commBytes(void* comm, uint64_t* sent, uint64_t* received) {
  uint64_t s = 0, r = 0;
  const CommHeader* h = static_cast<const CommHeader*>(comm);
  bool ok = h != nullptr && h->magic == kCommMagic && (h->kind == kCommSend || h->kind == kCommRecv);
  if (ok) {
    s = h->bytesSent.load(std::memory_order_relaxed);
    r = h->bytesRecv.load(std::memory_order_relaxed);
  }
  if (sent) *sent = s;
  if (received) *received = r;
  return ok;
}

bool commSharesControl(void* comm) {
  const CommHeader* h = static_cast<const CommHeader*>(comm);
  return h != nullptr && h->magic == kCommMagic && (h->kind == kCommSend || h->kind == kCommRecv) &&
         h->ctrlShared.load(std::memory_order_relaxed) != 0;
}

bool commSetPacing(void* sendComm, uint64_t bytesPerSec) { return socketSetPacing(sendComm, bytesPerSec); }
uint64_t commPacing(void* sendComm) { return socketPacing(sendComm); }

void commWait(void* comm, int timeoutMs) { socketCommWait(comm, timeoutMs); }
void commWaitAny(void* const* comms, size_t n, int timeoutMs) { socketCommWaitAny(comms, n, timeoutMs); }

}  // namespace net
}  // namespace signlion
