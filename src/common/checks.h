// The one family of check macros. Every call that can fail goes through one of
// these; CUDA and system errors are turned into ncclResult_t here, at the
// boundary, with file:line in the WARN line.
#pragma once

#include <cerrno>
#include <cstring>

#include "common/debug.h"
#include "nccl_sign.h"

// Propagate a failed ncclResult_t to the caller.
#define NCCLCHECK(call)                                                            \
  do {                                                                             \
    ncclResult_t res_ = (call);                                                    \
    if (res_ != ncclSuccess && res_ != ncclInProgress) {                           \
      INFO(::signlion::kSubsysAll, "%s:%d -> %d", __FILE__, __LINE__, (int)res_); \
      return res_;                                                                 \
    }                                                                              \
  } while (0)

// Record a failed ncclResult_t in RES and jump to LABEL (cleanup path).
#define NCCLCHECKGOTO(call, RES, label)                                           \
  do {                                                                            \
    (RES) = (call);                                                               \
    if ((RES) != ncclSuccess && (RES) != ncclInProgress) {                        \
      INFO(::signlion::kSubsysAll, "%s:%d -> %d", __FILE__, __LINE__, (int)(RES)); \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

// A POSIX call that returns -1 and sets errno on failure.
#define SYSCHECK(call, name)                                                            \
  do {                                                                                  \
    int ret_;                                                                           \
    do {                                                                                \
      ret_ = (call);                                                                    \
    } while (ret_ == -1 && errno == EINTR);                                             \
    if (ret_ == -1) {                                                                   \
      WARN("Call to " name " failed: %s", strerror(errno));                             \
      return ncclSystemError;                                                           \
    }                                                                                   \
  } while (0)

// A call that returns an error code directly (pthread_*, posix_memalign).
#define SYSCHECKRET(call, name)                                      \
  do {                                                               \
    int err_ = (call);                                               \
    if (err_ != 0) {                                                 \
      WARN("Call to " name " failed: %s", strerror(err_));           \
      return ncclSystemError;                                        \
    }                                                                \
  } while (0)

// Argument validation at API entry: WARN naming the argument, ncclInvalidArgument.
#define ARGCHECK(cond, func, argname, fmt, ...)                                      \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      WARN("%s: invalid argument '%s': " fmt, func, argname, ##__VA_ARGS__);         \
      return ncclInvalidArgument;                                                    \
    }                                                                                \
  } while (0)

