// Levelled logging in NCCL's style.
//
// SIGNLION_DEBUG=VERSION|WARN|INFO|TRACE picks the level (default WARN),
// SIGNLION_DEBUG_SUBSYS=INIT,NET,... (or ^NET to exclude, ALL) filters INFO and
// TRACE lines by subsystem, SIGNLION_DEBUG_FILE=path.%h.%p sends them to a file.
// Every line starts with "host:pid:tid signlion LEVEL". WARN always carries
// file:line. When a host (NCCL, through a net plugin's init) supplies its own
// logger, lines go there instead so they interleave with NCCL's.
#pragma once

#include <cstdarg>
#include <cstddef>

namespace signlion {

enum LogLevel { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };

// Subsystem bits. Values of the first ones match NCCL's ncclDebugLogSubSys so a
// mask can be forwarded to NCCL's logger unchanged.
enum LogSubsys : unsigned long {
  kSubsysInit = 0x1,
  kSubsysColl = 0x2,
  kSubsysP2p = 0x4,
  kSubsysShm = 0x8,
  kSubsysNet = 0x10,
  kSubsysGraph = 0x20,
  kSubsysTune = 0x40,
  kSubsysEnv = 0x80,
  kSubsysAlloc = 0x100,
  kSubsysBootstrap = 0x1000,
  kSubsysBits = 0x100000,
  kSubsysAlgo = 0x200000,
  kSubsysLion = 0x400000,
  kSubsysAll = ~0ul,
};

// Signature of NCCL's ncclDebugLogger_t, so a plugin can hand us NCCL's logger.
typedef void (*LogSink)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

// Route all log lines to sink (nullptr restores our own writer).
void logSetSink(LogSink sink);

// True when a line of this level and subsystem would be printed. Cheap after
// the first call: the environment is read once.
bool logEnabled(int level, unsigned long subsys);

void logMessage(int level, unsigned long subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// Re-read SIGNLION_DEBUG* (tests use this after setenv).
void logReinit();

}  // namespace signlion

#define WARN(...) ::signlion::logMessage(::signlion::kLogWarn, ::signlion::kSubsysAll, __FILE__, __LINE__, __VA_ARGS__)

#define INFO(SUBSYS, ...)                                                                 \
  do {                                                                                    \
    if (::signlion::logEnabled(::signlion::kLogInfo, (SUBSYS)))                           \
      ::signlion::logMessage(::signlion::kLogInfo, (SUBSYS), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define TRACE(SUBSYS, ...)                                                                 \
  do {                                                                                     \
    if (::signlion::logEnabled(::signlion::kLogTrace, (SUBSYS)))                           \
      ::signlion::logMessage(::signlion::kLogTrace, (SUBSYS), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
