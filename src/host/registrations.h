// One buffer registered on every link comm of a host communicator (ncclNet
// regMr), all or nothing, with the lookup of its handle per comm: what the
// arena and the call headers' slots both need.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "host/links.h"
#include "host/net.h"

namespace signlion {
namespace host {

class Registrations {
 public:
  // Registers [base, base + bytes) on the send and receive comm of every
  // peer; on an error nothing stays registered.
  ncclResult_t add(const Net& net, const Links& links, void* base, size_t bytes);
  // Deregisters from every comm (still open).
  void release(const Net& net);
  // Forgets registrations whose comms are closed (closing released them).
  void forget() { regs_.clear(); }
  // The registration on one of the link comms (nullptr if none).
  void* mhandle(void* comm) const;

 private:
  std::vector<std::pair<void*, void*>> regs_;  // (comm, mhandle)
};

}  // namespace host
}  // namespace signlion
