// libnccl-net-late-first-test.so: signlion's socket transport with one change,
// for the call check's tests (call_consistency_test.cc): on every receive
// comm, the completion of the first receive posted on it (the one that
// carries a call's header) is reported late, after the later receives on the
// same comm have completed, as a plugin may complete them out of order (UCX:
// a small later eager message before a large earlier rendezvous one). It is
// held until no other receive on its comm has completed for kQuietMs (never
// for ever: an executor that waits on it still finishes, only later).
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

#include "net/socket_net.h"

namespace {

constexpr int64_t kQuietMs = 100;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Held {
  void* comm;
  bool innerDone = false;
  int size = 0;
};
struct CommState {
  bool sawFirst = false;
  int64_t lastOther = 0;  // when another receive on the comm last completed
};

std::mutex mu;
std::map<void*, CommState> comms;   // by recvComm
std::map<void*, void*> recvComm;    // receive request -> its comm
std::map<void*, Held> held;         // the first receives, by request
ncclNet_v11_t inner;

ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mh, void** ph, void** req) {
  ncclResult_t r = inner.irecv(comm, n, data, sizes, tags, mh, ph, req);
  if (r != ncclSuccess || *req == nullptr) return r;
  std::lock_guard<std::mutex> l(mu);
  CommState& c = comms[comm];
  if (!c.sawFirst) {
    c.sawFirst = true;
    held[*req] = Held{comm};
  } else {
    recvComm[*req] = comm;
  }
  return r;
}

ncclResult_t test(void* req, int* done, int* sizes) {
  std::unique_lock<std::mutex> l(mu);
  auto h = held.find(req);
  if (h == held.end()) {
    auto rc = recvComm.find(req);
    l.unlock();
    ncclResult_t r = inner.test(req, done, sizes);
    if (r == ncclSuccess && *done && rc != recvComm.end()) {
      l.lock();
      comms[rc->second].lastOther = nowMs();
      recvComm.erase(req);
    }
    return r;
  }
  Held& x = h->second;
  if (!x.innerDone) {
    int size = 0;
    ncclResult_t r = inner.test(req, done, &size);
    if (r != ncclSuccess) return r;
    if (!*done) return ncclSuccess;
    x.innerDone = true;  // the transport has freed the request: never asked again
    x.size = size;
    comms[x.comm].lastOther = nowMs();
  }
  *done = nowMs() - comms[x.comm].lastOther >= kQuietMs;
  if (*done) {
    if (sizes != nullptr) *sizes = x.size;
    held.erase(h);
  }
  return ncclSuccess;
}

ncclResult_t closeRecv(void* comm) {
  {
    std::lock_guard<std::mutex> l(mu);
    comms.erase(comm);  // a later comm at this address is a new one
  }
  return inner.closeRecv(comm);
}

ncclNet_v11_t make() {
  inner = *signlion::net::socketNetV11();
  ncclNet_v11_t n = inner;
  n.name = "late-first-test";
  n.irecv = irecv;
  n.test = test;
  n.closeRecv = closeRecv;
  return n;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = make();
}
