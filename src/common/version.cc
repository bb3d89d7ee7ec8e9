// Version and error-string entry points of the C ABI.
#include "common/checks.h"
#include "nccl_sign.h"

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignGetVersion(int* version) {
  ARGCHECK(version != nullptr, "ncclSignGetVersion", "version", "must not be NULL");
  *version = NCCL_SIGN_VERSION_CODE;
  return ncclSuccess;
}

extern "C" __attribute__((visibility("default"))) const char* ncclSignGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with SIGNLION_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with SIGNLION_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the signlion developers";
    case ncclInvalidArgument: return "invalid argument (run with SIGNLION_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with SIGNLION_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}
