// The NCCL entry points signlion calls, resolved at run time from the NCCL
// the process already uses. A framework's communicator must be driven by the
// very library that made it, so libnccl-sign.so carries no NCCL and records
// no dependency on one (no DT_NEEDED). Resolution order, first match wins:
//  1. a libnccl.so.2 already loaded (dlopen with RTLD_NOLOAD): the one
//     PyTorch or the application loaded;
//  2. the global scope (dlsym(RTLD_DEFAULT)): an NCCL linked into the
//     executable, or loaded under another name with RTLD_GLOBAL;
//  3. dlopen of SIGNLION_NCCL_LIBRARY (a path or a name), else of
//     "libnccl.so.2" (the loader's search path).
// An NCCL older than 2.19, or one without a required entry point below, is
// refused. The optional ones (commSplit, commDestroy) are null when missing:
// the feature that needs them is then left out with a log line.
#pragma once

#include <nccl.h>

namespace signlion {
namespace nccl {

// ncclGetVersion's code of NCCL 2.19.0, the oldest accepted.
constexpr int kMinNcclVersion = 21900;

struct NcclApi {
  int version = 0;      // ncclGetVersion's code
  char path[512] = {};  // where it was found (dladdr), for the logs
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetErrorString) getErrorString = nullptr;
  decltype(&::ncclCommCount) commCount = nullptr;
  decltype(&::ncclCommUserRank) commUserRank = nullptr;
  decltype(&::ncclCommCuDevice) commCuDevice = nullptr;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclAllGather) allGather = nullptr;
  // Optional: NCCL's node grouping (node_groups.h). ncclCommSplit exists
  // since NCCL 2.18, so every accepted NCCL has it; a library built without
  // it (or an interposer that leaves it out) only loses the hierarchical
  // algorithm. Both are set or both are null.
  decltype(&::ncclCommSplit) commSplit = nullptr;
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
};

// The process's NCCL, found once (thread-safe); later calls return the same
// table, or the same error without searching again.
// Errors: ncclSystemError (no NCCL found, an entry point missing),
// ncclInvalidUsage (NCCL older than 2.19), each with a WARN saying which.
ncclResult_t ncclApi(const NcclApi** out);

// ncclApi's search, uncached (tests): the three steps above.
ncclResult_t loadNcclApi(NcclApi* out);
// Every entry point from `handle` (a dlopen handle, or RTLD_DEFAULT), then
// the version check; `origin` names the step in the log lines.
ncclResult_t resolveNcclApi(void* handle, const char* origin, NcclApi* out);
// ncclSuccess for a version code >= kMinNcclVersion, else ncclInvalidUsage
// with a WARN. Codes below 2.9 use NCCL's old encoding (2.8.4 is 2804).
ncclResult_t checkNcclVersion(int code);

}  // namespace nccl
}  // namespace signlion
