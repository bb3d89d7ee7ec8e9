// Reading a fuzzer's input as the fixed-size messages a peer sends: a
// message shorter than its struct is what a receiver never sees (it waits for
// the whole struct), so the missing tail reads as zeros.
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/debug.h"

namespace signlion {
namespace fuzz {

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  // The next sizeof(T) bytes as a T (zero-filled past the end).
  template <typename T>
  T take() {
    T v;
    memset(&v, 0, sizeof(v));
    size_t n = left_ < sizeof(T) ? left_ : sizeof(T);
    if (n > 0) memcpy(&v, p_, n);
    p_ += n;
    left_ -= n;
    return v;
  }
  const uint8_t* data() const { return p_; }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

// Keeps the logger quiet: every rejected input logs a WARN, and a fuzzer runs
// millions of them. The lines are still formatted (into a buffer that is
// dropped), so a format that misreads a peer's value is still caught.
// SIGNLION_DEBUG set in the environment shows them.
inline void formatAndDrop(int, unsigned long, const char*, int, const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
}
inline void quietLogs() {
  static const bool once = [] {
    if (getenv("SIGNLION_DEBUG") == nullptr) logSetSink(formatAndDrop);
    return true;
  }();
  (void)once;
}

}  // namespace fuzz
}  // namespace signlion
