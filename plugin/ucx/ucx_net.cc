#include "ucx/ucx_net.h"

#include "transport/net_versions.h"
#include "ucx/ucx_transport.h"

namespace signlion {
namespace net {
namespace {

struct UcxOps {
  static constexpr const char* kName = kUcxNetName;
  static constexpr int kMaxRecvs = kUcxMaxRecvs;
  static constexpr size_t kMaxMessage = kUcxMaxMessage;
  using Pending = UcxPendingConnects;
  static int ptrSupport() { return ucxPtrSupport(); }
  static ncclResult_t init(LogSink logger) { return ucxInit(logger); }
  static ncclResult_t devices(int* ndev) { return ucxDevices(ndev); }
  static ncclResult_t getProperties(int dev, TransportProps* props) {
    ARGCHECK(props != nullptr, "getProperties", "props", "NULL");
    UcxProps p;
    NCCLCHECK(ucxGetProperties(dev, &p));
    *props = TransportProps{p.name, p.pciPath, p.guid, p.speedMbps, p.maxComms, 0, {}};
    return ncclSuccess;
  }
  // No NIC fusion here: UCX stripes one endpoint over the devices
  // UCX_NET_DEVICES lists (its multi-rail) by itself. A "fusion" of one
  // device is that device; more are refused with a WARN naming why.
  static ncclResult_t makeVDevice(int ndevs, const int* devs, int* d) {
    ARGCHECK(d != nullptr, "makeVDevice", "d", "NULL");
    ARGCHECK(devs != nullptr, "makeVDevice", "props->devs", "NULL");
    int ndev = 0;
    NCCLCHECK(ucxDevices(&ndev));
    for (int i = 0; i < ndevs; i++) {
      ARGCHECK(devs[i] >= 0 && devs[i] < ndev, "makeVDevice", "props->devs", "devs[%d] = %d is not a device", i,
               devs[i]);
      for (int j = 0; j < i; j++)
        ARGCHECK(devs[j] != devs[i], "makeVDevice", "props->devs", "device %d listed twice", devs[i]);
    }
    ARGCHECK(ndevs == 1, "makeVDevice", "props->ndevs",
             "%d: the UCX transport fuses no devices (list them in UCX_NET_DEVICES for UCX's multi-rail)", ndevs);
    *d = devs[0];
    return ncclSuccess;
  }
  static ncclResult_t listen(int dev, void* handle, void** l) { return ucxListen(dev, handle, l); }
  static ncclResult_t connect(int dev, int tc, void* handle, void** s, Pending* pending) {
    return ucxConnect(dev, tc, handle, s, pending);
  }
  static void abandonConnects(Pending* pending) { ucxAbandonConnects(pending); }
  static ncclResult_t accept(void* l, void** r) { return ucxAccept(l, r); }
  static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) {
    return ucxRegMr(comm, data, size, type, mh);
  }
  static ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t off, int fd, void** mh) {
    return ucxRegMrDmaBuf(comm, data, size, type, off, fd, mh);
  }
  static ncclResult_t deregMr(void* comm, void* mh) { return ucxDeregMr(comm, mh); }
  static ncclResult_t isend(void* s, void* data, size_t size, int tag, void* mh, void** req) {
    return ucxIsend(s, data, size, tag, mh, req);
  }
  static ncclResult_t irecv(void* r, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
    return ucxIrecv(r, n, data, sizes, tags, mh, req);
  }
  static ncclResult_t iflush(void* r, int n, void** data, int* sizes, void** mh, void** req) {
    return ucxIflush(r, n, data, sizes, mh, req);
  }
  static ncclResult_t test(void* req, int* done, int* sizes) { return ucxTest(req, done, sizes); }
  static ncclResult_t closeSend(void* s) { return ucxCloseSend(s); }
  static ncclResult_t closeRecv(void* r) { return ucxCloseRecv(r); }
  static ncclResult_t closeListen(void* l) { return ucxCloseListen(l); }
};
using UcxNet = NetVersions<UcxOps>;

}  // namespace

const ncclNet_v8_t* ucxNetV8() { return UcxNet::v8(); }
const ncclNet_v9_t* ucxNetV9() { return UcxNet::v9(); }
const ncclNet_v10_t* ucxNetV10() { return UcxNet::v10(); }
const ncclNet_v11_t* ucxNetV11() { return UcxNet::v11(); }
const ncclNet_v12_t* ucxNetV12() { return UcxNet::v12(); }

}  // namespace net
}  // namespace signlion
