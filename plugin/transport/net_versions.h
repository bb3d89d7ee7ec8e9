// A version-neutral transport dressed as ncclNet v8, v9, v10, v11 and v12,
// written once for every transport of the plugin. T is a class with static
// members (the UCX transport's is plugin/ucx/ucx_net.cc's UcxOps):
//
//   static constexpr const char* kName;              what NCCL_NET must say
//   static constexpr int kMaxRecvs;                  grouped receives per irecv
//   static constexpr size_t kMaxMessage;             maxP2pBytes / maxCollBytes
//   static int ptrSupport();                         NCCL_PTR_* bits
//   typename Pending;  connects started through a v11/v12 context, not finished
//   init(LogSink), devices(int*), getProperties(int, TransportProps*),
//   listen(int, void*, void**), connect(int dev, int trafficClass, void* handle,
//   void** sendComm, PendingConnects*), abandonConnects(PendingConnects*),
//   accept, regMr, regMrDmaBuf, deregMr, isend(size_t), irecv(const size_t*),
//   iflush, test, closeSend, closeRecv, closeListen  (ncclNet's meanings),
//   makeVDevice(int ndevs, const int* devs, int* d)  (v9+; ndevs already in
//   [1, the props' capacity]).
//
// Both transports use it: plugin/socket/socket_net.cc (SocketOps) and
// plugin/ucx/ucx_net.cc (UcxOps).
#pragma once

#include <cstring>

#include "common/checks.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v8.h"
#include "net_v9.h"

namespace signlion {
namespace net {

// What a transport says about one device; the adapters fill NCCL's structs.
struct TransportProps {
  static constexpr int kMaxFused = 8;  // v12's NCCL_NET_MAX_DEVS_PER_NIC, the largest
  const char* name;
  const char* pciPath;  // nullptr for virtual interfaces
  uint64_t guid;
  int speedMbps;
  int maxComms;
  // The physical devices a fused device (makeVDevice) is made of; ndevs == 0
  // for a device that is only itself.
  int ndevs;
  int devs[kMaxFused];
};

template <typename T>
class NetVersions {
 public:
  static const ncclNet_v8_t* v8() { return &kV8; }
  static const ncclNet_v9_t* v9() { return &kV9; }
  static const ncclNet_v10_t* v10() { return &kV10; }
  static const ncclNet_v11_t* v11() { return &kV11; }
  static const ncclNet_v12_t* v12() { return &kV12; }

 private:
  template <typename Props>
  static ncclResult_t fillCommon(int dev, Props* props, TransportProps* out = nullptr) {
    ARGCHECK(props != nullptr, "getProperties", "props", "NULL");
    TransportProps local;
    TransportProps& p = out != nullptr ? *out : local;
    p = TransportProps{};
    NCCLCHECK(T::getProperties(dev, &p));
    memset(props, 0, sizeof(*props));
    props->name = const_cast<char*>(p.name);
    props->pciPath = const_cast<char*>(p.pciPath);
    props->guid = p.guid;
    props->ptrSupport = T::ptrSupport();
    props->speed = p.speedMbps;
    props->maxComms = p.maxComms;
    props->maxRecvs = T::kMaxRecvs;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    return ncclSuccess;
  }
  template <typename Props>
  static ncclResult_t fillV9(int dev, Props* props) {
    TransportProps p;
    NCCLCHECK(fillCommon(dev, props, &p));
    const int capacity = (int)(sizeof(props->vProps.devs) / sizeof(props->vProps.devs[0]));
    if (p.ndevs == 0) {
      props->vProps.ndevs = 1;
      props->vProps.devs[0] = dev;
    } else {
      // makeVDevice never fuses more devices than the version asking holds,
      // but an older version's props may be asked of a device a newer one
      // fused: refuse rather than truncate.
      ARGCHECK(p.ndevs <= capacity, "getProperties", "dev", "%d is fused of %d devices, this ncclNet version holds %d",
               dev, p.ndevs, capacity);
      props->vProps.ndevs = p.ndevs;
      for (int i = 0; i < p.ndevs; i++) props->vProps.devs[i] = p.devs[i];
    }
    props->maxP2pBytes = T::kMaxMessage;
    props->maxCollBytes = T::kMaxMessage;
    return ncclSuccess;
  }
  static ncclResult_t propsV8(int dev, ncclNetProperties_v8_t* p) { return fillCommon(dev, p); }
  static ncclResult_t propsV9(int dev, ncclNetProperties_v9_t* p) { return fillV9(dev, p); }
  static ncclResult_t propsV10(int dev, ncclNetProperties_v10_t* p) { return fillV9(dev, p); }
  static ncclResult_t propsV11(int dev, ncclNetProperties_v11_t* p) {
    NCCLCHECK(fillV9(dev, p));
    p->maxMultiRequestSize = 1;
    return ncclSuccess;
  }
  static ncclResult_t propsV12(int dev, ncclNetProperties_v12_t* p) {
    NCCLCHECK(fillV9(dev, p));
    p->maxMultiRequestSize = 1;
    p->railId = NCCL_NET_ID_UNDEF;  // no rail/plane facts known for an interface
    p->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
  }

  static ncclResult_t initV8(ncclDebugLogger_t logger) { return T::init(reinterpret_cast<LogSink>(logger)); }
  static ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t) {
    return T::init(reinterpret_cast<LogSink>(logger));
  }

  // v11/v12 context: one per NCCL communicator, carrying its traffic class.
  struct Context {
    uint32_t magic;
    int trafficClass;
    uint64_t commId;
    typename T::Pending pending;
  };
  static constexpr uint32_t kContextMagic = 0x534c4358;  // "SLCX"
  static Context* asContext(void* ctx) {
    Context* c = static_cast<Context*>(ctx);
    return c != nullptr && c->magic == kContextMagic ? c : nullptr;
  }
  static ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                              ncclProfilerCallback_t) {
    ARGCHECK(ctx != nullptr, "init", "ctx", "NULL");
    *ctx = nullptr;
    NCCLCHECK(T::init(reinterpret_cast<LogSink>(logger)));
    Context* c = new Context();
    c->magic = kContextMagic;
    c->trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    c->commId = commId;
    *ctx = c;
    return ncclSuccess;
  }
  static ncclResult_t initV12(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                              ncclProfilerCallback_t prof) {
    static_assert(sizeof(ncclNetCommConfig_v12_t) == sizeof(ncclNetCommConfig_v11_t), "config layout");
    return initV11(ctx, commId, reinterpret_cast<ncclNetCommConfig_v11_t*>(config), logger, prof);
  }
  static ncclResult_t finalize(void* ctx) {
    Context* c = static_cast<Context*>(ctx);
    ARGCHECK(c == nullptr || c->magic == kContextMagic, "finalize", "ctx", "%p is not a context of ours", ctx);
    if (c != nullptr) {
      T::abandonConnects(&c->pending);
      c->magic = 0;
      delete c;
    }
    return ncclSuccess;
  }

  // makeVDevice, v9 and later: every version's props start with ndevs, devs[].
  template <typename VProps>
  static ncclResult_t makeVDevice(int* d, VProps* props) {
    ARGCHECK(props != nullptr, "makeVDevice", "props", "NULL");
    int max = (int)(sizeof(props->devs) / sizeof(props->devs[0]));
    ARGCHECK(props->ndevs >= 1 && props->ndevs <= max, "makeVDevice", "props->ndevs", "%d not in [1, %d]", props->ndevs,
             max);
    return T::makeVDevice(props->ndevs, props->devs, d);
  }

  static ncclResult_t listenV8(int dev, void* handle, void** l) { return T::listen(dev, handle, l); }
  static ncclResult_t listenV11(void*, int dev, void* handle, void** l) { return T::listen(dev, handle, l); }
  static ncclResult_t connectV8(int dev, void* handle, void** s, ncclNetDeviceHandle_v8_t**) {
    return T::connect(dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, s, nullptr);
  }
  static ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** s,
                                 ncclNetDeviceHandle_v10_t**) {
    return T::connect(dev, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, s, nullptr);
  }
  static ncclResult_t connectV11(void* ctx, int dev, void* handle, void** s, ncclNetDeviceHandle_v11_t**) {
    Context* c = asContext(ctx);
    return T::connect(dev, c ? c->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, s, c ? &c->pending : nullptr);
  }
  static ncclResult_t accept(void* l, void** r, ncclNetDeviceHandle_v8_t**) { return T::accept(l, r); }

  static ncclResult_t isendV8(void* s, void* data, int size, int tag, void* mh, void** req) {
    ARGCHECK(size >= 0, "isend", "size", "%d is negative", size);
    return T::isend(s, data, (size_t)size, tag, mh, req);
  }
  static ncclResult_t isendV9(void* s, void* data, size_t size, int tag, void* mh, void** req) {
    return T::isend(s, data, size, tag, mh, req);
  }
  static ncclResult_t isendV10(void* s, void* data, size_t size, int tag, void* mh, void*, void** req) {
    return T::isend(s, data, size, tag, mh, req);
  }
  static ncclResult_t irecvV8(void* r, int n, void** data, int* sizes, int* tags, void** mh, void** req) {
    ARGCHECK(n >= 1 && n <= T::kMaxRecvs, "irecv", "n", "%d not in [1, %d]", n, T::kMaxRecvs);
    ARGCHECK(sizes != nullptr, "irecv", "sizes", "NULL");
    size_t wide[T::kMaxRecvs];
    for (int i = 0; i < n; i++) {
      ARGCHECK(sizes[i] >= 0, "irecv", "sizes", "sizes[%d] = %d is negative", i, sizes[i]);
      wide[i] = (size_t)sizes[i];
    }
    return T::irecv(r, n, data, wide, tags, mh, req);
  }
  static ncclResult_t irecvV9(void* r, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
    return T::irecv(r, n, data, sizes, tags, mh, req);
  }
  static ncclResult_t irecvV10(void* r, int n, void** data, size_t* sizes, int* tags, void** mh, void**, void** req) {
    return T::irecv(r, n, data, sizes, tags, mh, req);
  }

  static constexpr ncclNet_v8_t kV8 = {T::kName,     initV8,         T::devices, propsV8,        listenV8,
                                       connectV8,    accept,         T::regMr,   T::regMrDmaBuf, T::deregMr,
                                       isendV8,      irecvV8,        T::iflush,  T::test,        T::closeSend,
                                       T::closeRecv, T::closeListen, nullptr,    nullptr};
  static constexpr ncclNet_v9_t kV9 = {T::kName,     initV8,         T::devices, propsV9,        listenV8,
                                       connectV8,    accept,         T::regMr,   T::regMrDmaBuf, T::deregMr,
                                       isendV9,      irecvV9,        T::iflush,  T::test,        T::closeSend,
                                       T::closeRecv, T::closeListen, nullptr,    nullptr,        makeVDevice};
  static constexpr ncclNet_v10_t kV10 = {T::kName,     initV10,        T::devices, propsV10,       listenV8,
                                         connectV10,   accept,         T::regMr,   T::regMrDmaBuf, T::deregMr,
                                         isendV10,     irecvV10,       T::iflush,  T::test,        T::closeSend,
                                         T::closeRecv, T::closeListen, nullptr,    nullptr,        makeVDevice};
  static constexpr ncclNet_v11_t kV11 = {
      T::kName,       initV11,    T::devices, propsV11,    listenV11, connectV11, accept,       T::regMr,
      T::regMrDmaBuf, T::deregMr, isendV10,   irecvV10,    T::iflush, T::test,    T::closeSend, T::closeRecv,
      T::closeListen, nullptr,    nullptr,    makeVDevice, finalize,  nullptr};
  static constexpr ncclNet_v12_t kV12 = {
      T::kName,       initV12,    T::devices, propsV12,    listenV11, connectV11, accept,       T::regMr,
      T::regMrDmaBuf, T::deregMr, isendV10,   irecvV10,    T::iflush, T::test,    T::closeSend, T::closeRecv,
      T::closeListen, nullptr,    nullptr,    makeVDevice, finalize,  nullptr};
};

}  // namespace net
}  // namespace signlion
