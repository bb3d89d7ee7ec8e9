// The plugin across processes on loopback, as NCCL uses it: each rank a
// process with its own copy of the dlopen'ed library. The other side is
// signlion_net_peer, fork/exec'ed.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/param.h"
#include "net/socket_net.h"
#include "net_harness.h"

using namespace signlion::nettest;

namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A fresh directory for the peers' files, removed when the test leaves its
// scope (a failed ASSERT returns early: the directory goes too).
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/signlion-net-XXXXXX";
    const char* d = mkdtemp(tmpl);
    path_ = d ? d : "";
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::string cmd = "rm -rf '" + path_ + "'";
    if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

pid_t spawn(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits for pid at most limitMs; kills it if still running. Returns the exit status or -1.
int reap(pid_t pid, int limitMs) {
  int64_t start = nowMs();
  int status = 0;
  while (nowMs() - start < limitMs) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

void exchange(int version, const std::string& sizes, std::vector<size_t> mySizes) {
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  signlion::paramResetCache();
  TempDir tmp;
  const std::string& dir = tmp.path();
  ASSERT_FALSE(dir.empty());
  pid_t child = spawn({SIGNLION_NET_PEER_PATH, "--lib", pluginUnderTest(SIGNLION_PLUGIN_PATH), "--dir", dir, "--role",
                       "b", "--version", std::to_string(version), "--sizes", sizes});
  ASSERT_GT(child, 0);
  PeerOptions opt;
  opt.lib = pluginUnderTest(SIGNLION_PLUGIN_PATH);
  opt.version = version;
  opt.dir = dir;
  opt.role = "a";
  opt.sizes = mySizes;
  int mine = runPeer(opt);
  int theirs = reap(child, 120000);
  EXPECT_EQ(mine, 0);
  EXPECT_EQ(theirs, 0);
}

}  // namespace

// Interleaved send and receive on both sides, sizes 0 .. 256 MiB (once), and a
// burst of the maximum outstanding requests each way.
TEST(PluginTwoProcess, ExchangeV11UpTo256MiB) {
  exchange(11, "0,1,7,4096,16384,16385,1048579,268435456", {0, 1, 7, 4096, 16384, 16385, 1048579, size_t(256) << 20});
}

TEST(PluginTwoProcess, ExchangeV8) { exchange(8, "0,3,65536,3000001", {0, 3, 65536, 3000001}); }

// The failure tests' side: the plugin (v11) on loopback with a 2 s socket
// timeout (timeoutMs), so a failure shows within the test's bounds.
static void openWithShortTimeout(void** lib, NetDriver* net, int* dev, int timeoutMs = 2000) {
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  setenv("SIGNLION_SOCKET_TIMEOUT", std::to_string(timeoutMs).c_str(), 1);
  signlion::paramResetCache();
  std::string err;
  *lib = openPlugin(pluginUnderTest(SIGNLION_PLUGIN_PATH), &err);
  ASSERT_NE(*lib, nullptr) << err;
  ASSERT_TRUE(net->bind(*lib, 11));
  ASSERT_EQ(net->init(), ncclSuccess);
  *dev = findDevice(*net, "lo");
  ASSERT_GE(*dev, 0);
}

// Listens on dev and writes the handle to <dir>/listener.handle, where the
// peer process (net_peer_main's modes) reads it.
static void listenAndPublish(NetDriver* net, int dev, const std::string& dir, void** listenComm) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(net->listen(dev, handle, listenComm), ncclSuccess);
  ASSERT_TRUE(std::ofstream(dir + "/listener.handle", std::ios::binary).write(handle, sizeof(handle)));
}

// Undoes openWithShortTimeout.
static void closeShortTimeout(void* lib, NetDriver* net) {
  net->finalize();
  dlclose(lib);
  unsetenv("SIGNLION_SOCKET_TIMEOUT");
  signlion::paramResetCache();
}

// The receiving side of a 256 MiB message whose sender dies (SIGKILL) or
// freezes (SIGSTOP) mid-transfer: test() must return an error within
// SIGNLION_SOCKET_TIMEOUT, never hang.
static void peerFailsMidTransfer(int sig) {
  void* lib = nullptr;
  NetDriver net;
  int dev = -1;
  openWithShortTimeout(&lib, &net, &dev);
  if (::testing::Test::HasFatalFailure()) return;
  TempDir tmp;
  const std::string& dir = tmp.path();
  void* l = nullptr;
  listenAndPublish(&net, dev, dir, &l);
  if (::testing::Test::HasFatalFailure()) return;
  pid_t child = spawn(
      {SIGNLION_NET_PEER_PATH, "--mode", "sendbig", "--lib", pluginUnderTest(SIGNLION_PLUGIN_PATH), "--dir", dir});
  ASSERT_GT(child, 0);
  void* r = nullptr;
  int64_t start = nowMs();
  while (r == nullptr && nowMs() - start < 30000) ASSERT_EQ(net.accept(l, &r), ncclSuccess);
  ASSERT_NE(r, nullptr);
  std::vector<char> buf(size_t(256) << 20);
  void* d = buf.data();
  size_t cap = buf.size();
  int tag = 1;
  void* req = nullptr;
  ASSERT_EQ(net.irecv(r, 1, &d, &cap, &tag, nullptr, &req), ncclSuccess);
  // Receive until some of the message has arrived, then hit the sender.
  struct stat st;
  while (stat((dir + "/sending").c_str(), &st) != 0 && nowMs() - start < 30000) usleep(1000);
  int done = 0;
  uint64_t got = 0, sent;
  ncclResult_t res = ncclSuccess;
  // The socket transport counts bytes as they arrive: wait for 4 MiB. The
  // UCX one counts a message only when it completes, and one progress call
  // of ours may move all 256 MiB (over shared memory the receiver copies
  // them itself): there the sender is hit right after its isend, the
  // message announced and none of it taken.
  const bool countsPartialBytes = pluginIsSocket(pluginUnderTest(SIGNLION_PLUGIN_PATH));
  while (countsPartialBytes && got < (4u << 20) && !done && res == ncclSuccess && nowMs() - start < 30000) {
    res = net.test(req, &done, nullptr);
    signlion::net::commBytes(r, &sent, &got);
  }
  ASSERT_EQ(res, ncclSuccess);
  ASSERT_EQ(done, 0) << "the whole message arrived before the sender could be stopped";
  ASSERT_EQ(kill(child, sig), 0);
  int64_t hit = nowMs();
  while (!done && res == ncclSuccess && nowMs() - hit < 20000) res = net.test(req, &done, nullptr);
  if (done) {
    // Only where the receiver reads the sender's memory itself (UCX over
    // shared memory: cma reads a stopped process, and one being killed
    // until it is gone): the message is then complete, and exact.
    const char* tls = getenv("UCX_TLS");
    bool receiverCopies = !countsPartialBytes && (tls == nullptr || strstr(tls, "sm") != nullptr ||
                                                  strstr(tls, "cma") != nullptr || strstr(tls, "all") != nullptr);
    EXPECT_TRUE(receiverCopies) << "a message completed from a sender that was stopped or killed";
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 'x'), (std::ptrdiff_t)buf.size()) << "completed with wrong data";
  } else {
    EXPECT_EQ(res, ncclRemoteError) << "after " << nowMs() - hit << " ms";
  }
  kill(child, SIGKILL);
  reap(child, 10000);
  net.closeRecv(r);
  net.closeListen(l);
  closeShortTimeout(lib, &net);
}

TEST(PluginTwoProcess, PeerKilledMidTransferIsAnError) { peerFailsMidTransfer(SIGKILL); }
TEST(PluginTwoProcess, PeerFrozenMidTransferTimesOut) { peerFailsMidTransfer(SIGSTOP); }

// The sending side of a 256 MiB message whose receiver dies (SIGKILL): an
// error from test() within SIGNLION_SOCKET_TIMEOUT, not taken for an orderly
// close. Or whose receiver closes its recv comm mid-message (an orderly
// close, the process stays): the send completes, new sends complete, no
// error, and closing frees everything.
static void receiverEndsMidTransfer(bool orderly) {
  void* lib = nullptr;
  NetDriver net;
  int dev = -1;
  // The orderly case expects no timeout at all: a longer one keeps a receiver
  // that a loaded machine (a sanitizer build, other jobs) leaves unscheduled
  // for 2 s from failing the send as stuck.
  openWithShortTimeout(&lib, &net, &dev, orderly ? 10000 : 2000);
  if (::testing::Test::HasFatalFailure()) return;
  TempDir tmp;
  const std::string& dir = tmp.path();
  pid_t child = spawn({SIGNLION_NET_PEER_PATH, "--mode", orderly ? "recvclose" : "recvbig", "--lib",
                       pluginUnderTest(SIGNLION_PLUGIN_PATH), "--dir", dir});
  ASSERT_GT(child, 0);
  struct stat st;
  int64_t start = nowMs();
  while (stat((dir + "/peer.handle").c_str(), &st) != 0 && nowMs() - start < 30000) usleep(1000);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_TRUE(std::ifstream(dir + "/peer.handle", std::ios::binary).read(handle, sizeof(handle)));
  void* s = nullptr;
  while (s == nullptr && nowMs() - start < 30000) ASSERT_EQ(net.connect(dev, handle, &s), ncclSuccess);
  ASSERT_NE(s, nullptr);
  std::vector<char> buf(size_t(256) << 20, 'y');
  void* req = nullptr;
  // No request yet is "try again" (UCX: the listener's answer is on its way).
  while (req == nullptr && nowMs() - start < 30000)
    ASSERT_EQ(net.isend(s, buf.data(), buf.size(), 1, nullptr, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  int done = 0;
  ncclResult_t res = ncclSuccess;
  // The receiver has 4 MiB of the 256 when it writes this (an orderly one
  // closes right after, so our send may complete inside this loop already).
  while (stat((dir + "/receiving").c_str(), &st) != 0 && res == ncclSuccess && !done && nowMs() - start < 30000)
    res = net.test(req, &done, nullptr);
  ASSERT_EQ(res, ncclSuccess);
  if (!orderly) {
    ASSERT_EQ(done, 0) << "the whole message went before the receiver ended";
  }
  if (!orderly) {
    ASSERT_EQ(kill(child, SIGKILL), 0);
  }
  int64_t hit = nowMs();
  while (!done && res == ncclSuccess && nowMs() - hit < 20000) res = net.test(req, &done, nullptr);
  if (orderly) {
    EXPECT_EQ(res, ncclSuccess);
    EXPECT_EQ(done, 1);
    for (int i = 0; i < 40 && res == ncclSuccess; i++) {
      void* more = nullptr;
      res = net.isend(s, buf.data(), i % 2 ? 100 : size_t(4) << 20, 2, nullptr, &more);
      done = 0;
      while (more != nullptr && !done && res == ncclSuccess && nowMs() - hit < 20000)
        res = net.test(more, &done, nullptr);
    }
    EXPECT_EQ(res, ncclSuccess);
  } else {
    EXPECT_EQ(done, 0);
    EXPECT_EQ(res, ncclRemoteError) << "after " << nowMs() - hit << " ms";
  }
  EXPECT_LT(nowMs() - hit, 5000);
  kill(child, SIGKILL);
  reap(child, 10000);
  EXPECT_EQ(net.closeSend(s), ncclSuccess);
  closeShortTimeout(lib, &net);
}

TEST(PluginTwoProcess, ReceiverKilledMidTransferIsAnErrorForTheSender) { receiverEndsMidTransfer(false); }
TEST(PluginTwoProcess, ReceiverClosedMidTransferLetsTheSenderComplete) { receiverEndsMidTransfer(true); }

// Two-process form of PluginV11.ConnectorClosingRightAfterConnectIsStillAccepted
// (over UCX's shared memory too, which in one process goes through UCX's
// self transport instead): a peer closes each send comm the moment connect
// returns it; every one of its connections is accepted, none refused.
static std::atomic<int> gMpWarns{0};
static void countingLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  gMpWarns++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "plugin WARN ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

TEST(PluginTwoProcess, ConnectorClosingRightAfterConnectIsAcceptedEveryTime) {
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  signlion::paramResetCache();
  std::string err;
  void* lib = openPlugin(pluginUnderTest(SIGNLION_PLUGIN_PATH), &err);
  ASSERT_NE(lib, nullptr) << err;
  NetDriver net;
  ASSERT_TRUE(net.bind(lib, 11));
  ASSERT_EQ(net.init(&countingLogger), ncclSuccess);
  int dev = findDevice(net, "lo");
  ASSERT_GE(dev, 0);
  TempDir tmp;
  const std::string& dir = tmp.path();
  void* l = nullptr;
  listenAndPublish(&net, dev, dir, &l);
  if (::testing::Test::HasFatalFailure()) return;
  const int kCount = 40;
  const int warnsBefore = gMpWarns.load();
  pid_t child = spawn({SIGNLION_NET_PEER_PATH, "--mode", "connectclose", "--count", std::to_string(kCount), "--lib",
                       pluginUnderTest(SIGNLION_PLUGIN_PATH), "--dir", dir});
  ASSERT_GT(child, 0);
  int accepted = 0;
  int64_t start = nowMs();
  while (accepted < kCount && gMpWarns.load() == warnsBefore && nowMs() - start < kLoopLimitMs) {
    void* r = nullptr;
    ASSERT_EQ(net.accept(l, &r), ncclSuccess);
    if (r != nullptr) {
      accepted++;
      net.closeRecv(r);
    }
  }
  EXPECT_EQ(accepted, kCount) << "a connection connect() had returned was refused (WARN above)";
  EXPECT_EQ(reap(child, 30000), 0);
  net.closeListen(l);
  net.finalize();
  dlclose(lib);
}

// A process forked after the UCX transport's init cannot use UCX (the
// child's copy of the context has no progress thread and shares the
// parent's endpoints): its init is a clear error, not a hang later. (The
// multirank suite's forked ranks hung in a run that had used UCX before.)
TEST(PluginTwoProcess, UcxInitInAForkedChildIsAClearError) {
  if (pluginIsSocket(pluginUnderTest(SIGNLION_PLUGIN_PATH))) GTEST_SKIP() << "UCX only";
  void* lib = nullptr;
  NetDriver net;
  int dev = -1;
  openWithShortTimeout(&lib, &net, &dev);
  if (::testing::Test::HasFatalFailure()) return;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(net.init() == ncclSystemError ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's init did not fail (status " << status << ")";
  void* l = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  EXPECT_EQ(net.listen(dev, handle, &l), ncclSuccess) << "the parent's transport still works";
  if (l != nullptr) {
    EXPECT_EQ(net.closeListen(l), ncclSuccess);
  }
  closeShortTimeout(lib, &net);
}
