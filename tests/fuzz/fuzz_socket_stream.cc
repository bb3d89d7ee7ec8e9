// A recv comm of the socket transport (plugin/socket/socket_transport.h) fed
// by a peer that writes arbitrary bytes: the input is what arrives on the
// control stream (headers, inline payloads, pairing headers) and on the one
// data stream, after a valid handshake. Receives for four tags are posted and
// tested until the comm completes them or fails; then it is closed. Whatever
// the bytes, the comm must end in a result or an error, within a bounded
// number of calls, without a sanitizer report.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fuzz_bytes.h"
#include "net/socket_stream.h"
#include "socket/socket_transport.h"
#include "socket/socket_wire.h"

using namespace signlion;
using namespace signlion::net;

namespace {

constexpr int kTags = 4;
constexpr size_t kRecvBytes = 1 << 16;
constexpr int kMaxTests = 400;  // test() calls per input: a hang is a failure of the harness's bound

struct Listener {
  void* comm = nullptr;
  SocketListenHandle handle{};
  SocketAddress addr{};
};

Listener& listener() {
  static Listener l = [] {
    setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
    setenv("SIGNLION_NSOCKS", "1", 1);
    setenv("SIGNLION_NTHREADS", "1", 1);
    setenv("SIGNLION_SOCKET_TIMEOUT", "200", 1);
    Listener r;
    char h[kSocketHandleBytes];
    int ndev = 0;
    if (socketInit(nullptr) != ncclSuccess || socketDevices(&ndev) != ncclSuccess || ndev < 1 ||
        socketListen(0, h, &r.comm) != ncclSuccess)
      abort();
    memcpy(&r.handle, h, sizeof(r.handle));
    if (!fromHandleNic(r.handle.nics[0], &r.addr)) abort();
    return r;
  }();
  return l;
}

// A connection that is reset at close (SO_LINGER 0) rather than left in
// TIME_WAIT: tens of thousands of inputs would use up the ephemeral ports.
int connectRaw(const SocketAddress& to) {
  int fd = socket(to.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) abort();
  linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  socklen_t len = to.sa.sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  // libFuzzer's -timeout alarm interrupts system calls: an interrupted
  // connect goes on in the background, and is waited for here.
  int err = connect(fd, &to.sa, len) == 0 ? 0 : errno;
  if (err == EINTR) {
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, 1000) < 0 && errno == EINTR) {
    }
    socklen_t el = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
  }
  if (err != 0) {
    fprintf(stderr, "fuzz_socket_stream: connect: %s\n", strerror(err));
    abort();
  }
  return fd;
}

void writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;  // the comm closed its end: what is left is not read
    c += k;
    n -= (size_t)k;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  Listener& l = listener();
  static uint64_t connId = 1;
  // Split: the first byte says how much of the rest goes to the data stream.
  size_t dataBytes = size > 0 ? (size - 1) * data[0] / 256 : 0;
  const uint8_t* ctrl = size > 0 ? data + 1 : data;
  size_t ctrlBytes = size > 0 ? size - 1 - dataBytes : 0;
  const uint8_t* dataStream = ctrl + ctrlBytes;

  int fds[2] = {connectRaw(l.addr), connectRaw(l.addr)};
  for (int i = 0; i < 2; i++) {
    SocketHello he{};
    he.magic = kSocketHandleMagic;
    he.version = kSocketWireVersion;
    he.kind = i == 0 ? 0 : 1;
    he.index = 0;
    he.nsocks = 1;
    he.chunkSize = 4096;
    he.secret = l.handle.secret;
    he.connId = connId;
    he.instance = 0x1234;  // another process: this one never initiates a pairing
    writeAll(fds[i], &he, sizeof(he));
  }
  connId++;
  void* comm = nullptr;
  for (int i = 0; i < 2000 && comm == nullptr; i++) {
    if (socketAccept(l.comm, &comm) != ncclSuccess) abort();
    if (comm == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (comm == nullptr) abort();
  // The socket buffers take the whole input (libFuzzer's -max_len keeps it
  // small), then the peer's end of file.
  writeAll(fds[0], ctrl, ctrlBytes);
  writeAll(fds[1], dataStream, dataBytes);
  shutdown(fds[0], SHUT_WR);
  shutdown(fds[1], SHUT_WR);

  static std::vector<char> bufs[kTags];
  void* req[kTags] = {};
  for (int t = 0; t < kTags; t++) bufs[t].resize(kRecvBytes);
  bool failed = false;
  for (int round = 0; round < kMaxTests && !failed; round++) {
    for (int t = 0; t < kTags && !failed; t++) {
      if (req[t] == nullptr) {
        void* d = bufs[t].data();
        size_t sz = kRecvBytes;
        int tag = t;
        void* mh = nullptr;
        if (socketIrecv(comm, 1, &d, &sz, &tag, &mh, &req[t]) != ncclSuccess) failed = true;
        continue;
      }
      int done = 0, got = 0;
      if (socketTest(req[t], &done, &got) != ncclSuccess) failed = true;
      if (done) {
        if (got < 0 || (size_t)got > kRecvBytes) __builtin_trap();
        req[t] = nullptr;
      }
    }
    if (!failed) socketCommWait(comm, 2);
  }
  close(fds[0]);  // the peer goes first, with a reset: no TIME_WAIT at either end
  close(fds[1]);
  socketCloseRecv(comm);
  return 0;
}
