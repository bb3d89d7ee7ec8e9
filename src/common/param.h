// Tunables: every SIGNLION_* environment variable is declared once, with its
// default, through SIGNLION_PARAM / SIGNLION_STRING_PARAM, and read through a
// cached accessor. `grep -r SIGNLION_PARAM src plugin` lists every knob;
// docs/PARAMETERS.md documents each.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace signlion {

// Parses SIGNLION_<name> as an integer (decimal, 0x hex, K/M/G suffixes);
// a malformed value logs a WARN and yields the default.
int64_t paramReadInt(const char* name, int64_t deflt);

// Whether SIGNLION_<name> is set (non-empty): a default learned at run time
// stands only where the variable does not.
bool paramIsSet(const char* name);

// SIGNLION_<name> or deflt when unset.
std::string paramReadString(const char* name, const char* deflt);

// value within [lo, hi]. When it is not, the nearest bound, after a WARN
// naming SIGNLION_<name> (once per `warned` flag, so a hot path may call it).
int64_t paramClamp(int64_t value, int64_t lo, int64_t hi, const char* name, std::atomic<bool>* warned);

// True at the first call with this `warnedEpoch` since the cache was last
// reset: one WARN per value read, so a test, or a process that resets the
// cache, hears about a new bad value. Start it at ~0ull.
bool paramFirstWarning(std::atomic<uint64_t>* warnedEpoch);

// Forget cached values (tests set variables after first use).
void paramResetCache();

// Bumped by paramResetCache; accessors re-read when it changes.
extern std::atomic<uint64_t> gParamEpoch;

}  // namespace signlion

// Declares int64_t signlionParam<name>(), reading SIGNLION_<env> once.
#define SIGNLION_PARAM(name, env, deflt)                                           \
  inline int64_t signlionParam##name() {                                           \
    static std::atomic<uint64_t> epoch{~0ull};                                     \
    static std::atomic<int64_t> value{0};                                          \
    uint64_t now = ::signlion::gParamEpoch.load(std::memory_order_acquire);        \
    if (epoch.load(std::memory_order_acquire) != now) {                            \
      value.store(::signlion::paramReadInt(env, (deflt)), std::memory_order_relaxed); \
      epoch.store(now, std::memory_order_release);                                 \
    }                                                                              \
    return value.load(std::memory_order_relaxed);                                  \
  }

// Declares std::string signlionParam<name>(), reading SIGNLION_<env> once.
#define SIGNLION_STRING_PARAM(name, env, deflt)                                    \
  inline std::string signlionParam##name() {                                       \
    static std::atomic<uint64_t> epoch{~0ull};                                     \
    static std::string value;                                                      \
    static std::atomic_flag lock = ATOMIC_FLAG_INIT;                               \
    while (lock.test_and_set(std::memory_order_acquire)) {}                        \
    uint64_t now = ::signlion::gParamEpoch.load(std::memory_order_acquire);        \
    if (epoch.load(std::memory_order_relaxed) != now) {                            \
      value = ::signlion::paramReadString(env, (deflt));                           \
      epoch.store(now, std::memory_order_relaxed);                                 \
    }                                                                              \
    std::string copy = value;                                                      \
    lock.clear(std::memory_order_release);                                         \
    return copy;                                                                   \
  }
