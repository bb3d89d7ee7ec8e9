// net_perf: the socket transport on one link, two processes (server, client).
//   - ping-pong latency, 8 B .. 1 MiB, through the plugin (ncclNet v11 struct)
//     and through a plain one-stream TCP socket on the same link, waited on
//     with the same spin-then-poll policy, timed in interleaved blocks (and,
//     as a diagnostic, over two plain one-way sockets: the plugin's layout);
//   - streaming bandwidth, client -> server, versus SIGNLION_NSOCKS.
// Handles and results go through files in --dir (both sides see the same
// filesystem, also from two network namespaces). scripts/net_bench.sh runs it.
//
//   - with --role self, one process: the plugin's own CPU cost per message.
//
//   net_perf --role server|client --dir DIR [--ifname lo] [--bytes 1G]
//            [--nsocks 1,2,4,8] [--iters 2000] [--blocks 10] [--lat-sizes 8,64,...]
//            [--only signlion|plain-tcp|tcp-2conn]
//   net_perf --role self [--ifname lo] [--iters 2000] [--blocks 10] [--lat-sizes 8,64,...]
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/param.h"
#include "net/socket_devices.h"
#include "net/socket_net.h"
#include "net/socket_params.h"
#include "net/socket_stream.h"
#include "pair_files.h"

namespace {

using signlion::net::SocketAddress;
const ncclNet_v11_t* gNet = nullptr;
void* gCtx = nullptr;
signlion::perf::PairFiles gPair("net_perf");
using signlion::perf::nowSec;

[[noreturn]] void die(const char* what) { gPair.die(what); }

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(what);
}

// Waits like a host-side caller: spins on test() for a short while (a reply
// that comes within it is seen at once; a sleep and wake-up costs tens of us
// in a VM), then sleeps on the comm (signlion::net::commWait wakes on the
// control stream and on data-stream completions) so an idle wait leaves the
// core to the transport's helper threads.
void wait(void* req, void* comm, int* size = nullptr) {
  constexpr double kSpinSec = 100e-6;
  int done = 0;
  double start = nowSec();
  for (int spins = 0; !done; spins++) {
    check(gNet->test(req, &done, size), "test");
    if (done) break;
    double now = nowSec();
    if (now - start > kSpinSec) signlion::net::commWait(comm, 1);
    if (now - start > 60) die("request did not complete in 60 s");
  }
}

// Both sides listen under `name`, connect to each other: one send and one recv comm each.
void connectBoth(int dev, const std::string& name, bool bidir, void** s, void** r) {
  char mine[NCCL_NET_HANDLE_MAXSIZE], theirs[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  *s = *r = nullptr;
  bool wantSend = bidir || !gPair.server, wantRecv = bidir || gPair.server;
  if (wantRecv) {
    check(gNet->listen(gCtx, dev, mine, &l), "listen");
    gPair.put(name + (gPair.server ? ".s" : ".c"), mine, sizeof(mine));
  }
  if (wantSend) gPair.get(name + (gPair.server ? ".c" : ".s"), theirs, sizeof(theirs));
  double start = nowSec();
  while ((wantSend && !*s) || (wantRecv && !*r)) {
    if (wantSend && !*s) check(gNet->connect(gCtx, dev, theirs, s, nullptr), "connect");
    if (wantRecv && !*r) check(gNet->accept(l, r, nullptr), "accept");
    if (nowSec() - start > 60) die("connect timed out");
  }
  if (l) gNet->closeListen(l);
}

int itersFor(size_t size, int iters) { return size <= 65536 ? iters : std::max(20, iters / 10); }

// One trip of `size` bytes: a round trip (the client sends first, the
// server replies), or one message within one process (--role self).
using Trip = std::function<void(size_t)>;

// Microseconds per trip of every trip in `trips`, per size: out[size][trip]
// holds one figure per block (none for an empty Trip, which is skipped).
// After 20 warm-up trips each, itersFor(size) trips are timed in `blocks`
// blocks; within a block each trip runs the block's share back to back, in
// forward order on even blocks and reverse order on odd ones, so the
// machine's load (other jobs on shared cores) falls on all of them alike.
std::vector<std::vector<std::vector<double>>> timeTrips(const std::vector<size_t>& sizes, int iters, int blocks,
                                                        const std::vector<Trip>& trips) {
  std::vector<std::vector<std::vector<double>>> out;
  for (size_t size : sizes) {
    int per = std::max(1, itersFor(size, iters) / blocks);
    out.emplace_back(trips.size());
    for (const Trip& trip : trips)
      for (int i = 0; trip && i < 20; i++) trip(size);
    for (int b = 0; b < blocks; b++) {
      for (size_t k = 0; k < trips.size(); k++) {
        size_t t = b % 2 == 0 ? k : trips.size() - 1 - k;
        if (!trips[t]) continue;
        double t0 = nowSec();
        for (int i = 0; i < per; i++) trips[t](size);
        out.back()[t].push_back((nowSec() - t0) / per * 1e6);
      }
    }
  }
  return out;
}

// The plugin's round trip over one send and one recv comm each way.
struct PluginPing {
  void *s = nullptr, *r = nullptr, *smr = nullptr, *rmr = nullptr;
  std::vector<char> sbuf = std::vector<char>(1 << 20, 1), rbuf = std::vector<char>(1 << 20);

  explicit PluginPing(int dev) {
    connectBoth(dev, "lat", true, &s, &r);
    check(gNet->regMr(s, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smr), "regMr");
    check(gNet->regMr(r, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmr), "regMr");
  }
  ~PluginPing() {
    gNet->deregMr(s, smr);
    gNet->deregMr(r, rmr);
    gNet->closeSend(s);
    gNet->closeRecv(r);
  }
  void operator()(size_t size) {
    void* rd = rbuf.data();
    size_t cap = rbuf.size();
    int tag = 0;
    void *sreq = nullptr, *rreq = nullptr;
    check(gNet->irecv(r, 1, &rd, &cap, &tag, &rmr, nullptr, &rreq), "irecv");
    if (!rreq) die("irecv not posted");
    if (gPair.server) wait(rreq, r);
    check(gNet->isend(s, sbuf.data(), size, 0, smr, nullptr, &sreq), "isend");
    if (!sreq) die("isend not posted");
    if (!gPair.server) wait(rreq, r);
    wait(sreq, s);
  }
};

// Moves n bytes on a non-blocking socket with the plugin waiter's policy:
// retry at once for up to 100 us, then sleep in poll(). Both sides of the
// comparison thus pay (or avoid) the same wake-up costs. With ackMs, a
// receive applies the plugin's ACK policy of its control stream (delayAcks).
void fullIo(int fd, char* p, size_t n, bool send, int64_t* ackMs = nullptr) {
  double start = nowSec();
  while (n > 0) {
    ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (nowSec() - start > 100e-6) {
        pollfd pfd{fd, (short)(send ? POLLOUT : POLLIN), 0};
        (void)poll(&pfd, 1, 1);
      }
      continue;
    }
    if (k <= 0) die("plain tcp io");
    if (ackMs) signlion::net::delayAcks(fd, ackMs);
    p += k;
    n -= (size_t)k;
  }
}

// A listening plain TCP socket on local's address, any port (*bound: the address with it).
int plainListen(const SocketAddress& local, int backlog, SocketAddress* bound) {
  *bound = local;
  bound->sin.sin_port = 0;  // IPv4 and IPv6 keep the port at the same offset
  socklen_t len = bound->sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  int l = socket(bound->sa.sa_family, SOCK_STREAM, 0);
  if (l < 0 || bind(l, &bound->sa, len) != 0 || listen(l, backlog) != 0 || getsockname(l, &bound->sa, &len) != 0)
    die("plain listen");
  return l;
}

int plainConnect(const SocketAddress& to) {
  socklen_t len = to.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  int fd = socket(to.sa.sa_family, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, &to.sa, len) != 0) die("plain connect");
  return fd;
}

void plainTune(int fd) {
  int one = 1;
  if (fd < 0) die("plain socket");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Plain TCP sockets with TCP_NODELAY on the same link: `two` carries the
// ping-pong both ways (the baseline); `out` and `in` are two one-way
// connections, the plugin's layout (a send comm and a recv comm), read with
// the plugin's ACK policy: the difference between the two baselines is what
// that layout costs in the kernel, apart from any code of ours.
struct PlainPing {
  int two = -1, out = -1, in = -1;
  int64_t ackMs = -1;
  std::vector<char> buf = std::vector<char>(1 << 20, 2);

  explicit PlainPing(const SocketAddress& local) {
    int* fds[3] = {&two, gPair.server ? &in : &out, gPair.server ? &out : &in};  // in connect (= accept) order
    if (gPair.server) {
      SocketAddress a;
      int l = plainListen(local, 3, &a);
      gPair.put("plain.addr", &a, sizeof(a));
      for (int* fd : fds) *fd = accept(l, nullptr, nullptr);
      close(l);
    } else {
      SocketAddress a;
      gPair.get("plain.addr", &a, sizeof(a));
      for (int* fd : fds) *fd = plainConnect(a);
    }
    for (int* fd : fds) plainTune(*fd);
  }
  ~PlainPing() {
    close(two);
    close(out);
    close(in);
  }
  void twoWay(size_t size) {
    fullIo(two, buf.data(), size, !gPair.server);
    fullIo(two, buf.data(), size, gPair.server);
  }
  void oneWayPair(size_t size) {
    if (!gPair.server) fullIo(out, buf.data(), size, true);
    fullIo(in, buf.data(), size, false, &ackMs);
    if (gPair.server) fullIo(out, buf.data(), size, true);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Per block a / b, then the median and the range over the blocks (NAN when either was not timed).
struct RatioStats {
  double median = NAN, min = NAN, max = NAN;
};
RatioStats blockRatios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); i++) r.push_back(a[i] / b[i]);
  RatioStats st;
  if (r.empty()) return st;
  auto mm = std::minmax_element(r.begin(), r.end());
  st.median = median(r);
  st.min = *mm.first;
  st.max = *mm.second;
  return st;
}

// --role self: one process, no waiting (on loopback a message is in the
// receiving socket when sendmsg returns). Microseconds per message through
// the plugin (irecv, isend, test until both complete) next to the same
// system calls on a plain socket pair (sendmsg of an 8-byte header and the
// payload, recvs into a staging buffer that holds the largest message, the
// plugin's ACK policy): the plugin's own CPU cost per message, which a
// ping-pong between processes on two shared cores shows only through its
// noise. A message larger than the socket buffers is sent in the pieces
// sendmsg takes, each drained before the next, as the plugin's own does.
void selfCost(const SocketAddress& local, const std::vector<size_t>& sizes, int iters, int blocks) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *l = nullptr, *s = nullptr, *r = nullptr;
  check(gNet->listen(gCtx, 0, handle, &l), "listen");
  double start = nowSec();
  while (!s || !r) {
    if (!s) check(gNet->connect(gCtx, 0, handle, &s, nullptr), "connect");
    if (!r) check(gNet->accept(l, &r, nullptr), "accept");
    if (nowSec() - start > 60) die("connect timed out");
  }
  gNet->closeListen(l);
  const size_t maxSize = sizes.empty() ? 1 : std::max<size_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::vector<char> sbuf(maxSize, 1), rbuf(maxSize), stage(maxSize + 8);
  void *smr, *rmr;
  check(gNet->regMr(s, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smr), "regMr");
  check(gNet->regMr(r, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmr), "regMr");
  auto plugin = [&](size_t size) {
    void* rd = rbuf.data();
    size_t cap = rbuf.size();
    int tag = 0;
    void *sreq = nullptr, *rreq = nullptr;
    check(gNet->irecv(r, 1, &rd, &cap, &tag, &rmr, nullptr, &rreq), "irecv");
    check(gNet->isend(s, sbuf.data(), size, 0, smr, nullptr, &sreq), "isend");
    if (!rreq || !sreq) die("request not posted");
    for (void* req : {rreq, sreq}) {  // both complete at the first test(); no clock read in this loop
      int done = 0;
      for (long spins = 0; !done; spins++) {
        check(gNet->test(req, &done, nullptr), "test");
        if (spins > 100000000) die("request did not complete");
      }
    }
  };
  SocketAddress a;
  int lf = plainListen(local, 1, &a);
  int fds[2] = {plainConnect(a), accept(lf, nullptr, nullptr)};  // sending, receiving
  close(lf);
  for (int fd : fds) plainTune(fd);
  int64_t ackMs = -1;
  auto raw = [&](size_t size) {
    char hdr[8] = {};  // the plugin's message header (wire version 4)
    iovec iov[2] = {{hdr, sizeof(hdr)}, {sbuf.data(), size}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    const size_t total = sizeof(hdr) + size;
    size_t sent = 0, got = 0;
    while (got < total) {
      if (sent < total) {
        // Skip what went out already: the header first, then the payload.
        iov[0] = {hdr + std::min(sent, sizeof(hdr)), sizeof(hdr) - std::min(sent, sizeof(hdr))};
        size_t p = sent > sizeof(hdr) ? sent - sizeof(hdr) : 0;
        iov[1] = {sbuf.data() + p, size - p};
        ssize_t k = sendmsg(fds[0], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN && errno != EINTR) die("plain sendmsg");
        if (k > 0) sent += (size_t)k;
      }
      ssize_t k = recv(fds[1], stage.data() + got, total - got, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) die("plain recv");
      if (k > 0) got += (size_t)k, signlion::net::delayAcks(fds[1], &ackMs);
    }
    memcpy(rbuf.data(), stage.data() + sizeof(hdr), size);
  };
  auto t = timeTrips(sizes, iters, blocks, {plugin, raw});
  printf("# one process, microseconds per message (median of %d blocks): the plugin (irecv, isend, test)\n", blocks);
  printf("# and the same system calls on a plain socket pair; extra: median over blocks of the difference\n");
  printf("# %10s %12s %12s %10s\n", "size(B)", "signlion", "syscalls", "extra");
  for (size_t i = 0; i < sizes.size(); i++) {
    std::vector<double> d;
    for (size_t b = 0; b < t[i][0].size(); b++) d.push_back(t[i][0][b] - t[i][1][b]);
    printf("  %10zu %12.3f %12.3f %10.3f\n", sizes[i], median(t[i][0]), median(t[i][1]), median(d));
  }
  close(fds[0]);
  close(fds[1]);
  gNet->deregMr(s, smr);
  gNet->deregMr(r, rmr);
  gNet->closeSend(s);
  gNet->closeRecv(r);
}

// Streams `bytes` client -> server in 4 MiB messages, 8 in flight. Returns
// Gbit/s seen by the receiver (server) and by commBytes on the wire.
double stream(int dev, int nsocks, size_t bytes, uint64_t* wire) {
  setenv("SIGNLION_NSOCKS", std::to_string(nsocks).c_str(), 1);
  signlion::paramResetCache();
  void *s, *r;
  std::string name = "bw" + std::to_string(nsocks);
  connectBoth(dev, name, false, &s, &r);
  const size_t kMsg = 4 << 20;
  const int kInflight = 8;
  size_t nmsg = std::max<size_t>(1, bytes / kMsg);
  std::vector<char> buf(kMsg * kInflight, 3);
  void* comm = gPair.server ? r : s;
  void* mr;
  check(gNet->regMr(comm, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), "regMr");
  std::vector<void*> reqs(kInflight, nullptr);
  size_t posted = 0, completed = 0;
  double t0 = nowSec(), limit = t0 + 120;
  while (completed < nmsg) {
    size_t before = completed;
    for (int k = 0; k < kInflight; k++) {
      if (reqs[k] == nullptr && posted < nmsg) {
        char* p = buf.data() + k * kMsg;
        int tag = 0;
        if (gPair.server) {
          void* d = p;
          size_t cap = kMsg;
          check(gNet->irecv(r, 1, &d, &cap, &tag, &mr, nullptr, &reqs[k]), "irecv");
        } else {
          check(gNet->isend(s, p, kMsg, tag, mr, nullptr, &reqs[k]), "isend");
        }
        if (reqs[k]) posted++;
      }
      if (reqs[k]) {
        int done = 0;
        check(gNet->test(reqs[k], &done, nullptr), "test");
        if (done) reqs[k] = nullptr, completed++;
      }
    }
    // Leave the cores to the helper threads while nothing completes.
    if (completed == before) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (nowSec() > limit) die("stream did not finish in 120 s");
  }
  double secs = nowSec() - t0;
  uint64_t sent = 0, recvd = 0;
  signlion::net::commBytes(comm, &sent, &recvd);
  *wire = gPair.server ? recvd : sent;
  gNet->deregMr(comm, mr);
  // The receiver tells the sender when it is done, so closing loses nothing.
  char token = 1;
  if (gPair.server)
    gPair.put(name + ".done", &token, 1);
  else
    gPair.get(name + ".done", &token, 1);
  if (s) gNet->closeSend(s);
  if (r) gNet->closeRecv(r);
  return (double)(nmsg * kMsg) * 8 / secs / 1e9;
}

// "1,2,4,8" -> {1, 2, 4, 8}; the list ends at the first entry that is not a
// number, so "" or "none" is an empty list (e.g. --nsocks none: latency only).
std::vector<int> parseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    char* end;
    long x = strtol(p, &end, 10);
    if (end == p) break;
    v.push_back((int)x);
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role, ifname = "lo";
  size_t bytes = 1ull << 30;
  std::vector<int> nsocks = {1, 2, 4, 8};
  int iters = 2000, blocks = 10;
  std::vector<int> latSizes;
  std::string only;  // time just one ping-pong (for profiling): signlion, plain-tcp or tcp-2conn
  for (int s = 8; s <= (1 << 20); s *= 8) latSizes.push_back(s);
  latSizes.push_back(1 << 20);
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--role")
      role = v;
    else if (k == "--dir")
      gPair.dir = v;
    else if (k == "--ifname")
      ifname = v;
    else if (k == "--bytes")
      bytes = (size_t)strtod(v, nullptr) << (strchr(v, 'G') ? 30 : strchr(v, 'M') ? 20 : 0);
    else if (k == "--nsocks")
      nsocks = parseList(v);
    else if (k == "--iters")
      iters = atoi(v);
    else if (k == "--blocks")
      blocks = std::max(1, atoi(v));
    else if (k == "--lat-sizes")
      latSizes = parseList(v);
    else if (k == "--only")
      only = v;
    else {
      fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  const char* names[] = {"signlion", "plain-tcp", "tcp-2conn"};
  bool onlyOk = only.empty() || std::find(std::begin(names), std::end(names), only) != std::end(names);
  if (!((role == "server" || role == "client") && !gPair.dir.empty()) && role != "self") onlyOk = false;
  if (!onlyOk) {
    fprintf(
        stderr,
        "usage: net_perf --role server|client --dir DIR [--ifname IF] [--bytes 1G] [--nsocks 1,2,4,8]\n"
        "                [--iters 2000] [--blocks 10] [--lat-sizes 8,64,...] [--only signlion|plain-tcp|tcp-2conn]\n"
        "       net_perf --role self [--ifname IF] [--iters 2000] [--blocks 10] [--lat-sizes 8,64,...]\n");
    return 2;
  }
  gPair.server = role == "server";
  setenv("SIGNLION_SOCKET_IFNAME", ("=" + ifname).c_str(), 1);
  signlion::paramResetCache();
  gNet = signlion::net::socketNetV11();
  ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  check(gNet->init(&gCtx, 0, &cfg, nullptr, nullptr), "init");
  int ndev = 0;
  check(gNet->devices(&ndev), "devices");
  if (ndev < 1) die("no device");
  auto devs = signlion::net::findSocketDevices(1);
  const int nsocksDefault = (int)signlion::net::signlionParamNsocks();

  std::vector<size_t> sizes(latSizes.begin(), latSizes.end());
  if (role == "self") {
    gPair.self = true;
    selfCost(devs[0].addr, sizes, iters, blocks);
    gNet->finalize(gCtx);
    return 0;
  }
  std::vector<std::vector<std::vector<double>>> lat;
  bool sharedCtrl = false;
  {
    PluginPing plugin(0);
    PlainPing plain(devs[0].addr);
    std::vector<Trip> trips = {std::ref(plugin), [&](size_t n) { plain.twoWay(n); },
                               [&](size_t n) { plain.oneWayPair(n); }};
    for (size_t t = 0; t < trips.size(); t++)
      if (!only.empty() && only != names[t]) trips[t] = nullptr;
    lat = timeTrips(sizes, iters, blocks, trips);
    sharedCtrl = signlion::net::commSharesControl(plugin.s) && signlion::net::commSharesControl(plugin.r);
  }
  std::vector<double> bw;
  std::vector<uint64_t> wire;
  for (int n : nsocks) {
    uint64_t w = 0;
    bw.push_back(stream(0, n, bytes, &w));
    wire.push_back(w);
  }
  if (gPair.server) {
    // Receiver-side bandwidth is the honest one: hand it to the client to print.
    gPair.put("bw.result", bw.data(), bw.size() * sizeof(double));
    gNet->finalize(gCtx);
    return 0;
  }
  gPair.get("bw.result", bw.data(), bw.size() * sizeof(double));
  printf("# net_perf on %s (%s), default SIGNLION_NSOCKS=%d\n", devs[0].name.c_str(),
         signlion::net::addressString(devs[0].addr).c_str(), nsocksDefault);
  printf("# ping-pong latency, half round trip (us): median of %d blocks, each timing the three in turn\n", blocks);
  printf("# ratio: median of the blocks' signlion/plain-tcp (min..max over blocks); plain-tcp: one two-way\n");
  printf("# socket; tcp-2conn: two one-way sockets read with the plugin's ACK policy (diagnostic)\n");
  if (only.empty() || only == names[0])
    printf("# plugin control connection: %s\n",
           sharedCtrl ? "one, shared both ways (socket_pairing.h)" : "one per direction (not paired)");
  printf("# %10s %12s %12s %8s %15s %12s\n", "size(B)", "signlion", "plain-tcp", "ratio", "ratio-range", "tcp-2conn");
  for (size_t i = 0; i < sizes.size(); i++) {
    RatioStats r = blockRatios(lat[i][0], lat[i][1]);
    printf("  %10zu %12.2f %12.2f %8.2f %7.2f..%-6.2f %12.2f\n", sizes[i], median(lat[i][0]) / 2, median(lat[i][1]) / 2,
           r.median, r.min, r.max, median(lat[i][2]) / 2);
  }
  printf("# streaming bandwidth client->server, 4 MiB messages, 8 in flight, %.0f MiB\n", bytes / 1048576.0);
  printf("# %8s %12s %16s\n", "nsocks", "Gbit/s", "wire bytes");
  for (size_t i = 0; i < nsocks.size(); i++)
    printf("  %8d %12.3f %16llu\n", nsocks[i], bw[i], (unsigned long long)wire[i]);
  gNet->finalize(gCtx);
  return 0;
}
