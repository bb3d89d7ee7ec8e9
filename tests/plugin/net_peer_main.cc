// signlion_net_peer: one side of a two-process ncclNet exchange (see
// net_harness.h, runPeer). Used by the multi-process and netns tests.
//   signlion_net_peer --lib PATH --dir DIR --role a|b [--ifname lo] [--version 11]
//                     [--sizes 0,1,4096,...]
//   signlion_net_peer --mode sendbig --lib PATH --dir DIR [--ifname lo]
//     connects to <dir>/listener.handle, posts one 256 MiB send, writes
//     <dir>/sending, then keeps testing it (the test kills or stops us).
//   signlion_net_peer --mode recvbig|recvclose --lib PATH --dir DIR [--ifname lo]
//     listens and publishes <dir>/peer.handle, accepts, posts one 256 MiB
//     receive, writes <dir>/receiving once 4 MiB are in; recvbig then keeps
//     testing (the test kills us), recvclose closes the recv comm (an orderly
//     close), writes <dir>/closed and waits to be killed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net_harness.h"
#include "socket/socket_net.h"

using namespace signlion::nettest;

static std::vector<size_t> parseSizes(const char* s) {
  std::vector<size_t> out;
  while (*s) {
    char* end = nullptr;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end == 'K' || *end == 'k')
      v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
      v <<= 20, end++;
    out.push_back(v);
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s) break;
  }
  return out;
}

static int sendBig(const PeerOptions& opt) {
  NetDriver net;
  std::string err;
  void* lib = openPlugin(opt.lib, &err);
  if (lib == nullptr || !net.bind(lib, opt.version) || net.init() != ncclSuccess) {
    fprintf(stderr, "sendbig: cannot load %s: %s\n", opt.lib.c_str(), err.c_str());
    return 1;
  }
  int dev = findDevice(net, opt.ifname);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  std::ifstream f(opt.dir + "/listener.handle", std::ios::binary);
  if (dev < 0 || !f.read(handle, sizeof(handle))) return 1;
  void* scomm = nullptr;
  for (int i = 0; i < 1000000 && scomm == nullptr; i++)
    if (net.connect(dev, handle, &scomm) != ncclSuccess) return 1;
  if (scomm == nullptr) return 1;
  std::vector<char> buf(256u << 20, 'x');
  void* req = nullptr;
  if (net.isend(scomm, buf.data(), buf.size(), 1, nullptr, &req) != ncclSuccess || req == nullptr) return 1;
  std::ofstream(opt.dir + "/sending") << "1";
  // Keep the transfer going until killed; bounded all the same.
  int done = 0;
  for (int i = 0; i < 600000 && !done; i++) {
    if (net.test(req, &done, nullptr) != ncclSuccess) return 2;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return 3;
}

static int recvBig(const PeerOptions& opt, bool closeEarly) {
  NetDriver net;
  std::string err;
  void* lib = openPlugin(opt.lib, &err);
  if (lib == nullptr || !net.bind(lib, opt.version) || net.init() != ncclSuccess) {
    fprintf(stderr, "recvbig: cannot load %s: %s\n", opt.lib.c_str(), err.c_str());
    return 1;
  }
  int dev = findDevice(net, opt.ifname);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* l = nullptr;
  if (dev < 0 || net.listen(dev, handle, &l) != ncclSuccess) return 1;
  std::ofstream(opt.dir + "/peer.handle.tmp", std::ios::binary).write(handle, sizeof(handle));
  if (rename((opt.dir + "/peer.handle.tmp").c_str(), (opt.dir + "/peer.handle").c_str()) != 0) return 1;
  void* rcomm = nullptr;
  for (int i = 0; i < 3000000 && rcomm == nullptr; i++)
    if (net.accept(l, &rcomm) != ncclSuccess) return 1;
  if (rcomm == nullptr) return 1;
  std::vector<char> buf(256u << 20);
  void* d = buf.data();
  size_t cap = buf.size();
  int tag = 1;
  void* req = nullptr;
  if (net.irecv(rcomm, 1, &d, &cap, &tag, nullptr, &req) != ncclSuccess || req == nullptr) return 1;
  int done = 0;
  uint64_t sent = 0, got = 0;
  for (int i = 0; i < 600000 && !done && got < (4u << 20); i++) {
    if (net.test(req, &done, nullptr) != ncclSuccess) return 2;
    signlion::net::commBytes(rcomm, &sent, &got);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::ofstream(opt.dir + "/receiving") << "1";
  if (closeEarly) {
    if (net.closeRecv(rcomm) != ncclSuccess) return 4;
    std::ofstream(opt.dir + "/closed") << "1";
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the test kills us first
    return 3;
  }
  for (int i = 0; i < 600000 && !done; i++) {
    if (net.test(req, &done, nullptr) != ncclSuccess) return 2;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return 3;
}

int main(int argc, char** argv) {
  PeerOptions opt;
  std::string mode = "exchange";
  opt.sizes = {0, 1, 7, 8, 4096, 16383, 16384, 16385, 65536, 131071, 1 << 20, (1 << 20) + 3, 8 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--lib")
      opt.lib = v;
    else if (k == "--dir")
      opt.dir = v;
    else if (k == "--role")
      opt.role = v;
    else if (k == "--ifname")
      opt.ifname = v;
    else if (k == "--version")
      opt.version = atoi(v);
    else if (k == "--sizes")
      opt.sizes = parseSizes(v);
    else if (k == "--mode")
      mode = v;
    else {
      fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (opt.dir.empty()) {
    fprintf(stderr, "--dir is required\n");
    return 2;
  }
  if (mode == "sendbig") return sendBig(opt);
  if (mode == "recvbig" || mode == "recvclose") return recvBig(opt, mode == "recvclose");
  if (opt.role != "a" && opt.role != "b") {
    fprintf(stderr, "--role a|b is required\n");
    return 2;
  }
  return runPeer(opt);
}
