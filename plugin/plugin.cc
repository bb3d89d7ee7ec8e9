// libnccl-net-signlion.so: the exported ncclNet structs, one per interface
// version NCCL probes (2.30.3 .. 2.32 look for v12 first, 2.28/2.29 for v11,
// 2.26/2.27 for v10, 2.24/2.25 for v9, 2.20-2.23 for v8; 2.19 knows v7 at most). The version script keeps every other
// symbol hidden.
#include "net/socket_net.h"
#include "socket/socket_transport.h"

#define SIGNLION_EXPORT __attribute__((visibility("default")))

extern "C" {
SIGNLION_EXPORT ncclNet_v12_t ncclNetPlugin_v12 = *signlion::net::socketNetV12();
SIGNLION_EXPORT ncclNet_v11_t ncclNetPlugin_v11 = *signlion::net::socketNetV11();
SIGNLION_EXPORT ncclNet_v10_t ncclNetPlugin_v10 = *signlion::net::socketNetV10();
SIGNLION_EXPORT ncclNet_v9_t ncclNetPlugin_v9 = *signlion::net::socketNetV9();
SIGNLION_EXPORT ncclNet_v8_t ncclNetPlugin_v8 = *signlion::net::socketNetV8();
// signlion's own extension, read by its host communicator (src/host/net.h):
// ends a comm's link as a crash would, for ncclSignCommAbort. NCCL never calls it.
SIGNLION_EXPORT ncclResult_t signlionNetAbortComm(void* comm) { return signlion::net::socketAbortComm(comm); }
}
