// The bodies of ncclSignAllReduce(WithConfig), ncclSignCommSetConfig and
// ncclSignCommRelease, with the NCCL they drive as a parameter: the exported
// calls pass null (the process's NCCL, nccl_symbols.h, looked up once the
// arguments are checked); the SIMT tests pass NCCL played by threads, so the
// entry points themselves (argument checks, the per-comm context, whose
// rules a call runs with) run without a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "nccl/nccl_symbols.h"
#include "nccl_sign.h"

namespace signlion {
namespace nccl {

// config may be null (the comm's rules); `caller` names the entry point in
// WARN lines.
ncclResult_t signAllReduce(const NcclApi* api, const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclSignOp_t op, const ncclSignCallConfig_t* config,
                           ncclComm_t comm, cudaStream_t stream, const char* caller);
ncclResult_t setCommConfig(const NcclApi* api, ncclComm_t comm, const ncclSignConfig_t* config);
ncclResult_t releaseComm(ncclComm_t comm);

}  // namespace nccl
}  // namespace signlion
