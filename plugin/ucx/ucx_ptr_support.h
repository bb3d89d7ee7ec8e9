// Which memory the UCX transport tells NCCL it can send from and receive
// into (ptrSupport). NCCL_PTR_CUDA is a promise about iflush as much as about
// regMr: with GPUDirect RDMA on a GPU older than compute capability 9.0, NCCL
// calls iflush after every receive into GPU memory and trusts that the data
// is then visible to the GPU. This transport's iflush does nothing, so
// NCCL_PTR_CUDA is advertised only when the user asks for it
// (SIGNLION_UCX_CUDA_POINTERS=1) and this UCX can register CUDA memory; NCCL
// otherwise stages GPU data through host memory. docs/PLUGIN.md, "The UCX
// transport".
#pragma once

#include "common/param.h"
#include "net_common.h"

namespace signlion {
namespace net {

// 1: advertise NCCL_PTR_CUDA when the UCX context lists CUDA memory. Only for
// GPUs NCCL does not flush for (compute capability 9.0 and later).
SIGNLION_PARAM(UcxCudaPointers, "UCX_CUDA_POINTERS", 0, 0, 1)

// ptrSupport for a UCX context that does (or does not) list CUDA memory,
// with SIGNLION_UCX_CUDA_POINTERS set (or not).
inline int ucxPtrSupportFor(bool contextListsCuda, bool cudaPointersAsked) {
  return NCCL_PTR_HOST | (contextListsCuda && cudaPointersAsked ? NCCL_PTR_CUDA : 0);
}

}  // namespace net
}  // namespace signlion
