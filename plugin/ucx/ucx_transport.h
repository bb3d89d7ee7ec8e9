// The UCX transport, version-neutral (ucx_net.cc dresses it as ncclNet).
//
// Design (docs/dev/PLUGIN_INTERNALS.md, "UCX transport"):
//   - one UCP context per process (created by the first init, kept until
//     exit: UCX's own threads must never outlive its code);
//   - two UCP workers per process, shared by every comm: the sending one
//     holds every send comm's endpoint, the receiving one every recv comm's
//     receives (one worker for both let UCX's endpoint matching join send
//     comms of opposite directions into one connection); each progress step
//     moves both, so one call moves every comm; every call into a worker
//     holds one process-wide mutex; after a comm ends uncleanly, comms of
//     its side made later get a fresh worker (ucx_comm.h, Global);
//   - a close with requests in flight returns once UCX is done with the
//     caller's buffers (waitForCallerBuffers; docs/dev/PLUGIN_INTERNALS.md, "Concurrency
//     and teardown");
//   - the send comm holds the only endpoint, to the receiving worker of the
//     recv side's process, made from the worker address the acceptor returns over the
//     TCP connection the listen handle points at (magic, version and random
//     secret checked there, as in the socket transport), with the recv
//     comm's 32-bit id; that connection stays open as the comm's out-of-band
//     liveness channel (ucx_liveness.h);
//   - transfers are UCP tag-matched sends and receives, the UCP tag being
//     the recv comm's id (high 32 bits) and the ncclNet tag (low 32), one
//     ucp_tag_recv per slot of a grouped receive matching all 64 bits. UCP's
//     matching rule on a worker is ncclNet's (transport/tag_matcher.h): a
//     message goes to the oldest posted receive holding its tag, messages of
//     one endpoint keep their order, unexpected ones are kept and claimed by
//     the next receive posted for their tag. With one sender per comm id the
//     rule holds per comm, and UCP moves large messages by rendezvous
//     (zero-copy on verbs) without our own chunking.
// Active messages were the alternative: they would need our own matching,
// staging copies and flow control on top, which UCP's tag layer already is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "common/debug.h"
#include "nccl_sign.h"

namespace signlion {
namespace net {

constexpr int kUcxMaxRecvs = 8;
constexpr size_t kUcxMaxMessage = 1ull << 30;  // test() reports sizes as int

struct UcxProps {
  const char* name;
  const char* pciPath;
  uint64_t guid;
  int speedMbps;
  int maxComms;
};

// Connects started through a v11/v12 context that have not finished.
struct UcxPendingConnects {
  std::mutex mu;
  std::unordered_set<void*> comms;
};

ncclResult_t ucxInit(LogSink logger);
// NCCL_PTR_HOST, plus NCCL_PTR_CUDA when this UCX supports CUDA memory and
// SIGNLION_UCX_CUDA_POINTERS asks for it (ucx_ptr_support.h says why).
int ucxPtrSupport();
ncclResult_t ucxDevices(int* ndev);
ncclResult_t ucxGetProperties(int dev, UcxProps* props);
ncclResult_t ucxListen(int dev, void* handle, void** listenComm);
ncclResult_t ucxConnect(int dev, int trafficClass, void* handle, void** sendComm, UcxPendingConnects* pending);
void ucxAbandonConnects(UcxPendingConnects* pending);
ncclResult_t ucxAccept(void* listenComm, void** recvComm);
ncclResult_t ucxRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t ucxRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
ncclResult_t ucxDeregMr(void* comm, void* mhandle);
ncclResult_t ucxIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
ncclResult_t ucxIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                      void** request);
ncclResult_t ucxIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t ucxTest(void* request, int* done, int* sizes);
// Ends a send or recv comm's link as a crash would, at once (no bye on its
// out-of-band socket): the peer's pending and later operations on it fail.
// Waits for nothing; the comm must still be closed, which then waits on
// nothing of the peer's either. For a communicator's abort.
ncclResult_t ucxAbortComm(void* comm);
ncclResult_t ucxCloseSend(void* sendComm);
ncclResult_t ucxCloseRecv(void* recvComm);
ncclResult_t ucxCloseListen(void* listenComm);

}  // namespace net
}  // namespace signlion
