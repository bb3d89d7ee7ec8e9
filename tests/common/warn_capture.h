// The WARN lines signlion logs while a WarnCapture is alive, from any thread
// (ranks as threads warn concurrently), for tests that check that bad input
// is named, and named once.
#pragma once

#include <string>
#include <vector>

namespace signlion {
namespace test {

// Routes signlion's log to itself while alive; one at a time.
class WarnCapture {
 public:
  WarnCapture();
  ~WarnCapture();
  WarnCapture(const WarnCapture&) = delete;
  WarnCapture& operator=(const WarnCapture&) = delete;

  int count() const;
  std::vector<std::string> lines() const;
  // WARN lines that contain `needle`.
  int countContaining(const char* needle) const;
};

}  // namespace test
}  // namespace signlion
