// Whether two byte ranges share a byte: what deregMr asks of every request in
// flight on a comm against the region it deregisters (socket and UCX).
#pragma once

#include <cstddef>

namespace signlion {
namespace net {

// [p, p + n) and [base, base + size) overlap; an empty range (or a null p,
// which NCCL passes only with n = 0) overlaps nothing.
inline bool rangesOverlap(const char* p, size_t n, const char* base, size_t size) {
  return p != nullptr && n > 0 && size > 0 && p < base + size && base < p + n;
}

}  // namespace net
}  // namespace signlion
