// Test harness for ncclNet plugins: loads a plugin the way NCCL does and
// drives any of the v8..v12 structs through one version-neutral interface,
// the way NCCL's proxy does (non-blocking connect/accept loops, isend/irecv
// retried while they return no request, test polled until done).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v8.h"
#include "net_v9.h"

namespace signlion {
namespace nettest {

// dlopen(RTLD_NOW | RTLD_LOCAL), as NCCL's plugin loader does.
void* openPlugin(const std::string& nameOrPath, std::string* err);

class NetDriver {
 public:
  // version 8..12; false if the library lacks ncclNetPlugin_v<version>.
  bool bind(void* lib, int version);
  // The in-process transport (no dlopen).
  void bindInProcess(int version);

  int version() const { return version_; }
  const char* name() const;
  // logger: what NCCL would pass (nullptr: the plugin logs on its own).
  ncclResult_t init(ncclDebugLogger_t logger = nullptr);
  ncclResult_t finalize();
  ncclResult_t devices(int* ndev);
  // The newest layout: older versions' fields copied, the rest zero (v8..v11
  // leave railId/planeId at 0).
  ncclResult_t properties(int dev, ncclNetProperties_v12_t* props);
  // NIC fusion (v9 and later; ncclInvalidUsage for v8, which has none).
  ncclResult_t makeVDevice(int ndevs, const int* devs, int* d);
  ncclResult_t listen(int dev, void* handle, void** listenComm);
  ncclResult_t connect(int dev, void* handle, void** sendComm);
  ncclResult_t accept(void* listenComm, void** recvComm);
  ncclResult_t regMr(void* comm, void* data, size_t size, void** mhandle);
  ncclResult_t deregMr(void* comm, void* mhandle);
  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t test(void* request, int* done, int* sizes);
  ncclResult_t closeSend(void* comm);
  ncclResult_t closeRecv(void* comm);
  ncclResult_t closeListen(void* comm);

 private:
  void bindV12(const ncclNet_v12_t* v12);

  int version_ = 0;
  const ncclNet_v8_t* v8_ = nullptr;
  const ncclNet_v9_t* v9_ = nullptr;
  const ncclNet_v10_t* v10_ = nullptr;
  const ncclNet_v11_t* v11_ = nullptr;
  const ncclNet_v12_t* v12_ = nullptr;
  void* ctx_ = nullptr;
};

// Deterministic bytes: the receiver can regenerate what the sender sent.
void fillPattern(void* buf, size_t size, uint64_t seed);
// Index of the first wrong byte, or SIZE_MAX when all match.
size_t checkPattern(const void* buf, size_t size, uint64_t seed);

// Bounded loops: every wait gives up after this long (tests fail, never hang).
constexpr int kLoopLimitMs = 60000;

// listen on dev, connect to it and accept it, all non-blocking from one thread.
ncclResult_t connectPair(NetDriver& net, int dev, void** sendComm, void** recvComm, std::string* err);

// Connects n senders to listenComm at once, each through its own copy of the
// listener's handle (handles[i]: a connect in progress keeps its state
// there), driving connect and accept in turns as NCCL's proxy does: a
// transport's connect may need the listener's accept to complete
// (docs/dev/PLUGIN_INTERNALS.md, "Connect and accept"). Done once every handle has its send
// comm and n recv comms were accepted (appended to *recvComms, in the order
// accept returned them, which need not be the senders' order).
ncclResult_t connectAccept(NetDriver& net, int dev, void* listenComm, int n, char* const* handles, void** sendComms,
                           std::vector<void*>* recvComms, std::string* err);

// Posts one receive of recvCap bytes and one send of size bytes on a pair,
// completes both, checks the reported sizes and every received byte.
bool transfer(NetDriver& net, void* sendComm, void* recvComm, size_t size, size_t recvCap, int tag, std::string* err);
// The same when the two comms belong to two copies of the transport (a
// dlopen'ed plugin and the in-process library): each is driven by its own.
bool transferBetween(NetDriver& sendNet, void* sendComm, NetDriver& recvNet, void* recvComm, size_t size,
                     size_t recvCap, int tag, std::string* err);

// The plugin library a suite drives: SIGNLION_TEST_NET_PLUGIN when set (CTest
// runs each plugin suite once per transport library: socket, UCX over tcp,
// UCX over shared memory), else `builtin` (the socket plugin's path).
inline std::string pluginUnderTest(const char* builtin) {
  const char* e = getenv("SIGNLION_TEST_NET_PLUGIN");
  return e != nullptr && *e != '\0' ? std::string(e) : std::string(builtin);
}
// Whether that library is the socket transport (tests of socket internals,
// such as control-connection pairing or stream headers, apply to it only).
// The file name decides, not the directories above it: a checkout in a
// folder such as wt-ucxkill/ made the socket suite take the socket library
// for UCX's.
inline bool pluginIsSocket(const std::string& lib) {
  size_t slash = lib.find_last_of('/');
  return lib.find("-ucx", slash == std::string::npos ? 0 : slash + 1) == std::string::npos;
}

// Index of the first device whose name is ifname, or -1.
int findDevice(NetDriver& net, const std::string& ifname);

// One side of a two-process exchange. Both sides listen, publish their handle
// as <dir>/<role>.handle, connect to the other's, then per size send and
// receive at once (interleaved both ways, receives posted larger than the
// message), then a burst of the maximum outstanding requests each way.
struct PeerOptions {
  std::string lib;  // plugin path or name
  int version = 11;
  std::string dir;   // handle exchange directory
  std::string role;  // "a" or "b"
  std::string ifname = "lo";
  std::vector<size_t> sizes;
};
// 0 on success; otherwise prints the failure to stderr and returns 1.
int runPeer(const PeerOptions& opt);

}  // namespace nettest
}  // namespace signlion
