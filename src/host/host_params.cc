#include "host/host_params.h"

#include <algorithm>
#include <atomic>

#include "common/debug.h"

namespace signlion {
namespace host {

int64_t hostChunkBytes() {
  constexpr int64_t kMin = 64, kMax = int64_t{1} << 30;
  int64_t v = signlionParamHostChunkBytes();
  if (v >= kMin && v <= kMax) return v;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    WARN("SIGNLION_HOST_CHUNK_BYTES=%lld is outside [%lld, %lld]; using %lld", (long long)v, (long long)kMin,
         (long long)kMax, (long long)std::clamp(v, kMin, kMax));
  return std::clamp(v, kMin, kMax);
}

}  // namespace host
}  // namespace signlion
