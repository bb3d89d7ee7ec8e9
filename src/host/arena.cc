#include "host/arena.h"

#include <cstdlib>

#include "common/checks.h"

namespace signlion {
namespace host {

ncclResult_t Arena::reserve(size_t bytes, const Net& net, const Links& links) {
  if (bytes <= capacity_) return ncclSuccess;
  release(net);
  size_t want = bytes < (1u << 20) ? (1u << 20) : bytes + bytes / 4;  // some headroom: fewer regrowths
  void* p = nullptr;
  SYSCHECKRET(posix_memalign(&p, 64, want), "posix_memalign");
  base_ = static_cast<char*>(p);
  INFO(kSubsysAlloc, "host arena: %zu bytes", want);
  ncclResult_t res = regs_.add(net, links, base_, want);
  if (res != ncclSuccess) {
    release(net);  // all or nothing: a later call must not find it half registered
    return res;
  }
  capacity_ = want;  // usable only once registered on every comm
  return ncclSuccess;
}

void Arena::release(const Net& net) {
  regs_.release(net);
  forget();
}

void Arena::forget() {
  regs_.forget();
  free(base_);
  base_ = nullptr;
  capacity_ = 0;
}

}  // namespace host
}  // namespace signlion
