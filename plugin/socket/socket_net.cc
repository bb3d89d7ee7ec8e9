// The socket transport dressed as ncclNet v8, v9, v10, v11 and v12. Each adapter
// converts arguments and forwards to socket_transport.h.
#include "socket/socket_net.h"

#include <climits>
#include <cstring>

#include "common/checks.h"
#include "socket/socket_transport.h"

namespace signlion {
namespace net {
namespace {

// ---- Properties ---------------------------------------------------------------

template <typename Props>
ncclResult_t fillCommon(int dev, Props* props, SocketProps* out = nullptr) {
  ARGCHECK(props != nullptr, "getProperties", "props", "NULL");
  SocketProps local;
  SocketProps& p = out != nullptr ? *out : local;
  NCCLCHECK(socketGetProperties(dev, &p));
  memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>(p.name);
  props->pciPath = const_cast<char*>(p.pciPath);
  props->guid = p.guid;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->speed = p.speedMbps;
  props->port = 0;
  props->latency = 0;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  return ncclSuccess;
}

// v9 and later: the physical devices this one is made of (itself unless
// fused by makeVDevice) and size limits.
template <typename Props>
ncclResult_t fillV9(int dev, Props* props) {
  SocketProps p;
  NCCLCHECK(fillCommon(dev, props, &p));
  props->forceFlush = 0;
  props->vProps.ndevs = p.ndevs;
  for (int i = 0; i < p.ndevs; i++) props->vProps.devs[i] = p.devs[i];
  props->maxP2pBytes = kSocketMaxMessage;
  props->maxCollBytes = kSocketMaxMessage;
  return ncclSuccess;
}

ncclResult_t getPropsV8(int dev, ncclNetProperties_v8_t* props) { return fillCommon(dev, props); }
ncclResult_t getPropsV9(int dev, ncclNetProperties_v9_t* props) { return fillV9(dev, props); }
ncclResult_t getPropsV10(int dev, ncclNetProperties_v10_t* props) { return fillV9(dev, props); }
ncclResult_t getPropsV11(int dev, ncclNetProperties_v11_t* props) {
  NCCLCHECK(fillV9(dev, props));
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}
ncclResult_t getPropsV12(int dev, ncclNetProperties_v12_t* props) {
  NCCLCHECK(fillV9(dev, props));
  props->maxMultiRequestSize = 1;
  // Rails and planes describe fabrics built of parallel switch planes; an
  // interface gives no such fact (sysfs has none), so NCCL places our NICs
  // by PCI distance as before.
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}

// makeVDevice, v9 and later: every version's props start with ndevs, devs[].
template <typename VProps>
ncclResult_t makeVDevice(int* d, VProps* props) {
  ARGCHECK(props != nullptr, "makeVDevice", "props", "NULL");
  int max = (int)(sizeof(props->devs) / sizeof(props->devs[0]));
  ARGCHECK(props->ndevs >= 1 && props->ndevs <= max, "makeVDevice", "props->ndevs", "%d not in [1, %d]", props->ndevs,
           max);
  return socketMakeVDevice(props->ndevs, props->devs, d);
}

// ---- init / connect variants -----------------------------------------------------

ncclResult_t initV8(ncclDebugLogger_t logger) { return socketInit(reinterpret_cast<LogSink>(logger)); }
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  return socketInit(reinterpret_cast<LogSink>(logger));
}

// v11 context: one per NCCL communicator, carrying its traffic class.
struct NetContext {
  uint32_t magic;
  int trafficClass;
  uint64_t commId;
  PendingConnects pending;  // connects started through this context, not yet finished
};
constexpr uint32_t kContextMagic = 0x534c4358;  // "SLCX"

ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t) {
  ARGCHECK(ctx != nullptr, "init", "ctx", "NULL");
  *ctx = nullptr;
  NCCLCHECK(socketInit(reinterpret_cast<LogSink>(logger)));
  NetContext* c = new NetContext();
  c->magic = kContextMagic;
  c->trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  c->commId = commId;
  *ctx = c;
  return ncclSuccess;
}

// v12's config is v11's (one trafficClass); the struct types differ by name only.
static_assert(sizeof(ncclNetCommConfig_v12_t) == sizeof(ncclNetCommConfig_v11_t), "config layout");
ncclResult_t initV12(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t prof) {
  return initV11(ctx, commId, reinterpret_cast<ncclNetCommConfig_v11_t*>(config), logger, prof);
}

ncclResult_t finalizeV11(void* ctx) {
  NetContext* c = static_cast<NetContext*>(ctx);
  ARGCHECK(c == nullptr || c->magic == kContextMagic, "finalize", "ctx", "%p is not a context of ours", ctx);
  if (c != nullptr) {
    socketAbandonConnects(&c->pending);  // the caller gave up on these: close their sockets
    c->magic = 0;
    delete c;
  }
  return ncclSuccess;
}

int contextTrafficClass(void* ctx) {
  NetContext* c = static_cast<NetContext*>(ctx);
  return c != nullptr && c->magic == kContextMagic ? c->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
}

ncclResult_t listenV8(int dev, void* handle, void** listenComm) { return socketListen(dev, handle, listenComm); }
ncclResult_t listenV11(void*, int dev, void* handle, void** listenComm) {
  return socketListen(dev, handle, listenComm);
}

ncclResult_t connectV8(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t**) {
  return socketConnect(dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm);
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t**) {
  return socketConnect(dev, config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF, handle, sendComm);
}
ncclResult_t connectV11(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t**) {
  NetContext* c = static_cast<NetContext*>(ctx);
  PendingConnects* pending = c != nullptr && c->magic == kContextMagic ? &c->pending : nullptr;
  return socketConnect(dev, contextTrafficClass(ctx), handle, sendComm, pending);
}

ncclResult_t acceptAny(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t**) {
  return socketAccept(listenComm, recvComm);
}

// ---- isend / irecv variants ------------------------------------------------------

ncclResult_t isendV8(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  ARGCHECK(size >= 0, "isend", "size", "%d is negative", size);
  return socketIsend(sendComm, data, (size_t)size, tag, mhandle, request);
}
ncclResult_t isendV9(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return socketIsend(sendComm, data, size, tag, mhandle, request);
}
ncclResult_t isendV10(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  return socketIsend(sendComm, data, size, tag, mhandle, request);
}

ncclResult_t irecvV8(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  ARGCHECK(n >= 1 && n <= kSocketMaxRecvs, "irecv", "n", "%d not in [1, %d]", n, kSocketMaxRecvs);
  ARGCHECK(sizes != nullptr, "irecv", "sizes", "NULL");
  size_t wide[kSocketMaxRecvs];
  for (int i = 0; i < n; i++) {
    ARGCHECK(sizes[i] >= 0, "irecv", "sizes", "sizes[%d] = %d is negative", i, sizes[i]);
    wide[i] = (size_t)sizes[i];
  }
  return socketIrecv(recvComm, n, data, wide, tags, mhandles, request);
}
ncclResult_t irecvV9(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return socketIrecv(recvComm, n, data, sizes, tags, mhandles, request);
}
ncclResult_t irecvV10(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void**,
                      void** request) {
  return socketIrecv(recvComm, n, data, sizes, tags, mhandles, request);
}

// ---- The structs -----------------------------------------------------------------

const ncclNet_v8_t kNetV8 = {
    kSocketNetName, initV8,      socketDevices,     getPropsV8,      listenV8,          connectV8,
    acceptAny,      socketRegMr, socketRegMrDmaBuf, socketDeregMr,   isendV8,           irecvV8,
    socketIflush,   socketTest,  socketCloseSend,   socketCloseRecv, socketCloseListen, nullptr /* getDeviceMr */,
    nullptr /* irecvConsumed */};

const ncclNet_v9_t kNetV9 = {kSocketNetName,
                             initV8,
                             socketDevices,
                             getPropsV9,
                             listenV8,
                             connectV8,
                             acceptAny,
                             socketRegMr,
                             socketRegMrDmaBuf,
                             socketDeregMr,
                             isendV9,
                             irecvV9,
                             socketIflush,
                             socketTest,
                             socketCloseSend,
                             socketCloseRecv,
                             socketCloseListen,
                             nullptr /* getDeviceMr */,
                             nullptr /* irecvConsumed */,
                             makeVDevice};

const ncclNet_v10_t kNetV10 = {kSocketNetName,
                               initV10,
                               socketDevices,
                               getPropsV10,
                               listenV8,
                               connectV10,
                               acceptAny,
                               socketRegMr,
                               socketRegMrDmaBuf,
                               socketDeregMr,
                               isendV10,
                               irecvV10,
                               socketIflush,
                               socketTest,
                               socketCloseSend,
                               socketCloseRecv,
                               socketCloseListen,
                               nullptr /* getDeviceMr */,
                               nullptr /* irecvConsumed */,
                               makeVDevice};

// v11 and v12 share one function table; only init's config and the
// properties differ in type. constexpr: the tables must be constant-
// initialized, since plugin.cc copies them during static initialization.
template <typename Net, typename Init, typename GetProps>
constexpr Net contextNet(Init init, GetProps getProps) {
  return Net{kSocketNetName,
             init,
             socketDevices,
             getProps,
             listenV11,
             connectV11,
             acceptAny,
             socketRegMr,
             socketRegMrDmaBuf,
             socketDeregMr,
             isendV10,
             irecvV10,
             socketIflush,
             socketTest,
             socketCloseSend,
             socketCloseRecv,
             socketCloseListen,
             nullptr /* getDeviceMr */,
             nullptr /* irecvConsumed */,
             makeVDevice,
             finalizeV11,
             nullptr /* setNetAttr */};
}

constexpr ncclNet_v11_t kNetV11 = contextNet<ncclNet_v11_t>(initV11, getPropsV11);
constexpr ncclNet_v12_t kNetV12 = contextNet<ncclNet_v12_t>(initV12, getPropsV12);

}  // namespace

const ncclNet_v12_t* socketNetV12() { return &kNetV12; }
const ncclNet_v8_t* socketNetV8() { return &kNetV8; }
const ncclNet_v9_t* socketNetV9() { return &kNetV9; }
const ncclNet_v10_t* socketNetV10() { return &kNetV10; }
const ncclNet_v11_t* socketNetV11() { return &kNetV11; }

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

void commWait(void* comm, int timeoutMs) { socketCommWait(comm, timeoutMs); }

}  // namespace net
}  // namespace signlion
