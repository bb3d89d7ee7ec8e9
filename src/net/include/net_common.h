/*************************************************************************
 * signlion: the parts of NCCL's network-plugin interface shared by every
 * version we speak (v8..v12). Written from NCCL's published ext-net
 * interface; only the binary layout must match, names follow NCCL so that
 * readers who know NCCL recognise them.
 ************************************************************************/
#ifndef SIGNLION_NET_COMMON_H_
#define SIGNLION_NET_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl_sign.h" /* ncclResult_t, ncclDataType_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The opaque connection handle exchanged between ranks out of band. */
#define NCCL_NET_HANDLE_MAXSIZE 128

/* Upper bound NCCL accepts for maxP2pBytes / maxCollBytes. */
#define NCCL_MAX_NET_SIZE_BYTES (1ll << 40)

/* Outstanding requests NCCL posts per comm at most. */
#define NCCL_NET_MAX_REQUESTS 32

/* Memory kinds, used in ptrSupport and regMr's type. */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* NCCL's log levels, same values as signlion::LogLevel. */
#ifndef SIGNLION_HAVE_NCCL_DEBUG_TYPES
#define SIGNLION_HAVE_NCCL_DEBUG_TYPES
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* NCCL hands this logger to the plugin's init. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/* Profiler hook passed to init from v10 on; we accept it and never call it. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);
#endif

/* Network offload: we are a host-only transport (NCCL_NET_DEVICE_HOST). */
typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

/* Device-side handle of a connection (unused by host transports; NCCL passes
 * NULL or a pointer we leave alone). Identical in v7..v12. */
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;

#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1

#ifdef __cplusplus
}
#endif

#endif
