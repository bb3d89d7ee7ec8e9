// libnccl-net-signlion-ucx.so: the UCX transport's ncclNet structs, one per
// interface version NCCL probes (v12 first in 2.30.3+, down to v8). Loaded by
// NCCL_NET_PLUGIN=signlion-ucx with NCCL_NET=signlion-ucx; nothing else is exported.
#include "ucx/ucx_net.h"
#include "ucx/ucx_transport.h"

#define SIGNLION_EXPORT __attribute__((visibility("default")))

extern "C" {
SIGNLION_EXPORT ncclNet_v12_t ncclNetPlugin_v12 = *signlion::net::ucxNetV12();
SIGNLION_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = *signlion::net::ucxNetV11();
SIGNLION_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = *signlion::net::ucxNetV10();
SIGNLION_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = *signlion::net::ucxNetV9();
SIGNLION_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = *signlion::net::ucxNetV8();
// signlion's own extension, read by its host communicator (src/host/net.h):
// ends a comm's link as a crash would, for ncclSignCommAbort. NCCL never calls it.
SIGNLION_EXPORT ncclResult_t signlionNetAbortComm(void* comm) { return signlion::net::ucxAbortComm(comm); }
}
