#include "nccl/nccl_symbols.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/checks.h"
#include "common/param.h"

// A path or a name for dlopen, used only when the process has no NCCL yet.
SIGNLION_STRING_PARAM(NcclLibrary, "NCCL_LIBRARY", "")

namespace signlion {
namespace nccl {

namespace {

// "2.28.9" from a version code (both of NCCL's encodings).
std::string versionString(int code) {
  char buf[32];
  if (code >= 10000)
    snprintf(buf, sizeof(buf), "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  else
    snprintf(buf, sizeof(buf), "%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
  return buf;
}

}  // namespace

ncclResult_t checkNcclVersion(int code) {
  if (code >= kMinNcclVersion) return ncclSuccess;
  WARN("NCCL %s (version code %d) is older than 2.19, the oldest signlion supports", versionString(code).c_str(), code);
  return ncclInvalidUsage;
}

ncclResult_t resolveNcclApi(void* handle, const char* origin, NcclApi* out) {
  NcclApi api;
  struct Entry {
    const char* name;
    void** fn;
  };
  const Entry entries[] = {
      {"ncclGetVersion", reinterpret_cast<void**>(&api.getVersion)},
      {"ncclGetErrorString", reinterpret_cast<void**>(&api.getErrorString)},
      {"ncclCommCount", reinterpret_cast<void**>(&api.commCount)},
      {"ncclCommUserRank", reinterpret_cast<void**>(&api.commUserRank)},
      {"ncclCommCuDevice", reinterpret_cast<void**>(&api.commCuDevice)},
      {"ncclCommGetAsyncError", reinterpret_cast<void**>(&api.commGetAsyncError)},
      {"ncclGroupStart", reinterpret_cast<void**>(&api.groupStart)},
      {"ncclGroupEnd", reinterpret_cast<void**>(&api.groupEnd)},
      {"ncclSend", reinterpret_cast<void**>(&api.send)},
      {"ncclRecv", reinterpret_cast<void**>(&api.recv)},
      {"ncclAllReduce", reinterpret_cast<void**>(&api.allReduce)},
      {"ncclAllGather", reinterpret_cast<void**>(&api.allGather)},
  };
  for (const Entry& e : entries) {
    *e.fn = dlsym(handle, e.name);
    if (*e.fn == nullptr) {
      WARN("NCCL (%s) has no entry point %s; signlion needs NCCL 2.19 or later", origin, e.name);
      return ncclSystemError;
    }
  }
  // Optional: the pair, or neither.
  api.commSplit = reinterpret_cast<decltype(api.commSplit)>(dlsym(handle, "ncclCommSplit"));
  api.commDestroy = reinterpret_cast<decltype(api.commDestroy)>(dlsym(handle, "ncclCommDestroy"));
  if (api.commSplit == nullptr || api.commDestroy == nullptr) {
    api.commSplit = nullptr;
    api.commDestroy = nullptr;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(api.getVersion), &info) != 0 && info.dli_fname != nullptr)
    snprintf(api.path, sizeof(api.path), "%s", info.dli_fname);
  else
    snprintf(api.path, sizeof(api.path), "%s", origin);
  ncclResult_t res = api.getVersion(&api.version);
  if (res != ncclSuccess) {
    WARN("ncclGetVersion of the NCCL at %s failed: %d", api.path, (int)res);
    return ncclSystemError;
  }
  NCCLCHECK(checkNcclVersion(api.version));
  INFO(kSubsysInit, "NCCL %s from %s (%s)%s", versionString(api.version).c_str(), api.path, origin,
       api.commSplit != nullptr ? "" : "; it has no ncclCommSplit: the hierarchical algorithm is left out");
  *out = api;
  return ncclSuccess;
}

ncclResult_t loadNcclApi(NcclApi* out) {
  const std::string wanted = signlionParamNcclLibrary();
  // 1 and 2: the NCCL the process already uses. Its communicators are the
  // only ones a caller can hand us, so it wins over SIGNLION_NCCL_LIBRARY.
  void* handle = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_NOW);
  const char* origin = "libnccl.so.2, already loaded";
  if (handle == nullptr && dlsym(RTLD_DEFAULT, "ncclGetVersion") != nullptr) {
    handle = RTLD_DEFAULT;
    origin = "the process's global symbols";
  }
  if (handle != nullptr) {
    NCCLCHECK(resolveNcclApi(handle, origin, out));
    if (!wanted.empty() && strstr(out->path, wanted.c_str()) == nullptr)
      WARN("SIGNLION_NCCL_LIBRARY=%s is ignored: the process already uses the NCCL at %s", wanted.c_str(), out->path);
    return ncclSuccess;
  }
  // 3: none yet; load one. RTLD_LOCAL keeps its symbols out of the global
  // scope, and it stays loaded for the life of the process.
  const std::string name = wanted.empty() ? "libnccl.so.2" : wanted;
  handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    WARN(
        "no NCCL: none is loaded in the process, and dlopen(\"%s\") failed: %s (set SIGNLION_NCCL_LIBRARY to "
        "its path)",
        name.c_str(), err ? err : "unknown error");
    return ncclSystemError;
  }
  return resolveNcclApi(handle, name.c_str(), out);
}

ncclResult_t ncclApi(const NcclApi** out) {
  struct Loaded {
    NcclApi api;
    ncclResult_t res = ncclSuccess;
  };
  static const Loaded loaded = [] {
    Loaded l;
    l.res = loadNcclApi(&l.api);
    return l;
  }();
  if (loaded.res != ncclSuccess) return loaded.res;
  *out = &loaded.api;
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
