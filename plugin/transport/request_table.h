// A comm's requests: a fixed table of N (NCCL_NET_MAX_REQUESTS), so a warm
// comm never allocates and a request pointer handed to NCCL stays valid
// until test() reports it done. Transport-independent: Req is the
// transport's request type, which must have a `bool used` member (the table
// owns it; test() reads it to refuse a pointer that is not outstanding).
#pragma once

#include <cstddef>

namespace signlion {
namespace net {

template <typename Req, size_t N>
class RequestTable {
 public:
  static constexpr size_t kCapacity = N;

  // A free request, marked used; nullptr when all N are outstanding (ncclNet
  // then returns success with no request, and NCCL retries).
  Req* acquire() {
    for (Req& r : reqs_) {
      if (!r.used) {
        r.used = true;
        return &r;
      }
    }
    return nullptr;
  }
  void release(Req* r) { r->used = false; }
  // Whether p is one of this table's requests and outstanding.
  bool outstanding(const void* p) const {
    for (const Req& r : reqs_)
      if (&r == p) return r.used;
    return false;
  }
  Req* begin() { return reqs_; }
  Req* end() { return reqs_ + N; }

 private:
  Req reqs_[N]{};
};

}  // namespace net
}  // namespace signlion
