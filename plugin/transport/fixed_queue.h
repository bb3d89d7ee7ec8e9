// A FIFO of at most N elements in a fixed array: what the transport's
// per-comm queues hold is bounded by the requests a comm may have in flight
// (kSocketMaxRequests), so a warm comm never allocates. References to queued
// elements stay valid while they are queued, as with std::deque.
#pragma once

#include <cstddef>

namespace signlion {
namespace net {

template <typename T, size_t N>
class FixedQueue {
 public:
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == N; }
  size_t size() const { return size_; }
  T& front() { return items_[head_]; }
  const T& front() const { return items_[head_]; }
  // The caller keeps size() < N (the request table bounds it); pushing onto a
  // full queue is a bug, reported by returning false.
  bool push_back(const T& v) {
    if (size_ == N) return false;
    items_[(head_ + size_) % N] = v;
    size_++;
    return true;
  }
  void pop_front() {
    head_ = (head_ + 1) % N;
    size_--;
  }

 private:
  T items_[N];
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace net
}  // namespace signlion
