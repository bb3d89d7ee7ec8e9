// The process's UCP context and its two shared workers (ucx_comm.h,
// Global): making and replacing workers, progress, init and the devices.
#include "ucx/ucx_comm.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/checks.h"
#include "net/socket_params.h"
#include "ucx/ucx_ptr_support.h"

namespace signlion {
namespace net {
namespace ucx {

Global& global() {
  static Global* g = new Global();  // kept until exit, as the UCP context
  return *g;
}

const char* ucsStr(ucs_status_t s) { return ucs_status_string(s); }

ucs_status_t newWorker(ucp_worker_h* w) {
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Serialized: every call into the worker holds Global::workerMu (one
  // mutex is cheaper than UCS_THREAD_MODE_MULTI's locks inside each call,
  // and it also guards the slots the callbacks write).
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  return ucp_worker_create(global().context, &wp, w);
}
std::mutex& workerLock() { return global().workerMu; }

namespace {

// Replaces a side's tainted worker (Global::workerTainted) by a fresh one;
// false when none can be made. The caller holds workerLock().
bool replaceTaintedWorker(int side) {
  Global& g = global();
  if (!g.workerTainted[side]) return true;
  ucp_worker_h w = nullptr;
  ucs_status_t s = newWorker(&w);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_worker_create: %s", ucsStr(s));
    return false;
  }
  INFO(kSubsysNet, "NET/signlion-ucx: a %s comm ended uncleanly: new ones use a new UCX worker",
       side == kSendSide ? "send" : "recv");
  g.retired.push_back(g.workers[side]);  // it stays with its comms until exit
  g.workers[side] = w;
  g.workerTainted[side] = false;
  return true;
}

// A new comm's share of its side's worker; a recv comm gets its id (never

}  // namespace

// 0, the id of no comm). The caller holds workerLock().
bool attachWorker(Comm* c) {
  Global& g = global();
  int side = c->isSend ? kSendSide : kRecvSide;
  if (!replaceTaintedWorker(side)) return false;
  c->worker = g.workers[side];
  if (!c->isSend) {
    c->commId = g.nextCommId++;
    if (g.nextCommId & kSetupIdBit) g.nextCommId = 1;  // 31 bits (kSetupIdBit), never 0
  }
  return true;
}

// Comms made from now on get a fresh worker, made now rather than at the
// next connect or accept: its descriptors then open at the failure, not
// inside a later call that the caller may expect to leave none behind (a
// connect abandoned by finalize). The caller holds workerLock().
void taintWorker(Comm* c) {
  int side = c->isSend ? kSendSide : kRecvSide;
  if (c->worker != global().workers[side]) return;
  global().workerTainted[side] = true;
  (void)replaceTaintedWorker(side);  // retried at the next attach if it failed
}

// One progress call on the comm's worker and on the other side's current
// worker: a peer in this process holds its end there (a flush waits for
// its acknowledgement, a receive for its rendezvous reply), and a caller
// that waits on one comm moves every other comm of the process, as with
// one worker. Returns the events processed. The caller holds workerLock().
unsigned progress(Comm* c) {
  const Global& g = global();
  ucp_worker_h other = g.workers[c->isSend ? kRecvSide : kSendSide];
  unsigned n = ucp_worker_progress(c->worker);
  if (other != nullptr && other != c->worker) n += ucp_worker_progress(other);
  return n;
}

// Progress-bound wait for a UCX request of our own (ep close, flush); the
// caller holds workerLock(). A peer in this process shares the worker, so
// this progress moves its side too.
ucs_status_t waitUcx(Comm* c, void* req, int64_t limitMs) {
  if (req == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  int64_t start = monotonicMs();
  ucs_status_t s;
  while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS && monotonicMs() - start < limitMs) progress(c);
  ucp_request_free(req);  // released now, or by UCX once it completes (worker destroy at the latest)
  return s;
}

// Debian's UCX has no cuda transports; a build with them lists
// UCS_MEMORY_TYPE_CUDA in the context's memory types.
static bool contextListsCuda(ucp_context_h context) {
  if (context == nullptr) return false;
  ucp_context_attr_t a;
  memset(&a, 0, sizeof(a));
  a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  return ucp_context_query(context, &a) == UCS_OK && (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
}

// Says, once per process, what became of GPU pointers (ucx_ptr_support.h).
static void logCudaPointers(ucp_context_h context) {
  const bool listed = contextListsCuda(context), asked = signlionParamUcxCudaPointers() != 0;
  if (listed && asked)
    WARN("NET/signlion-ucx: NCCL_PTR_CUDA advertised (SIGNLION_UCX_CUDA_POINTERS=1) but iflush does not flush: data "
         "received into GPU memory is safe only on GPUs NCCL does not flush for (compute capability 9.0 and later)");
  else if (listed)
    INFO(kSubsysInit | kSubsysNet,
         "NET/signlion-ucx: this UCX registers CUDA memory, but NCCL_PTR_CUDA is not advertised (iflush does not "
         "flush): NCCL stages GPU buffers through host memory; SIGNLION_UCX_CUDA_POINTERS=1 for GPUs of compute "
         "capability 9.0 and later");
  else if (asked)
    INFO(kSubsysInit | kSubsysNet, "NET/signlion-ucx: SIGNLION_UCX_CUDA_POINTERS=1 ignored: this UCX lists no CUDA "
                                   "memory");
}

bool deviceAddress(int dev, SocketAddress* a) {
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  if (dev < 0 || dev >= (int)g.devs.size()) return false;
  *a = g.devs[dev].addr;
  return true;
}

}  // namespace ucx

using namespace ucx;

ncclResult_t ucxInit(LogSink logger) {
  if (logger != nullptr) logSetSink(logger);
  // SIGNLION_* are read as they are at init: this library is never unloaded
  // (-z nodelete), so without this a process that finalizes and inits again
  // (NCCL after a communicator abort, the test suites) would keep the values
  // its first init saw.
  paramResetCache();
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.ready && g.pid != getpid()) {
    // UCX does not survive fork: the child's copy of the context has no
    // progress thread and shares endpoints' state with the parent; using it
    // hangs or corrupts the parent's connections. A clear error instead.
    WARN(
        "NET/signlion-ucx: init in process %d, forked from %d after that one's init: UCX cannot be used across "
        "fork; initialize the transport only in the child (or exec)",
        (int)getpid(), (int)g.pid);
    return ncclSystemError;
  }
  if (g.ready) return ncclSuccess;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);  // UCX_TLS, UCX_NET_DEVICES, ... pass through
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_config_read: %s", ucsStr(s));
    return ncclSystemError;
  }
  ucp_params_t p;
  memset(&p, 0, sizeof(p));
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  p.features = UCP_FEATURE_TAG;
  p.mt_workers_shared = 1;  // regMr maps memory on any thread while another progresses the worker
  s = ucp_init(&p, config, &g.context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    WARN("NET/signlion-ucx: ucp_init: %s (UCX_TLS=%s)", ucsStr(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "");
    return ncclSystemError;
  }
  for (ucp_worker_h& w : g.workers) {
    s = newWorker(&w);
    if (s != UCS_OK) {
      WARN("NET/signlion-ucx: ucp_worker_create: %s", ucsStr(s));
      if (g.workers[kRecvSide] != nullptr) ucp_worker_destroy(g.workers[kRecvSide]);
      ucp_cleanup(g.context);
      g.context = nullptr;
      g.workers[kRecvSide] = g.workers[kSendSide] = nullptr;
      return ncclSystemError;
    }
  }
  // One device: NCCL takes every device for a NIC of its own (bandwidth
  // summed, channels spread over them), but the data goes wherever UCX sends
  // it (UCX_NET_DEVICES); the interface is only where the setup connection
  // listens. The first the interface variables select (SIGNLION_SOCKET_IFNAME).
  g.devs = findSocketDevices(1);
  if (g.devs.empty()) {
    IfnameSpec spec = socketIfnameSpec();
    WARN("NET/signlion-ucx: no usable interface for the setup connection (%s=%s)",
         spec.source[0] ? spec.source : "SIGNLION_SOCKET_IFNAME", spec.spec.c_str());
    return ncclSystemError;
  }
  g.ready = true;
  g.pid = getpid();
  INFO(kSubsysInit | kSubsysNet, "NET/signlion-ucx: UCX %s, one device, setup connections on %s %s",
       ucp_get_version_string(), g.devs[0].name.c_str(), addressString(g.devs[0].addr).c_str());
  logCudaPointers(g.context);
  return ncclSuccess;
}

int ucxPtrSupport() { return ucxPtrSupportFor(contextListsCuda(global().context), signlionParamUcxCudaPointers() != 0); }

ncclResult_t ucxDevices(int* ndev) {
  ARGCHECK(ndev != nullptr, "devices", "ndev", "NULL");
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  *ndev = (int)g.devs.size();
  return ncclSuccess;
}

ncclResult_t ucxGetProperties(int dev, UcxProps* props) {
  Global& g = global();
  std::lock_guard<std::mutex> lk(g.mu);
  ARGCHECK(dev >= 0 && dev < (int)g.devs.size(), "getProperties", "dev", "%d not in [0, %zu)", dev, g.devs.size());
  const SocketDevice& d = g.devs[dev];
  props->name = d.name.c_str();
  props->pciPath = d.pciPath.empty() ? nullptr : d.pciPath.c_str();
  props->guid = (uint64_t)dev;
  props->speedMbps = d.speedMbps;
  props->maxComms = 1024;  // an endpoint per send comm: UCX's resources, not descriptors, are the limit
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
