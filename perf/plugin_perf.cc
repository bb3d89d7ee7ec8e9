// plugin_perf: one ncclNet transport (the socket one or the UCX one) on one
// link, two processes (server, client), measured the way ucx_perftest
// measures UCP, so that scripts/ucx_bench.sh can put the three side by side:
//   - ping-pong latency: per round trip, the median over --iters trips of
//     half the round trip (ucx_perftest's ucp_tag_lat "50.0%ile" column);
//   - streaming bandwidth, client -> server, per message size: --window
//     sends in flight into one registered buffer, --bytes in all after two
//     warm-up messages, timed on the sender from the first isend to the
//     receiver's 1-byte "all arrived" (ucp_tag_bw's "overall" column).
// Both sides wait by spinning on test(), as ucx_perftest busy-polls. With the
// socket transport a spin also yields after 100 us without completion, so
// that its helper threads get a core on a loaded machine; the UCX transport
// moves data only inside test(), so it spins without yielding, exactly as
// ucx_perftest does (a yielding contender next to a spinning one on a
// loaded machine measures the scheduler, not the transport).
// Buffers are page-aligned and registered once, as NCCL's are.
// Handles and results go through files in --dir (both processes see the same
// filesystem, also from two network namespaces).
//
//   plugin_perf --net socket|ucx --role server|client --dir DIR
//               [--lat-sizes 8] [--iters 20000] [--bw-sizes 4M,16M,64M,256M]
//               [--bytes 1G] [--window 8]
// The client prints one line per figure: "lat <bytes> <us>" (half round
// trip) and "bw <bytes> <Gbit/s>". The device is the transport's first one
// (SIGNLION_SOCKET_IFNAME picks it; UCX_TLS/UCX_NET_DEVICES pass to UCX).
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/socket_net.h"
#include "pair_files.h"
#ifdef SIGNLION_PERF_HAVE_UCX
#include "ucx/ucx_net.h"
#endif

namespace {

const ncclNet_v11_t* gNet = nullptr;
void* gCtx = nullptr;
signlion::perf::PairFiles gPair("plugin_perf");
bool gYield = false;  // the transport has threads of its own (socket)
using signlion::perf::nowSec;

[[noreturn]] void die(const char* what) { gPair.die(what); }

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(what);
}

// Spins on test() until req completes (60 s at most); yields after 100 us if gYield.
void wait(void* req) {
  int done = 0;
  double start = 0;
  for (long spins = 0;; spins++) {
    check(gNet->test(req, &done, nullptr), "test");
    if (done) return;
    if (spins < 1000 || spins % 16 != 0) continue;  // few clock reads while a reply is due any moment
    double now = nowSec();
    if (start == 0) start = now;
    if (gYield && now - start > 100e-6) sched_yield();
    if (now - start > 60) die("request did not complete in 60 s");
  }
}

// Both sides listen, connect to each other: one send and one recv comm each.
void connectBoth(void** s, void** r) {
  char mine[NCCL_NET_HANDLE_MAXSIZE] = {}, theirs[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  *s = *r = nullptr;
  check(gNet->listen(gCtx, 0, mine, &l), "listen");
  gPair.put(gPair.server ? "handle.s" : "handle.c", mine, sizeof(mine));
  gPair.get(gPair.server ? "handle.c" : "handle.s", theirs, sizeof(theirs));
  double start = nowSec();
  while (!*s || !*r) {
    if (!*s) check(gNet->connect(gCtx, 0, theirs, s, nullptr), "connect");
    if (!*r) check(gNet->accept(l, r, nullptr), "accept");
    if (nowSec() - start > 60) die("connect timed out");
  }
  gNet->closeListen(l);
}

// A page-aligned buffer, as NCCL's buffers and ucx_perftest's (ucp_mem_map)
// are; a std::vector this large starts 16 bytes into a page (malloc's mmap
// header), so the copies of the stream started off a cache line.
struct PageBuffer {
  std::unique_ptr<char, decltype(&free)> p{nullptr, &free};
  size_t size = 0;
  PageBuffer(size_t bytes, int fill) : size(std::max<size_t>(bytes, 1)) {
    p.reset(static_cast<char*>(aligned_alloc(4096, (size + 4095) / 4096 * 4096)));
    if (!p) die("out of memory");
    memset(p.get(), fill, size);
  }
  char* data() { return p.get(); }
};

struct Link {
  void *s = nullptr, *r = nullptr, *smr = nullptr, *rmr = nullptr;
  PageBuffer sbuf, rbuf;

  explicit Link(size_t bytes) : sbuf(bytes, 1), rbuf(bytes, 0) {
    connectBoth(&s, &r);
    check(gNet->regMr(s, sbuf.data(), sbuf.size, NCCL_PTR_HOST, &smr), "regMr");
    check(gNet->regMr(r, rbuf.data(), rbuf.size, NCCL_PTR_HOST, &rmr), "regMr");
  }
  ~Link() {
    gNet->deregMr(s, smr);
    gNet->deregMr(r, rmr);
    gNet->closeSend(s);
    gNet->closeRecv(r);
  }
  void* postRecv(size_t size) {
    void* d = rbuf.data();
    int tag = 0;
    void* req = nullptr;
    double start = nowSec();
    while (!req) {  // a full request table answers with no request: retry
      check(gNet->irecv(r, 1, &d, &size, &tag, &rmr, nullptr, &req), "irecv");
      if (!req && nowSec() - start > 60) die("irecv not posted in 60 s");
    }
    return req;
  }
  void* postSend(size_t size) {
    void* req = nullptr;
    double start = nowSec();
    while (!req) {  // no request until the connection is ready, or the table is full
      check(gNet->isend(s, sbuf.data(), size, 0, smr, nullptr, &req), "isend");
      if (!req && nowSec() - start > 60) die("isend not posted in 60 s");
    }
    return req;
  }
  // One round trip: the client sends first, the server replies.
  void pingPong(size_t size) {
    void* rreq = postRecv(size);
    if (gPair.server) wait(rreq);
    void* sreq = postSend(size);
    if (!gPair.server) wait(rreq);
    wait(sreq);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Microseconds, half the round trip: median over iters trips after iters/10 warm-up ones.
double latency(Link& link, size_t size, int iters, std::vector<double>* trips) {
  trips->clear();
  for (int i = 0; i < iters / 10 + 10; i++) link.pingPong(size);
  for (int i = 0; i < iters; i++) {
    double t0 = nowSec();
    link.pingPong(size);
    trips->push_back((nowSec() - t0) * 1e6 / 2);
  }
  return median(*trips);
}

// Gbit/s client -> server of `count` messages of `size`, `window` in flight;
// timed on the client up to the server's 1-byte answer (0 on the server).
double bandwidth(Link& link, size_t size, size_t count, int window) {
  std::vector<void*> reqs(window, nullptr);
  size_t posted = 0, completed = 0;
  double t0 = nowSec(), limit = t0 + 120, lastMove = t0;
  while (completed < count) {
    size_t before = completed;
    for (int k = 0; k < window; k++) {
      if (reqs[k] == nullptr && posted < count) {
        reqs[k] = gPair.server ? link.postRecv(size) : link.postSend(size);
        posted++;
      }
      int done = 0;
      if (reqs[k]) check(gNet->test(reqs[k], &done, nullptr), "test");
      if (done) reqs[k] = nullptr, completed++;
    }
    double now = nowSec();
    if (completed != before) lastMove = now;
    if (gYield && now - lastMove > 100e-6) sched_yield();  // as wait(): the transport's own threads may need the core
    if (now > limit) die("stream did not finish in 120 s");
  }
  // "All arrived": the server's 1-byte message ends the client's clock.
  void* req = gPair.server ? link.postSend(1) : link.postRecv(1);
  wait(req);
  return gPair.server ? 0 : (double)(size * count) * 8 / (nowSec() - t0) / 1e9;
}

// "4M,16M,64M,256M" -> bytes; K, M and G suffixes.
std::vector<size_t> parseSizes(const char* s) {
  std::vector<size_t> v;
  for (const char* p = s; *p;) {
    char* end;
    unsigned long long x = strtoull(p, &end, 10);
    if (end == p) break;
    if (*end == 'K') x <<= 10, end++;
    if (*end == 'M') x <<= 20, end++;
    if (*end == 'G') x <<= 30, end++;
    v.push_back((size_t)x);
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string net, role;
  std::vector<size_t> latSizes = {8}, bwSizes = parseSizes("4M,16M,64M,256M");
  size_t bytes = 1ull << 30;
  int iters = 20000, window = 8;
  bool ok = true;
  for (int i = 1; i + 1 < argc && ok; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--net")
      net = v;
    else if (k == "--role")
      role = v;
    else if (k == "--dir")
      gPair.dir = v;
    else if (k == "--lat-sizes")
      latSizes = parseSizes(v);
    else if (k == "--bw-sizes")
      bwSizes = parseSizes(v);
    else if (k == "--bytes")
      bytes = parseSizes(v).empty() ? 0 : parseSizes(v)[0];
    else if (k == "--iters")
      iters = atoi(v);
    else if (k == "--window")
      window = atoi(v);
    else
      ok = false;
  }
  if (net == "socket") gNet = signlion::net::socketNetV11();
  gYield = net == "socket";
#ifdef SIGNLION_PERF_HAVE_UCX
  if (net == "ucx") gNet = signlion::net::ucxNetV11();
#endif
  if (!ok || argc % 2 == 0 || gNet == nullptr || (role != "server" && role != "client") || gPair.dir.empty() ||
      iters < 1 || window < 1 || window > NCCL_NET_MAX_REQUESTS || bytes == 0) {
    fprintf(stderr,
            "usage: plugin_perf --net socket|ucx --role server|client --dir DIR [--lat-sizes 8]\n"
            "                   [--iters 20000] [--bw-sizes 4M,16M,64M,256M] [--bytes 1G] [--window 1..%d]\n"
            "(--net ucx: only in a build that found UCX)\n",
            NCCL_NET_MAX_REQUESTS);
    return 2;
  }
  gPair.server = role == "server";
  ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  check(gNet->init(&gCtx, 0, &cfg, nullptr, nullptr), "init");
  int ndev = 0;
  check(gNet->devices(&ndev), "devices");
  if (ndev < 1) die("no device");
  size_t maxSize = 1;
  for (size_t s : latSizes) maxSize = std::max(maxSize, s);
  for (size_t s : bwSizes) maxSize = std::max(maxSize, s);
  {
    Link link(maxSize);
    std::vector<double> trips;
    trips.reserve(iters);
    for (size_t s : latSizes) {
      double us = latency(link, s, iters, &trips);
      if (!gPair.server) printf("lat %zu %.3f\n", s, us);
    }
    for (size_t s : bwSizes) {
      size_t count = std::max<size_t>(bytes / s, 4);
      bandwidth(link, s, 2, std::min(window, 2));  // warm-up (registration caches, rendezvous lanes)
      double gbps = bandwidth(link, s, count, window);
      if (!gPair.server) printf("bw %zu %.3f\n", s, gbps);
    }
    fflush(stdout);
  }
  gNet->finalize(gCtx);
  return 0;
}
