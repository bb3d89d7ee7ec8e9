// Which opaque handles of the C API (ncclSignComm_t, ncclSignLion_t) are
// live: a handle is checked against this set before anything reads through
// it, so a destroyed handle, or a pointer that never was one
// ((ncclSignComm_t)0x1000), is ncclInvalidArgument with a WARN instead of a
// read of freed or unmapped memory. The set holds addresses only: a handle
// used after its destroy whose memory a new object of the same kind has
// taken is that new object (the docs say so); anything else is detected.
#pragma once

#include <mutex>
#include <unordered_set>

namespace signlion {

class LiveHandles {
 public:
  // Once the object is fully made, before its handle is returned. False
  // (nothing added) only when the set cannot grow (out of memory).
  bool add(const void* handle) noexcept;
  // One lock and one hash lookup; allocates nothing.
  bool contains(const void* handle) const;
  // Takes the handle out before its memory is freed. True when it was live:
  // of two destroys of one handle, one wins and the other sees no handle.
  bool remove(const void* handle);

 private:
  mutable std::mutex mu_;
  std::unordered_set<const void*> live_;
};

}  // namespace signlion
