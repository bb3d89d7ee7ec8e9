/*************************************************************************
 * ncclNet v8 (NCCL 2.20 .. 2.23): sizes are int; init takes only a logger.
 ************************************************************************/
#ifndef SIGNLION_NET_V8_H_
#define SIGNLION_NET_V8_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char* name;            /* interface name, for logs */
  char* pciPath;         /* sysfs path of the PCI device, or NULL */
  uint64_t guid;         /* unique per NIC */
  int ptrSupport;        /* NCCL_PTR_* mask */
  int regIsGlobal;       /* 1: an mhandle is valid on every comm */
  int speed;             /* Mbit/s */
  int port;
  float latency;         /* microseconds; 0 = unknown */
  int maxComms;
  int maxRecvs;          /* largest n accepted by irecv */
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

/* Function order is the ABI; do not reorder. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  /* Fills handle (<= NCCL_NET_HANDLE_MAXSIZE bytes) for the peer to connect to. */
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  /* Non-blocking: success with *sendComm == NULL means "call again". */
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm);
  /* Non-blocking like connect. */
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                              void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  /* *request == NULL on success means "not posted, retry later". */
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  /* sizes (may be NULL): bytes sent, or one entry per grouped receive. */
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle); /* may be NULL */
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);         /* may be NULL */
} ncclNet_v8_t;

#ifdef __cplusplus
}
#endif

#endif
