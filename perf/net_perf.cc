// net_perf: the socket transport on one link, two processes (server, client).
//   - ping-pong latency, 8 B .. 1 MiB, through the plugin (ncclNet v11 struct)
//     and through a plain one-stream TCP socket on the same link, waited on
//     with the same spin-then-poll policy;
//   - streaming bandwidth, client -> server, versus SIGNLION_NSOCKS.
// Handles and results go through files in --dir (both sides see the same
// filesystem, also from two network namespaces). scripts/net_bench.sh runs it.
//
//   net_perf --role server|client --dir DIR [--ifname lo] [--bytes 1G]
//            [--nsocks 1,2,4,8] [--iters 2000]
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/param.h"
#include "socket/socket_devices.h"
#include "socket/socket_net.h"
#include "socket/socket_params.h"

namespace {

using signlion::net::SocketAddress;
const ncclNet_v11_t* gNet = nullptr;
void* gCtx = nullptr;
std::string gDir;
bool gServer = false;

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "net_perf (%s): %s\n", gServer ? "server" : "client", what);
  exit(1);
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(what);
}

void putFile(const std::string& name, const void* data, size_t size) {
  std::string tmp = gDir + "/" + name + ".tmp";
  std::ofstream(tmp, std::ios::binary).write(static_cast<const char*>(data), size);
  if (rename(tmp.c_str(), (gDir + "/" + name).c_str()) != 0) die("rename");
}

void getFile(const std::string& name, void* data, size_t size) {
  for (int i = 0; i < 60000; i++) {  // at most 60 s
    std::ifstream f(gDir + "/" + name, std::ios::binary);
    if (f && f.read(static_cast<char*>(data), size)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  die(("no file " + name).c_str());
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
  bool wantSend = bidir || !gServer, wantRecv = bidir || gServer;
  if (wantRecv) {
    check(gNet->listen(gCtx, dev, mine, &l), "listen");
    putFile(name + (gServer ? ".s" : ".c"), mine, sizeof(mine));
  }
  if (wantSend) getFile(name + (gServer ? ".c" : ".s"), theirs, sizeof(theirs));
  double start = nowSec();
  while ((wantSend && !*s) || (wantRecv && !*r)) {
    if (wantSend && !*s) check(gNet->connect(gCtx, dev, theirs, s, nullptr), "connect");
    if (wantRecv && !*r) check(gNet->accept(l, r, nullptr), "accept");
    if (nowSec() - start > 60) die("connect timed out");
  }
  if (l) gNet->closeListen(l);
}

std::vector<size_t> latencySizes() {
  std::vector<size_t> v;
  for (size_t s = 8; s <= (1u << 20); s *= 8) v.push_back(s);
  if (v.back() != (1u << 20)) v.push_back(1u << 20);
  return v;
}

int itersFor(size_t size, int iters) { return size <= 65536 ? iters : std::max(20, iters / 10); }

// Half round-trip times (us) for each latency size: roundTrip(size) is timed
// over itersFor(size) trips after 20 warm-up trips. The same skeleton times
// the plugin and the plain socket.
template <typename RoundTrip>
std::vector<double> timePingPong(int iters, RoundTrip roundTrip) {
  std::vector<double> out;
  for (size_t size : latencySizes()) {
    int n = itersFor(size, iters), warm = 20;
    double t0 = 0;
    for (int i = 0; i < warm + n; i++) {
      if (i == warm) t0 = nowSec();
      roundTrip(size);
    }
    out.push_back((nowSec() - t0) / n / 2 * 1e6);
  }
  return out;
}

// Half round-trip times, us, per size.
std::vector<double> pluginPingPong(int dev, int iters) {
  void *s, *r;
  connectBoth(dev, "lat", true, &s, &r);
  std::vector<char> sbuf(1 << 20, 1), rbuf(1 << 20);
  void *smr, *rmr;
  check(gNet->regMr(s, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smr), "regMr");
  check(gNet->regMr(r, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmr), "regMr");
  std::vector<double> out = timePingPong(iters, [&](size_t size) {
    void* rd = rbuf.data();
    size_t cap = rbuf.size();
    int tag = 0;
    void *sreq = nullptr, *rreq = nullptr;
    check(gNet->irecv(r, 1, &rd, &cap, &tag, &rmr, nullptr, &rreq), "irecv");
    if (!rreq) die("irecv not posted");
    if (gServer) wait(rreq, r);
    check(gNet->isend(s, sbuf.data(), size, 0, smr, nullptr, &sreq), "isend");
    if (!sreq) die("isend not posted");
    if (!gServer) wait(rreq, r);
    wait(sreq, s);
  });
  gNet->deregMr(s, smr);
  gNet->deregMr(r, rmr);
  gNet->closeSend(s);
  gNet->closeRecv(r);
  return out;
}

// Moves n bytes on a non-blocking socket with the plugin waiter's policy:
// retry at once for up to 100 us, then sleep in poll(). Both sides of the
// comparison thus pay (or avoid) the same wake-up costs.
void fullIo(int fd, char* p, size_t n, bool send) {
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
    p += k;
    n -= (size_t)k;
  }
}

// The same ping-pong over one plain TCP socket with TCP_NODELAY.
std::vector<double> plainPingPong(const SocketAddress& local, int iters) {
  int fd = -1;
  int one = 1;
  if (gServer) {
    SocketAddress a = local;
    a.sin.sin_port = 0;  // IPv4 and IPv6 keep the port at the same offset
    int l = socket(a.sa.sa_family, SOCK_STREAM, 0);
    socklen_t len = a.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (l < 0 || bind(l, &a.sa, len) != 0 || listen(l, 1) != 0 || getsockname(l, &a.sa, &len) != 0)
      die("plain listen");
    putFile("plain.addr", &a, sizeof(a));
    fd = accept(l, nullptr, nullptr);
    close(l);
  } else {
    SocketAddress a;
    getFile("plain.addr", &a, sizeof(a));
    fd = socket(a.sa.sa_family, SOCK_STREAM, 0);
    socklen_t len = a.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (connect(fd, &a.sa, len) != 0) die("plain connect");
  }
  if (fd < 0) die("plain socket");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> buf(1 << 20, 2);
  std::vector<double> out = timePingPong(iters, [&](size_t size) {
    fullIo(fd, buf.data(), size, !gServer);
    fullIo(fd, buf.data(), size, gServer);
  });
  close(fd);
  return out;
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
  void* comm = gServer ? r : s;
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
        if (gServer) {
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
  *wire = gServer ? recvd : sent;
  gNet->deregMr(comm, mr);
  // The receiver tells the sender when it is done, so closing loses nothing.
  char token = 1;
  if (gServer) putFile(name + ".done", &token, 1);
  else getFile(name + ".done", &token, 1);
  if (s) gNet->closeSend(s);
  if (r) gNet->closeRecv(r);
  return (double)(nmsg * kMsg) * 8 / secs / 1e9;
}

std::vector<int> parseList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    char* end;
    v.push_back((int)strtol(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role, ifname = "lo";
  size_t bytes = 1ull << 30;
  std::vector<int> nsocks = {1, 2, 4, 8};
  int iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--role") role = v;
    else if (k == "--dir") gDir = v;
    else if (k == "--ifname") ifname = v;
    else if (k == "--bytes") bytes = (size_t)strtod(v, nullptr) << (strchr(v, 'G') ? 30 : strchr(v, 'M') ? 20 : 0);
    else if (k == "--nsocks") nsocks = parseList(v);
    else if (k == "--iters") iters = atoi(v);
    else {
      fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if ((role != "server" && role != "client") || gDir.empty()) {
    fprintf(stderr, "usage: net_perf --role server|client --dir DIR [--ifname IF] [--bytes 1G] [--nsocks 1,2,4,8]\n");
    return 2;
  }
  gServer = role == "server";
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

  std::vector<double> lat = pluginPingPong(0, iters);
  std::vector<double> plain = plainPingPong(devs[0].addr, iters);
  std::vector<double> bw;
  std::vector<uint64_t> wire;
  for (int n : nsocks) {
    uint64_t w = 0;
    bw.push_back(stream(0, n, bytes, &w));
    wire.push_back(w);
  }
  if (gServer) {
    // Receiver-side bandwidth is the honest one: hand it to the client to print.
    putFile("bw.result", bw.data(), bw.size() * sizeof(double));
    gNet->finalize(gCtx);
    return 0;
  }
  getFile("bw.result", bw.data(), bw.size() * sizeof(double));
  printf("# net_perf on %s (%s), default SIGNLION_NSOCKS=%d\n", devs[0].name.c_str(),
         signlion::net::addressString(devs[0].addr).c_str(), nsocksDefault);
  printf("# ping-pong latency, half round trip (us)\n");
  printf("# %10s %12s %12s %8s\n", "size(B)", "signlion", "plain-tcp", "ratio");
  std::vector<size_t> sizes = latencySizes();
  for (size_t i = 0; i < sizes.size(); i++)
    printf("  %10zu %12.2f %12.2f %8.2f\n", sizes[i], lat[i], plain[i], lat[i] / plain[i]);
  printf("# streaming bandwidth client->server, 4 MiB messages, 8 in flight, %.0f MiB\n", bytes / 1048576.0);
  printf("# %8s %12s %16s\n", "nsocks", "Gbit/s", "wire bytes");
  for (size_t i = 0; i < nsocks.size(); i++) printf("  %8d %12.3f %16llu\n", nsocks[i], bw[i], (unsigned long long)wire[i]);
  gNet->finalize(gCtx);
  return 0;
}
