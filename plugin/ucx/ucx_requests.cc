// The UCX transport's entry points on requests (ucx_transport.h): memory
// registration, isend, irecv, iflush and test, and the slots UCX's
// completion callbacks write.
#include "ucx/ucx_comm.h"

#include <cstdio>
#include <cstring>

#include "common/checks.h"
#include "common/clock.h"
#include "transport/byte_ranges.h"

namespace signlion {
namespace net {
namespace ucx {

void finishSlot(Slot* s, ucs_status_t status, size_t length) {
  s->ureq = nullptr;
  s->done = true;
  s->status = status;
  s->length = length;
}

void sendDone(void* ureq, ucs_status_t status, void* user) {
  Slot* s = static_cast<Slot*>(user);
  ucp_request_free(ureq);
  if (s->ureq != ureq) return;  // orphaned by discardSends: its slot may serve another request now
  finishSlot(s, status, s->length);
}

void recvDone(void* ureq, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Slot* s = static_cast<Slot*>(user);
  ucp_request_free(ureq);
  // The full tag mask makes the sender's tag ours; UCX 1.13 leaves
  // info->sender_tag unset on some paths, so only its length is read.
  if (status == UCS_OK && info == nullptr) status = UCS_ERR_NO_MESSAGE;
  finishSlot(s, status, status == UCS_OK ? info->length : 0);
}

// What a returned UCX pointer means for a slot just posted (the caller
// zeroed it before the call). With UCP_OP_ATTR_FLAG_NO_IMM_CMPL (irecv) a
// receive whose message is already here completes inside the call: its
// callback runs, frees the request and marks the slot done, and the call
// still returns the request's pointer. That pointer is not ours any more
// (UCX hands the memory to the next request, possibly another comm's): a
// slot keeps a UCX request only while it is not done, or a later cancel
// (close with requests in flight) would cancel someone else's request.
void startSlot(Slot* s, ucs_status_ptr_t p, size_t immediateLength) {
  if (s->done) return;
  if (p == nullptr)
    finishSlot(s, UCS_OK, immediateLength);
  else if (UCS_PTR_IS_ERR(p))
    finishSlot(s, UCS_PTR_STATUS(p), 0);
  else
    s->ureq = p;
}

ucp_request_param_t opParams(void* slot, void* mhandle) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = slot;
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  if (mr != nullptr && mr->magic == kMrMagic && mr->memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = mr->memh;
  }
  return p;
}

}  // namespace ucx

using namespace ucx;

// ---- Memory registration -------------------------------------------------------

ncclResult_t ucxRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  ARGCHECK(mhandle != nullptr, "regMr", "mhandle", "NULL");
  *mhandle = nullptr;
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "regMr", "comm", "%p is not a send or recv comm", comm);
  ARGCHECK((type & ucxPtrSupport()) == type && type != 0, "regMr", "type",
           "%d: this UCX supports memory types 0x%x only", type, ucxPtrSupport());
  ARGCHECK(data != nullptr || size == 0, "regMr", "data", "NULL with size %zu", size);
  ucp_mem_h memh = nullptr;
  if (size > 0) {
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = data;
    mp.length = size;
    ucs_status_t s = ucp_mem_map(global().context, &mp, &memh);
    if (s != UCS_OK) {
      WARN("NET/signlion-ucx: ucp_mem_map of %zu bytes at %p: %s", size, data, ucsStr(s));
      return ncclSystemError;
    }
  }
  MemRegion* mr = new MemRegion{kMrMagic, c, memh, static_cast<const char*>(data), size};
  std::lock_guard<std::mutex> lk(c->mrMu);
  c->mrs.insert(mr);
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t ucxRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int, void** mhandle) {
  return ucxRegMr(comm, data, size, type, mhandle);  // NCCL_PTR_DMABUF is not advertised
}

namespace {

// Requests with a slot still in flight on [base, base + size). The caller
// holds workerLock() (callbacks write the slots); no system call.
int requestsUsing(Comm* c, const char* base, size_t size) {
  int n = 0;
  for (Request& r : c->reqs)
    for (int i = 0; r.used && i < r.n; i++)
      if (!r.slots[i].done && rangesOverlap(r.slots[i].buf, r.slots[i].cap, base, size)) {
        n++;
        break;
      }
  return n;
}

}  // namespace

ncclResult_t ucxDeregMr(void* comm, void* mhandle) {
  Comm* c = asComm(comm, kCommSend);
  if (c == nullptr) c = asComm(comm, kCommRecv);
  ARGCHECK(c != nullptr, "deregMr", "comm", "%p is not a send or recv comm", comm);
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::lock_guard<std::mutex> wl(workerLock());  // before mrMu, as in destroyComm
  {
    std::lock_guard<std::mutex> lk(c->mrMu);
    ARGCHECK(mr != nullptr && c->mrs.count(mr) == 1, "deregMr", "mhandle", "%p is not registered on comm %p", mhandle,
             comm);
  }
  // NCCL frees the memory once this returns, also on an abort with
  // transfers on it in flight (then it closes the comm): cancel those
  // first; the memory handle they use is unmapped only once UCX is done.
  int busy = requestsUsing(c, mr->base, mr->size);
  if (busy > 0 && cancelForDeregistration(c, busy) != ncclSuccess)
    return ncclSystemError;  // the region stays with the comm: close unmaps it
  // Transfers that ended with their peer gone may still be UCX requests
  // holding the memory handle: it stays mapped, with the comm, until close
  // (destroyComm unmaps it).
  if (busy > 0 && requestsUsing(c, mr->base, mr->size) > 0) return ncclSuccess;
  std::lock_guard<std::mutex> lk(c->mrMu);
  c->mrs.erase(mr);
  if (mr->memh != nullptr) ucp_mem_unmap(global().context, mr->memh);
  mr->magic = 0;
  delete mr;
  return ncclSuccess;
}

namespace {

// ---- Transfers --------------------------------------------------------------------

// An mhandle passed to isend/irecv: nullptr, or a region registered on c
// that holds [data, data + size).
bool regionHolds(Comm* c, void* mhandle, const void* data, size_t size) {
  if (mhandle == nullptr) return true;
  MemRegion* mr = static_cast<MemRegion*>(mhandle);
  std::lock_guard<std::mutex> lk(c->mrMu);
  if (c->mrs.count(mr) == 0) return false;
  const char* p = static_cast<const char*>(data);
  return size == 0 || (p >= mr->base && size <= mr->size && (size_t)(p - mr->base) <= mr->size - size);
}

}  // namespace

ncclResult_t ucxIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  ARGCHECK(request != nullptr, "isend", "request", "NULL");
  *request = nullptr;
  SendComm* c = static_cast<SendComm*>(asComm(sendComm, kCommSend));
  ARGCHECK(c != nullptr, "isend", "sendComm", "%p is not a send comm", sendComm);
  ARGCHECK(data != nullptr || size == 0, "isend", "data", "NULL with size %zu", size);
  ARGCHECK(size <= kUcxMaxMessage, "isend", "size", "%zu exceeds maxP2pBytes %zu", size, kUcxMaxMessage);
  ARGCHECK(regionHolds(c, mhandle, data, size), "isend", "mhandle",
           "%p is not a region registered on comm %p holding %zu bytes at %p", mhandle, sendComm, size, data);
  std::lock_guard<std::mutex> lk(workerLock());
  if (c->cancelled) return ncclInvalidUsage;  // cancelForDeregistration said why
  c->everSent = true;  // connect() returned c with its endpoint confirmed (confirmEndpoint)
  OobWatch::State st = checkPeer(c, false);
  if (st == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
  Request* r = c->reqs.acquire();
  if (r == nullptr) return ncclSuccess;  // NCCL retries
  r->comm = c;
  r->n = 1;
  r->bytes = size;
  Slot* s = &r->slots[0];
  *s = Slot{};
  s->tag = tag;
  s->length = size;
  s->buf = static_cast<const char*>(data);
  s->cap = size;
  if (st == OobWatch::kClosed || c->ep == nullptr) {
    finishSlot(s, UCS_OK, size);  // the receiver closed in order: the data is discarded
  } else {
    ucp_request_param_t p = opParams(s, mhandle);
    p.cb.send = sendDone;
    startSlot(s, ucp_tag_send_nbx(c->ep, data, size, ucpTag(c->commId, tag), &p), size);
  }
  r->pending = s->done ? 0 : 1;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ucxIrecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                      void** request) {
  ARGCHECK(request != nullptr, "irecv", "request", "NULL");
  *request = nullptr;
  Comm* c = asComm(recvComm, kCommRecv);
  ARGCHECK(c != nullptr, "irecv", "recvComm", "%p is not a recv comm", recvComm);
  ARGCHECK(n >= 1 && n <= kUcxMaxRecvs, "irecv", "n", "%d not in [1, %d]", n, kUcxMaxRecvs);
  ARGCHECK(data != nullptr && sizes != nullptr && tags != nullptr, "irecv", "data/sizes/tags", "NULL");
  for (int i = 0; i < n; i++) {
    ARGCHECK(data[i] != nullptr || sizes[i] == 0, "irecv", "data", "data[%d] NULL with size %zu", i, sizes[i]);
    ARGCHECK(mhandles == nullptr || regionHolds(c, mhandles[i], data[i], sizes[i]), "irecv", "mhandles",
             "mhandles[%d] = %p is not a region registered on comm %p holding %zu bytes at %p", i, mhandles[i],
             recvComm, sizes[i], data[i]);
  }
  std::lock_guard<std::mutex> lk(workerLock());
  if (c->cancelled) return ncclInvalidUsage;  // cancelForDeregistration said why
  if (checkPeer(c, false) == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
  Request* r = c->reqs.acquire();
  if (r == nullptr) return ncclSuccess;
  r->comm = c;
  r->n = n;
  r->postedMs = monotonicMs();
  r->pending = 0;
  r->bytes = 0;
  for (int i = 0; i < n; i++) {
    Slot* s = &r->slots[i];
    *s = Slot{};
    s->tag = tags[i];
    s->buf = static_cast<const char*>(data[i]);
    s->cap = sizes[i];
    ucp_request_param_t p = opParams(s, mhandles ? mhandles[i] : nullptr);
    // No immediate completion: UCX 1.13 may complete a receive at once (a
    // message already here) without filling recv_info, and a size of 0
    // would then be reported for a message that had bytes. The callback
    // always carries the message's facts.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = recvDone;
    ucs_status_ptr_t up = ucp_tag_recv_nbx(c->worker, data[i], sizes[i], ucpTag(c->commId, tags[i]), kFullTagMask, &p);
    if (up == nullptr) up = UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);  // not allowed above: never report unknown sizes
    startSlot(s, up, 0);
    if (!s->done) r->pending++;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t ucxIflush(void* recvComm, int, void**, int*, void**, void** request) {
  ARGCHECK(request != nullptr, "iflush", "request", "NULL");
  ARGCHECK(asComm(recvComm, kCommRecv) != nullptr, "iflush", "recvComm", "%p is not a recv comm", recvComm);
  // Nothing to flush in host memory; NCCL calls this after receives into GPU
  // memory only when NCCL_PTR_CUDA is advertised, which the user then chose
  // for GPUs that need no flush (ucx_ptr_support.h).
  *request = nullptr;
  return ncclSuccess;
}

ncclResult_t ucxTest(void* request, int* done, int* sizes) {
  ARGCHECK(done != nullptr, "test", "done", "NULL");
  *done = 0;
  Request* r = static_cast<Request*>(request);
  ARGCHECK(
      r != nullptr && r->used && r->comm != nullptr && r->comm->magic == kCommMagic && r->comm->reqs.outstanding(r),
      "test", "request", "%p is not an outstanding request", request);
  Comm* c = r->comm;
  std::lock_guard<std::mutex> lk(workerLock());
  if (c->cancelled) return ncclInvalidUsage;  // cancelForDeregistration said why
  auto pendingNow = [r] {
    int p = 0;
    for (int i = 0; i < r->n; i++) p += r->slots[i].done ? 0 : 1;
    return p;
  };
  if ((r->pending = pendingNow()) > 0) {
    unsigned moved = 0;
    for (int i = 0; i < 4 && (moved = progress(c)) != 0; i++) {
    }
    r->pending = pendingNow();
  }
  if (r->pending > 0) {
    OobWatch::State st = checkPeer(c, false);
    if (st == OobWatch::kDead) return peerLost(c, "peer vanished (connection closed without a bye)");
    if (st == OobWatch::kClosed && c->isSend) {
      discardSends(static_cast<SendComm*>(c));  // completes them (cancelled): their data is discarded
      r->pending = pendingNow();
    } else if (st == OobWatch::kClosed) {
      for (int i = 0; i < 64 && progress(c) != 0; i++) {
      }
      if ((r->pending = pendingNow()) > 0)
        return peerLost(c, "peer closed its send comm with our receive still waiting for a message");
    } else if (!c->isSend && monotonicMs() - r->postedMs > socketTimeoutMs()) {
      // A receive waiting past the timeout while a message no receive
      // claims sits in the worker: the sender used a tag we never post.
      ucp_tag_recv_info_t info;
      if (ucp_tag_probe_nb(c->worker, ucpTag(c->commId, 0), kCommIdMask, 0, &info) != nullptr) {
        WARN("NET/signlion-ucx: recv comm %p: message with tag %d (%zu bytes) matches no posted receive within %lld ms",
             (void*)c, (int)(uint32_t)info.sender_tag, info.length, (long long)socketTimeoutMs());
        return ncclInvalidUsage;
      }
    }
    if (r->pending > 0 && c->oob.state() == OobWatch::kAlive && c->oob.silentFor(monotonicMs()) > socketTimeoutMs()) {
      char why[160];
      snprintf(why, sizeof(why), "peer silent for %lld ms (stopped or unreachable; SIGNLION_SOCKET_TIMEOUT=%lld)",
               (long long)c->oob.silentFor(monotonicMs()), (long long)socketTimeoutMs());
      return peerLost(c, why);
    }
    if (r->pending > 0) return ncclSuccess;
  }
  // All slots done: report.
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < r->n; i++) {
    const Slot& s = r->slots[i];
    if (s.status == UCS_OK) continue;
    if (c->isSend) {
      // Failed sends: the receiver closed in order (discarded, fine) or died.
      OobWatch::State st = static_cast<SendComm*>(c)->epForced ? OobWatch::kClosed : c->oob.settle(socketTimeoutMs());
      if (st == OobWatch::kClosed) continue;
      char why[160];
      snprintf(why, sizeof(why), "send of tag %d failed: %s", s.tag, ucsStr(s.status));
      res = peerLost(c, why);
    } else if (s.status == UCS_ERR_MESSAGE_TRUNCATED) {
      WARN("NET/signlion-ucx: recv comm %p: message with tag %d is larger than the posted receive", (void*)c, s.tag);
      res = ncclInvalidUsage;
    } else {
      char why[160];
      snprintf(why, sizeof(why), "receive of tag %d failed: %s", s.tag, ucsStr(s.status));
      res = peerLost(c, why);
    }
    break;
  }
  if (res != ncclSuccess) return res;
  uint64_t bytes = 0;
  for (int i = 0; i < r->n; i++) {
    size_t len = c->isSend ? r->bytes : r->slots[i].length;
    if (sizes != nullptr) sizes[i] = (int)len;
    bytes += len;
  }
  (c->isSend ? c->bytesSent : c->bytesRecv).fetch_add(bytes, std::memory_order_relaxed);
  c->reqs.release(r);
  *done = 1;
  return ncclSuccess;
}

}  // namespace net
}  // namespace signlion
