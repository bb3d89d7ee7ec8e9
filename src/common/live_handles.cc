#include "common/live_handles.h"

#include <new>

namespace signlion {

bool LiveHandles::add(const void* handle) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    live_.insert(handle);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

bool LiveHandles::contains(const void* handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(handle) != 0;
}

bool LiveHandles::remove(const void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.erase(handle) != 0;
}

}  // namespace signlion
