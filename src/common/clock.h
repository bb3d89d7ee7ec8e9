// The one monotonic clock every timeout and timing in signlion reads.
#pragma once

#include <chrono>
#include <cstdint>

namespace signlion {

inline int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t nowMs() { return nowUs() / 1000; }

}  // namespace signlion
