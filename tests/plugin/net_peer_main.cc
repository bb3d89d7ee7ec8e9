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
//   signlion_net_peer --mode connectclose --lib PATH --dir DIR [--count N] [--ifname lo]
//     N times (default 20): connects to <dir>/listener.handle and closes the
//     send comm the moment connect returns it. Exit 0 when all N connected.
//   signlion_net_peer --mode stream --role a|b --ifname IF1,IF2,.. --lib PATH --dir DIR
//                     [--bytes 1G] [--version 12]
//     one comm from a to b on the device fused from the listed interfaces
//     (makeVDevice; one interface: that device): a sends --bytes in 4 MiB
//     messages, 8 in flight, b receives and checks every 8th message; each
//     prints its rate ("stream: ... Gbit/s"). Exit 0 on success, 4 when a
//     transfer call failed (the error is printed), 1 on a setup problem.
//   signlion_net_peer --mode fuse --ifname IF1,IF2,.. --lib PATH --dir DIR [--version 12]
//     asks for the device fused from the listed interfaces, as NCCL's NIC
//     fusion does: exit 0 when it is made (and reports what it should), 5
//     when makeVDevice refuses and no device was made, 1 otherwise.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "net/socket_net.h"
#include "net_harness.h"

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
    else if (*end == 'G' || *end == 'g')
      v <<= 30, end++;
    out.push_back(v);
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s) break;
  }
  return out;
}

// Loads the plugin under test into net (every mode starts so); false, with
// a line naming the mode, when it cannot.
static bool loadPlugin(const PeerOptions& opt, const char* mode, NetDriver* net) {
  std::string err;
  void* lib = openPlugin(opt.lib, &err);
  if (lib == nullptr || !net->bind(lib, opt.version) || net->init() != ncclSuccess) {
    fprintf(stderr, "%s: cannot load %s: %s\n", mode, opt.lib.c_str(), err.c_str());
    return false;
  }
  return true;
}

// The listener's handle, written by the test into <dir>/listener.handle.
static bool readListenerHandle(const PeerOptions& opt, char* handle) {
  std::ifstream f(opt.dir + "/listener.handle", std::ios::binary);
  return static_cast<bool>(f.read(handle, NCCL_NET_HANDLE_MAXSIZE));
}

static int sendBig(const PeerOptions& opt) {
  NetDriver net;
  if (!loadPlugin(opt, "sendbig", &net)) return 1;
  int dev = findDevice(net, opt.ifname);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (dev < 0 || !readListenerHandle(opt, handle)) return 1;
  void* scomm = nullptr;
  for (int i = 0; i < 1000000 && scomm == nullptr; i++)
    if (net.connect(dev, handle, &scomm) != ncclSuccess) return 1;
  if (scomm == nullptr) return 1;
  std::vector<char> buf(256u << 20, 'x');
  void* req = nullptr;
  // No request yet is "try again" (UCX: the listener's answer is on its way).
  for (int i = 0; i < 1000000 && req == nullptr; i++)
    if (net.isend(scomm, buf.data(), buf.size(), 1, nullptr, &req) != ncclSuccess) return 1;
  if (req == nullptr) return 1;
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
  if (!loadPlugin(opt, "recvbig", &net)) return 1;
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
  // 4 MiB in where the transport counts bytes as they arrive (the socket
  // one). Where it counts a message only once complete (UCX), a few
  // progress calls before an orderly close, and none before we are killed:
  // one call may take all 256 MiB (over shared memory we copy them
  // ourselves), and the sender must see us die with its send in flight.
  const bool countsPartialBytes = pluginIsSocket(opt.lib);
  const int ucxCalls = closeEarly ? 3 : 0;
  for (int i = 0; i < 600000 && !done && (countsPartialBytes ? got < (4u << 20) : i < ucxCalls); i++) {
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

// The device fused from a comma list of interface names; -1 if one is missing.
static int fusedDevice(NetDriver& net, const std::string& list, int version) {
  std::vector<int> devs;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int d = findDevice(net, name);
    if (d < 0) {
      fprintf(stderr, "stream: no device %s\n", name.c_str());
      return -1;
    }
    devs.push_back(d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  int ndev = 0;
  if (net.devices(&ndev) != ncclSuccess) return -1;
  int d = -1;
  if (net.makeVDevice((int)devs.size(), devs.data(), &d) != ncclSuccess) return -1;
  if (devs.size() == 1) return d == devs[0] ? d : -1;
  // What a fused device reports (docs/PLUGIN.md, "NIC fusion"): a new index
  // after the others, names joined by '+', speeds summed, its members in
  // vProps, no rail or plane; the same list again is the same device.
  ncclNetProperties_v12_t fused, member;
  int again = -1, after = 0;
  std::string name;
  int speed = 0;
  for (size_t i = 0; i < devs.size(); i++) {
    if (net.properties(devs[i], &member) != ncclSuccess) return -1;
    name += (i ? "+" : "") + std::string(member.name);
    speed += member.speed;
  }
  fused.name = nullptr;
  bool ok = net.properties(d, &fused) == ncclSuccess && net.devices(&after) == ncclSuccess &&
            net.makeVDevice((int)devs.size(), devs.data(), &again) == ncclSuccess;
  ok = ok && d == ndev && after == ndev + 1 && again == d && name == fused.name && fused.speed == speed &&
       fused.vProps.ndevs == (int)devs.size();
  for (size_t i = 0; ok && i < devs.size(); i++) ok = fused.vProps.devs[i] == devs[i];
  if (ok && version == 12) ok = fused.railId == NCCL_NET_ID_UNDEF && fused.planeId == NCCL_NET_ID_UNDEF;
  if (!ok) {
    fprintf(stderr, "stream: fused device %d (of %d) reports name %s, speed %d, %d members; expected %s, %d\n", d,
            after, fused.name ? fused.name : "?", fused.speed, fused.vProps.ndevs, name.c_str(), speed);
    return -1;
  }
  return d;
}

static int fuse(const PeerOptions& opt) {
  NetDriver net;
  if (!loadPlugin(opt, "fuse", &net)) return 1;
  int before = 0, after = 0;
  if (net.devices(&before) != ncclSuccess) return 1;
  int dev = fusedDevice(net, opt.ifname, opt.version);
  if (net.devices(&after) != ncclSuccess) return 1;
  net.finalize();
  if (dev >= 0) {
    printf("fuse: %s fused into device %d\n", opt.ifname.c_str(), dev);
    return 0;
  }
  printf("fuse: %s not fused, %d devices before and %d after\n", opt.ifname.c_str(), before, after);
  return after == before ? 5 : 1;
}

static int stream(const PeerOptions& opt, size_t bytes) {
  const size_t kMsg = size_t(4) << 20;
  const int kWindow = 8;
  NetDriver net;
  if (!loadPlugin(opt, "stream", &net)) return 1;
  int dev = fusedDevice(net, opt.ifname, opt.version);
  if (dev < 0) return 1;
  bool sender = opt.role == "a";
  void* comm = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  if (sender) {
    std::ifstream f;
    while (!(f = std::ifstream(opt.dir + "/b.handle", std::ios::binary)) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!f.read(handle, sizeof(handle))) return 1;
    while (comm == nullptr && std::chrono::steady_clock::now() < deadline)
      if (net.connect(dev, handle, &comm) != ncclSuccess) return 1;
  } else {
    void* l = nullptr;
    if (net.listen(dev, handle, &l) != ncclSuccess) return 1;
    std::ofstream(opt.dir + "/b.handle.tmp", std::ios::binary).write(handle, sizeof(handle));
    if (rename((opt.dir + "/b.handle.tmp").c_str(), (opt.dir + "/b.handle").c_str()) != 0) return 1;
    while (comm == nullptr && std::chrono::steady_clock::now() < deadline)
      if (net.accept(l, &comm) != ncclSuccess) return 1;
    net.closeListen(l);
  }
  if (comm == nullptr) return 1;
  size_t count = (bytes + kMsg - 1) / kMsg;
  std::vector<std::vector<char>> buf(kWindow, std::vector<char>(kMsg));
  std::vector<void*> req(kWindow, nullptr);
  std::vector<size_t> which(kWindow, 0);
  size_t posted = 0, done = 0;
  auto start = std::chrono::steady_clock::now();
  while (done < count) {
    if (std::chrono::steady_clock::now() > start + std::chrono::seconds(300)) {
      fprintf(stderr, "stream: gave up after 300 s\n");
      return 1;
    }
    for (int w = 0; w < kWindow; w++) {
      if (req[w] == nullptr && posted < count) {
        ncclResult_t r;
        if (sender) {
          if (posted % 8 == 0) fillPattern(buf[w].data(), kMsg, posted);
          r = net.isend(comm, buf[w].data(), kMsg, 0, nullptr, &req[w]);
        } else {
          void* d = buf[w].data();
          size_t cap = kMsg;
          int tag = 0;
          r = net.irecv(comm, 1, &d, &cap, &tag, nullptr, &req[w]);
        }
        if (r != ncclSuccess) {
          fprintf(stderr, "stream: %s failed: %d\n", sender ? "isend" : "irecv", (int)r);
          return 4;
        }
        if (req[w] != nullptr) which[w] = posted++;
      }
      if (req[w] == nullptr) continue;
      int fin = 0;
      ncclResult_t r = net.test(req[w], &fin, nullptr);
      if (r != ncclSuccess) {
        fprintf(stderr, "stream: test failed: %d after %zu of %zu messages\n", (int)r, done, count);
        return 4;
      }
      if (!fin) continue;
      if (!sender && which[w] % 8 == 0 && checkPattern(buf[w].data(), kMsg, which[w]) != SIZE_MAX) {
        fprintf(stderr, "stream: message %zu arrived wrong\n", which[w]);
        return 1;
      }
      req[w] = nullptr;
      done++;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("stream: %s %zu bytes over %s in %.3f s: %.3f Gbit/s\n", sender ? "sent" : "received", count * kMsg,
         opt.ifname.c_str(), s, count * kMsg * 8 / s / 1e9);
  if (sender) {
    net.closeSend(comm);
  } else {
    net.closeRecv(comm);
  }
  net.finalize();
  return 0;
}

static int connectClose(const PeerOptions& opt, int count) {
  NetDriver net;
  if (!loadPlugin(opt, "connectclose", &net)) return 1;
  int dev = findDevice(net, opt.ifname);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (dev < 0 || !readListenerHandle(opt, handle)) return 1;
  for (int n = 0; n < count; n++) {
    char h[NCCL_NET_HANDLE_MAXSIZE];  // each connect keeps its state in its own copy
    memcpy(h, handle, sizeof(h));
    void* scomm = nullptr;
    auto start = std::chrono::steady_clock::now();
    while (scomm == nullptr && std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
      if (net.connect(dev, h, &scomm) != ncclSuccess) {
        fprintf(stderr, "connectclose: connect %d failed\n", n);
        return 1;
      }
    if (scomm == nullptr) {
      fprintf(stderr, "connectclose: connect %d did not finish in 30 s\n", n);
      return 1;
    }
    if (net.closeSend(scomm) != ncclSuccess) return 1;  // at once: the bye follows the last setup message
  }
  net.finalize();
  return 0;
}

int main(int argc, char** argv) {
  PeerOptions opt;
  std::string mode = "exchange";
  size_t bytes = size_t(1) << 30;
  int count = 20;
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
    else if (k == "--count")
      count = atoi(v);
    else if (k == "--bytes")
      bytes = parseSizes(v).at(0);
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
  if (mode == "stream") return stream(opt, bytes);
  if (mode == "fuse") return fuse(opt);
  if (mode == "connectclose") return connectClose(opt, count);
  if (opt.role != "a" && opt.role != "b") {
    fprintf(stderr, "--role a|b is required\n");
    return 2;
  }
  return runPeer(opt);
}
