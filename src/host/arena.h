// The host communicator's scratch memory: one 64-byte aligned buffer that
// every call carves into its counters, results and staging areas, registered
// once on every link comm. It only grows (to the largest segment seen, which
// SIGNLION_HOST_SEGMENT bounds), so a warm communicator neither allocates nor
// registers on the hot path.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "host/links.h"
#include "host/net.h"
#include "host/registrations.h"

namespace signlion {
namespace host {

class Arena {
 public:
  // Makes at least `bytes` available (contents are not kept when it grows).
  ncclResult_t reserve(size_t bytes, const Net& net, const Links& links);
  // Deregisters from every comm and frees the memory.
  void release(const Net& net);
  // Frees the memory of an arena whose comms are already closed (closing a
  // comm releases its registrations).
  void forget();
  ~Arena() { forget(); }
  char* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  // The registration of the arena on one of the link comms.
  void* mhandle(void* comm) const { return regs_.mhandle(comm); }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  Registrations regs_;
};

}  // namespace host
}  // namespace signlion
