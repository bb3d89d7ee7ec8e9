#include "host/host_params.h"

#include "algo/cost_model.h"
#include "common/checks.h"

#include <atomic>

namespace signlion {
namespace host {

int64_t hostChunkBytes() {
  static std::atomic<bool> warned{false};
  const int64_t set = signlionParamHostChunkBytes();
  if (set != 0) return paramClamp(set, 64, int64_t{1} << 30, "HOST_CHUNK_BYTES", &warned);
  // A beta <= 0 is WARNed by the cost model, which keeps its default: so does this.
  const int64_t mbps = signlionParamCostBetaMBps();
  return hostChunkBytesForBeta(mbps > 0 ? (double)mbps : algo::CostParams().betaBytesPerUs);
}

int64_t hostChunkBytesForBeta(double betaMBps) {
  const double perMs = betaMBps * 1000;
  int64_t chunk = 128 << 10;
  while (chunk < (512 << 10) && 2 * chunk <= perMs) chunk *= 2;
  return chunk;
}

size_t hostSegmentElements() {
  static std::atomic<uint64_t> warnedEpoch{~0ull};
  int64_t v = signlionParamHostSegment();
  if (v < 64) {
    if (paramFirstWarning(&warnedEpoch))
      WARN("SIGNLION_HOST_SEGMENT=%lld is less than one block of 64 elements; using the default %lld", (long long)v,
           (long long)kDefaultHostSegment);
    v = kDefaultHostSegment;
  }
  return (size_t)(v / 64 * 64);
}

}  // namespace host
}  // namespace signlion
