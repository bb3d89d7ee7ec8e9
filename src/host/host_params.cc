#include "host/host_params.h"

#include <atomic>

namespace signlion {
namespace host {

int64_t hostChunkBytes() {
  static std::atomic<bool> warned{false};
  return paramClamp(signlionParamHostChunkBytes(), 64, int64_t{1} << 30, "HOST_CHUNK_BYTES", &warned);
}

}  // namespace host
}  // namespace signlion
