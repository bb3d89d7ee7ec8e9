#include "lion/lion_params.h"

#include <atomic>
#include <string>

#include "common/debug.h"

namespace signlion {
namespace lion {

size_t lionChunkElements() {
  static std::atomic<uint64_t> warnedEpoch{~0ull};
  int64_t v = signlionParamLionChunk();
  if (v != 0 && v < 64) {
    if (paramFirstWarning(&warnedEpoch))
      paramWarnKeepDefault("LION_CHUNK", std::to_string(v).c_str(),
                           "is neither 0 (no pipeline) nor one block of 64 elements or more",
                           std::to_string(kDefaultLionChunk).c_str());
    v = kDefaultLionChunk;
  }
  return (size_t)(v / 64 * 64);
}

}  // namespace lion
}  // namespace signlion
