#include "host/registrations.h"

#include "common/checks.h"

namespace signlion {
namespace host {

ncclResult_t Registrations::add(const Net& net, const Links& links, void* base, size_t bytes) {
  for (int peer : links.peers()) {
    for (void* comm : {links.peer(peer).sendComm, links.peer(peer).recvComm}) {
      void* mh = nullptr;
      ncclResult_t res = net.api().regMr(comm, base, bytes, NCCL_PTR_HOST, &mh);
      if (res != ncclSuccess) {
        release(net);
        return res;
      }
      regs_.emplace_back(comm, mh);
    }
  }
  return ncclSuccess;
}

void Registrations::release(const Net& net) {
  for (auto& r : regs_) net.api().deregMr(r.first, r.second);
  regs_.clear();
}

void* Registrations::mhandle(void* comm) const {
  for (const auto& r : regs_)
    if (r.first == comm) return r.second;
  return nullptr;
}

}  // namespace host
}  // namespace signlion
