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
  for (int peer : links.peers()) {
    for (void* comm : {links.peer(peer).sendComm, links.peer(peer).recvComm}) {
      void* mh = nullptr;
      ncclResult_t res = net.api().regMr(comm, base_, want, NCCL_PTR_HOST, &mh);
      if (res != ncclSuccess) {
        release(net);  // all or nothing: a later call must not find it half registered
        return res;
      }
      regs_.emplace_back(comm, mh);
    }
  }
  capacity_ = want;  // usable only once registered on every comm
  return ncclSuccess;
}

void Arena::release(const Net& net) {
  for (auto& r : regs_) net.api().deregMr(r.first, r.second);
  forget();
}

void Arena::forget() {
  regs_.clear();
  free(base_);
  base_ = nullptr;
  capacity_ = 0;
}

void* Arena::mhandle(void* comm) const {
  for (const auto& r : regs_)
    if (r.first == comm) return r.second;
  return nullptr;
}

}  // namespace host
}  // namespace signlion
