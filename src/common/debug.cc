#include "common/debug.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <cerrno>
#include <string>
#include <vector>

#include "common/param.h"

namespace signlion {
namespace {

struct LogState {
  int level = kLogWarn;
  unsigned long mask = kSubsysAll;
  FILE* out = stderr;
  char host[64] = "unknown";
  int pid = 0;
};

std::mutex gInitMutex;
std::atomic<bool> gInitialized{false};
std::atomic<LogSink> gSink{nullptr};
LogState gState;

struct SubsysName {
  const char* name;
  unsigned long bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kSubsysInit}, {"COLL", kSubsysColl},   {"P2P", kSubsysP2p},   {"SHM", kSubsysShm},
    {"NET", kSubsysNet},   {"GRAPH", kSubsysGraph}, {"TUNING", kSubsysTune}, {"ENV", kSubsysEnv},
    {"ALLOC", kSubsysAlloc}, {"BOOTSTRAP", kSubsysBootstrap}, {"BITS", kSubsysBits}, {"ALGO", kSubsysAlgo},
    {"LION", kSubsysLion}, {"ALL", kSubsysAll},
};

// A bad value found while reading the variables, WARNed once the logger is up
// (param.h's rule: the variable, the value, why, the default kept).
struct BadValue {
  std::string name, value, why, deflt;
};
std::vector<BadValue> gInitProblems;

int parseLevel(const char* s) {
  if (s == nullptr || *s == '\0') return kLogWarn;
  if (strcasecmp(s, "VERSION") == 0) return kLogVersion;
  if (strcasecmp(s, "WARN") == 0) return kLogWarn;
  if (strcasecmp(s, "INFO") == 0) return kLogInfo;
  if (strcasecmp(s, "ABORT") == 0) return kLogAbort;
  if (strcasecmp(s, "TRACE") == 0) return kLogTrace;
  if (strcasecmp(s, "NONE") == 0) return kLogNone;
  gInitProblems.push_back({"DEBUG", s, "is not one of NONE, VERSION, WARN, INFO, TRACE", "WARN"});
  return kLogWarn;
}

// "INIT,NET" enables those; "^NET" enables everything but NET (NCCL's syntax).
unsigned long parseMask(const char* s) {
  if (s == nullptr || *s == '\0') return kSubsysAll;
  bool invert = (s[0] == '^');
  if (invert) s++;
  unsigned long mask = 0;
  std::string list(s);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string tok = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    bool known = false;
    for (const auto& n : kSubsysNames)
      if (strcasecmp(tok.c_str(), n.name) == 0) mask |= n.bit, known = true;
    // An unknown name keeps the whole default: a typo must not hide a subsystem silently.
    if (!known && !tok.empty()) {
      gInitProblems.push_back({"DEBUG_SUBSYS", (invert ? "^" : "") + list,
                               "names no subsystem " + tok, "ALL"});
      return kSubsysAll;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

// Expands %h (hostname) and %p (pid) in SIGNLION_DEBUG_FILE.
FILE* openLogFile(const char* pattern, const char* host, int pid) {
  std::string path;
  for (const char* c = pattern; *c; c++) {
    if (c[0] == '%' && c[1] == 'h') { path += host; c++; }
    else if (c[0] == '%' && c[1] == 'p') { path += std::to_string(pid); c++; }
    else path += *c;
  }
  FILE* f = fopen(path.c_str(), "w");
  if (f != nullptr) setvbuf(f, nullptr, _IOLBF, 0);
  if (f == nullptr)
    gInitProblems.push_back(
        {"DEBUG_FILE", pattern, "cannot be opened for writing (" + path + ": " + strerror(errno) + ")", "stderr"});
  return f != nullptr ? f : stderr;
}

void initLocked() {
  gInitProblems.clear();
  gState.level = parseLevel(getenv("SIGNLION_DEBUG"));
  gState.mask = parseMask(getenv("SIGNLION_DEBUG_SUBSYS"));
  if (gethostname(gState.host, sizeof(gState.host)) != 0) strcpy(gState.host, "unknown");
  gState.host[sizeof(gState.host) - 1] = '\0';
  char* dot = strchr(gState.host, '.');
  if (dot) *dot = '\0';
  gState.pid = getpid();
  if (gState.out != stderr && gState.out != nullptr) fclose(gState.out);
  const char* file = getenv("SIGNLION_DEBUG_FILE");
  gState.out = (file && *file) ? openLogFile(file, gState.host, gState.pid) : stderr;
  gInitialized.store(true, std::memory_order_release);
  // Now that lines can be written.
  for (const BadValue& b : gInitProblems)
    paramWarnKeepDefault(b.name.c_str(), b.value.c_str(), b.why.c_str(), b.deflt.c_str());
}

void ensureInit() {
  if (gInitialized.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(gInitMutex);
  if (!gInitialized.load(std::memory_order_relaxed)) initLocked();
}

const char* levelName(int level) {
  switch (level) {
    case kLogVersion: return "VERSION";
    case kLogWarn: return "WARN";
    case kLogInfo: return "INFO";
    case kLogAbort: return "ABORT";
    case kLogTrace: return "TRACE";
    default: return "LOG";
  }
}

}  // namespace

void logSetSink(LogSink sink) { gSink.store(sink, std::memory_order_release); }

bool logEnabled(int level, unsigned long subsys) {
  if (gSink.load(std::memory_order_acquire) != nullptr) return true;  // the host filters
  ensureInit();
  if (level > gState.level) return false;
  return level <= kLogWarn || (gState.mask & subsys) != 0;
}

void logReinit() {
  std::lock_guard<std::mutex> lock(gInitMutex);
  initLocked();
}

void logMessage(int level, unsigned long subsys, const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);

  LogSink sink = gSink.load(std::memory_order_acquire);
  if (sink != nullptr) {
    // NCCL prefixes host:pid:tid itself; hand it the plain text.
    sink(level, subsys, file, line, "signlion %s", msg);
    return;
  }
  if (!logEnabled(level, subsys)) return;
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  long tid = syscall(SYS_gettid);
  if (level == kLogWarn) {
    fprintf(gState.out, "%s:%d:%ld [signlion] %s %s:%d %s\n", gState.host, gState.pid, tid, levelName(level), base,
            line, msg);
  } else {
    fprintf(gState.out, "%s:%d:%ld [signlion] %s %s\n", gState.host, gState.pid, tid, levelName(level), msg);
  }
}

}  // namespace signlion
