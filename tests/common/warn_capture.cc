#include "common/warn_capture.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/debug.h"

namespace signlion {
namespace test {
namespace {

std::mutex gMu;
std::vector<std::string> gLines;

void sink(int level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != kLogWarn) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(gMu);
  gLines.push_back(line);
}

}  // namespace

WarnCapture::WarnCapture() {
  {
    std::lock_guard<std::mutex> lock(gMu);
    gLines.clear();
  }
  logSetSink(sink);
}

WarnCapture::~WarnCapture() { logSetSink(nullptr); }

int WarnCapture::count() const {
  std::lock_guard<std::mutex> lock(gMu);
  return static_cast<int>(gLines.size());
}

std::vector<std::string> WarnCapture::lines() const {
  std::lock_guard<std::mutex> lock(gMu);
  return gLines;
}

int WarnCapture::countContaining(const char* needle) const {
  std::lock_guard<std::mutex> lock(gMu);
  int n = 0;
  for (const std::string& l : gLines) n += strstr(l.c_str(), needle) != nullptr ? 1 : 0;
  return n;
}

}  // namespace test
}  // namespace signlion
