#include "host/host_params.h"

#include "algo/cost_model.h"
#include "common/checks.h"

#include <atomic>
#include <string>

namespace signlion {
namespace host {

int64_t hostChunkBytes() {
  static std::atomic<uint64_t> warnedEpoch{~0ull};
  const int64_t set = signlionParamHostChunkBytes();  // 0 or [64, 1 GiB]; beyond, the read kept the default
  if (set >= 64) return set;
  if (set != 0 && paramFirstWarning(&warnedEpoch))
    paramWarnKeepDefault("HOST_CHUNK_BYTES", std::to_string(set).c_str(), "is neither 0 nor 64 or more",
                         "0 (from the link)");
  return hostChunkBytesForBeta((double)signlionParamCostBetaMBps());
}

int64_t hostChunkBytesForBeta(double betaMBps) {
  const double perMs = betaMBps * 1000;
  int64_t chunk = 128 << 10;
  while (chunk < (512 << 10) && 2 * chunk <= perMs) chunk *= 2;
  return chunk;
}

size_t hostSegmentElements() {
  static std::atomic<uint64_t> warnedEpoch{~0ull};
  // Less than one block of 64 elements is outside the declared range: the read kept the default.
  return (size_t)(signlionParamHostSegment() / 64 * 64);
}

}  // namespace host
}  // namespace signlion
