#include "common/param.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/debug.h"

namespace signlion {

std::atomic<uint64_t> gParamEpoch{0};

int64_t paramReadInt(const char* name, int64_t deflt) {
  std::string var = std::string("SIGNLION_") + name;
  const char* s = getenv(var.c_str());
  if (s == nullptr || *s == '\0') return deflt;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(s, &end, 0);
  if (errno != 0 || end == s) {
    WARN("Invalid value '%s' for %s, using default %lld", s, var.c_str(), (long long)deflt);
    return deflt;
  }
  int64_t scale = 1;
  switch (*end) {
    case 'k': case 'K': scale = 1ll << 10; end++; break;
    case 'm': case 'M': scale = 1ll << 20; end++; break;
    case 'g': case 'G': scale = 1ll << 30; end++; break;
    default: break;
  }
  if (*end != '\0') {
    WARN("Invalid value '%s' for %s, using default %lld", s, var.c_str(), (long long)deflt);
    return deflt;
  }
  INFO(kSubsysEnv, "%s set by environment to %lld", var.c_str(), v * scale);
  return v * scale;
}

bool paramIsSet(const char* name) {
  const char* s = getenv((std::string("SIGNLION_") + name).c_str());
  return s != nullptr && *s != '\0';
}

std::string paramReadString(const char* name, const char* deflt) {
  std::string var = std::string("SIGNLION_") + name;
  const char* s = getenv(var.c_str());
  if (s == nullptr) return deflt ? deflt : "";
  INFO(kSubsysEnv, "%s set by environment to %s", var.c_str(), s);
  return s;
}

int64_t paramClamp(int64_t value, int64_t lo, int64_t hi, const char* name, std::atomic<bool>* warned) {
  if (value >= lo && value <= hi) return value;
  int64_t clamped = std::clamp(value, lo, hi);
  if (!warned->exchange(true))
    WARN("SIGNLION_%s=%lld is outside [%lld, %lld]; using %lld", name, (long long)value, (long long)lo,
         (long long)hi, (long long)clamped);
  return clamped;
}

bool paramFirstWarning(std::atomic<uint64_t>* warnedEpoch) {
  const uint64_t epoch = gParamEpoch.load(std::memory_order_acquire);
  return warnedEpoch->exchange(epoch) != epoch;
}

void paramResetCache() { gParamEpoch.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace signlion
