// The connects a transport has in progress in this process, by the pointer it
// keeps in the connector-private tail of a listen handle.
//
// ncclNet's connect() is called again with the same handle until it returns a
// comm, so a transport keeps its half-made comm in the handle itself (NCCL's
// own socket transport does the same). But the handle came from the peer,
// through the application's bootstrap: a listen() writes zeros there, and any
// other value from the wire is not a pointer this process made. connect()
// looks the pointer up here before using it, so such a handle is an
// ncclInvalidArgument, not a wild dereference.
#pragma once

#include <mutex>
#include <unordered_set>

namespace signlion {
namespace net {

class ConnectRegistry {
 public:
  void add(const void* comm) {
    std::lock_guard<std::mutex> lk(mu_);
    live_.insert(comm);
  }
  void remove(const void* comm) {
    std::lock_guard<std::mutex> lk(mu_);
    live_.erase(comm);
  }
  bool contains(const void* comm) const {
    std::lock_guard<std::mutex> lk(mu_);
    return live_.count(comm) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_set<const void*> live_;
};

}  // namespace net
}  // namespace signlion
