// Tunables: every SIGNLION_* environment variable is declared once, with its
// default, through SIGNLION_PARAM / SIGNLION_STRING_PARAM, and read through a
// cached accessor. `grep -r SIGNLION_PARAM src plugin` lists every knob;
// docs/PARAMETERS.md documents each.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace signlion {

// The one rule for a bad value, applied here for every variable: a value
// that is malformed, out of range or not one of a variable's choices logs a
// WARN naming the variable and the value and keeps the default (the job
// runs, as NCCL does for its NCCL_* integers). The exceptions are values
// that name what to use, where a default would silently use something else:
// an interface (SIGNLION_SOCKET_IFNAME), a port range, a net plugin, a
// library; those fail the entry point that needs them, naming the variable.
// docs/PARAMETERS.md states the rule.

// Parses SIGNLION_<name> as an integer (decimal, 0x hex, K/M/G suffixes)
// within [lo, hi]; a malformed or out-of-range value logs a WARN (once per
// value read) and yields the default.
// *usable (when given) says whether the value came from the environment.
int64_t paramReadInt(const char* name, int64_t deflt, int64_t lo, int64_t hi, bool* usable = nullptr);

// The rule's WARN: "SIGNLION_<name>=<value> <why>; keeping the default <deflt>".
void paramWarnKeepDefault(const char* name, const char* value, const char* why, const char* deflt);

// SIGNLION_<name> when it is one of `choices` (comma-separated, case
// insensitive), else (after paramWarnKeepDefault) deflt; unset or empty: deflt.
std::string paramReadChoice(const char* name, const char* deflt, const char* choices);

// SIGNLION_<name> or deflt when unset.
std::string paramReadString(const char* name, const char* deflt);

// True at the first call with this `warnedEpoch` since the cache was last
// reset: one WARN per value read, so a test, or a process that resets the
// cache, hears about a new bad value. Start it at ~0ull.
bool paramFirstWarning(std::atomic<uint64_t>* warnedEpoch);

// Forget cached values (tests set variables after first use).
void paramResetCache();

// Bumped by paramResetCache; accessors re-read when it changes.
extern std::atomic<uint64_t> gParamEpoch;

}  // namespace signlion

// Declares int64_t signlionParam<name>(), reading SIGNLION_<env> once; a
// value outside [lo, hi] keeps the default (paramReadInt). And
// signlionParam<name>IsSet(): whether the environment gave the value (set,
// well formed and in range), for a default learned at run time.
#define SIGNLION_PARAM(name, env, deflt, lo, hi)                                    \
  inline int64_t signlionParam##name##Read(bool* isSet) {                          \
    static std::atomic<uint64_t> epoch{~0ull};                                     \
    static std::atomic<int64_t> value{0};                                          \
    static std::atomic<bool> set{false};                                           \
    uint64_t now = ::signlion::gParamEpoch.load(std::memory_order_acquire);        \
    if (epoch.load(std::memory_order_acquire) != now) {                            \
      bool usable = false;                                                         \
      value.store(::signlion::paramReadInt(env, (deflt), (lo), (hi), &usable),     \
                  std::memory_order_relaxed);                                      \
      set.store(usable, std::memory_order_relaxed);                                \
      epoch.store(now, std::memory_order_release);                                 \
    }                                                                              \
    if (isSet != nullptr) *isSet = set.load(std::memory_order_relaxed);            \
    return value.load(std::memory_order_relaxed);                                  \
  }                                                                                \
  inline int64_t signlionParam##name() { return signlionParam##name##Read(nullptr); } \
  inline bool signlionParam##name##IsSet() {                                       \
    bool set = false;                                                              \
    signlionParam##name##Read(&set);                                               \
    return set;                                                                    \
  }

// Declares std::string signlionParam<name>(), reading SIGNLION_<env> once.
#define SIGNLION_STRING_PARAM(name, env, deflt) SIGNLION_STRING_PARAM_READ(name, paramReadString(env, (deflt)))

// Declares std::string signlionParam<name>(), reading SIGNLION_<env> once: one
// of `choices` ("a,b,c"), else the default after a WARN (paramReadChoice).
#define SIGNLION_CHOICE_PARAM(name, env, deflt, choices) \
  SIGNLION_STRING_PARAM_READ(name, paramReadChoice(env, (deflt), (choices)))

#define SIGNLION_STRING_PARAM_READ(name, read)                                     \
  inline std::string signlionParam##name() {                                       \
    static std::atomic<uint64_t> epoch{~0ull};                                     \
    static std::string value;                                                      \
    static std::atomic_flag lock = ATOMIC_FLAG_INIT;                               \
    while (lock.test_and_set(std::memory_order_acquire)) {}                        \
    uint64_t now = ::signlion::gParamEpoch.load(std::memory_order_acquire);        \
    if (epoch.load(std::memory_order_relaxed) != now) {                            \
      value = ::signlion::read;                                                    \
      epoch.store(now, std::memory_order_relaxed);                                 \
    }                                                                              \
    std::string copy = value;                                                      \
    lock.clear(std::memory_order_release);                                         \
    return copy;                                                                   \
  }
