#include "common/param.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/debug.h"

namespace signlion {

std::atomic<uint64_t> gParamEpoch{0};

void paramWarnKeepDefault(const char* name, const char* value, const char* why, const char* deflt) {
  WARN("SIGNLION_%s=%s %s; keeping the default %s", name, value, why, *deflt != '\0' ? deflt : "(unset)");
}

int64_t paramReadInt(const char* name, int64_t deflt, int64_t lo, int64_t hi, bool* usable) {
  if (usable != nullptr) *usable = false;
  std::string var = std::string("SIGNLION_") + name;
  const char* s = getenv(var.c_str());
  if (s == nullptr || *s == '\0') return deflt;
  const std::string keep = std::to_string(deflt);
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(s, &end, 0);
  int64_t scale = 1;
  if (errno == 0 && end != s) {
    switch (*end) {
      case 'k': case 'K': scale = 1ll << 10; end++; break;
      case 'm': case 'M': scale = 1ll << 20; end++; break;
      case 'g': case 'G': scale = 1ll << 30; end++; break;
      default: break;
    }
  }
  if (errno != 0 || end == s || *end != '\0' || (v != 0 && (v > INT64_MAX / scale || v < INT64_MIN / scale))) {
    paramWarnKeepDefault(name, s, "is not an integer (decimal, 0x hex, K/M/G suffixes)", keep.c_str());
    return deflt;
  }
  const int64_t value = v * scale;
  if (value < lo || value > hi) {
    const std::string why = "is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    paramWarnKeepDefault(name, s, why.c_str(), keep.c_str());
    return deflt;
  }
  INFO(kSubsysEnv, "%s set by environment to %lld", var.c_str(), (long long)value);
  if (usable != nullptr) *usable = true;
  return value;
}

std::string paramReadString(const char* name, const char* deflt) {
  std::string var = std::string("SIGNLION_") + name;
  const char* s = getenv(var.c_str());
  if (s == nullptr) return deflt ? deflt : "";
  INFO(kSubsysEnv, "%s set by environment to %s", var.c_str(), s);
  return s;
}

std::string paramReadChoice(const char* name, const char* deflt, const char* choices) {
  const char* s = getenv((std::string("SIGNLION_") + name).c_str());
  if (s == nullptr || *s == '\0') return deflt;
  std::string list = choices;
  for (size_t at = 0; at <= list.size();) {
    size_t comma = std::min(list.find(',', at), list.size());
    if (strcasecmp(list.substr(at, comma - at).c_str(), s) == 0) {
      INFO(kSubsysEnv, "SIGNLION_%s set by environment to %s", name, s);
      return s;
    }
    at = comma + 1;
  }
  for (size_t c = 0; (c = list.find(',', c)) != std::string::npos;) list.replace(c, 1, ", "), c += 2;
  paramWarnKeepDefault(name, s, ("is not one of " + list).c_str(), deflt);
  return deflt;
}

bool paramFirstWarning(std::atomic<uint64_t>* warnedEpoch) {
  const uint64_t epoch = gParamEpoch.load(std::memory_order_acquire);
  return warnedEpoch->exchange(epoch) != epoch;
}

void paramResetCache() { gParamEpoch.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace signlion
