// signlion_net_peer: one side of a two-process ncclNet exchange (see
// net_harness.h, runPeer). Used by the multi-process and netns tests.
//   signlion_net_peer --lib PATH --dir DIR --role a|b [--ifname lo] [--version 11]
//                     [--sizes 0,1,4096,...]
//   signlion_net_peer --mode sendbig --lib PATH --dir DIR [--ifname lo]
//     connects to <dir>/listener.handle, posts one 256 MiB send, writes
//     <dir>/sending, then keeps testing it (the test kills or stops us).
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

using namespace signlion::nettest;

static std::vector<size_t> parseSizes(const char* s) {
  std::vector<size_t> out;
  while (*s) {
    char* end = nullptr;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
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

int main(int argc, char** argv) {
  PeerOptions opt;
  std::string mode = "exchange";
  opt.sizes = {0, 1, 7, 8, 4096, 16383, 16384, 16385, 65536, 131071, 1 << 20, (1 << 20) + 3, 8 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--lib") opt.lib = v;
    else if (k == "--dir") opt.dir = v;
    else if (k == "--role") opt.role = v;
    else if (k == "--ifname") opt.ifname = v;
    else if (k == "--version") opt.version = atoi(v);
    else if (k == "--sizes") opt.sizes = parseSizes(v);
    else if (k == "--mode") mode = v;
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
  if (opt.role != "a" && opt.role != "b") {
    fprintf(stderr, "--role a|b is required\n");
    return 2;
  }
  return runPeer(opt);
}
