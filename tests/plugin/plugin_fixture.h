// The fixture the in-process plugin suites share: loads
// libnccl-net-signlion.so by path once per test, binds the version under test
// and drives it on loopback; plus an environment override and a WARN counter
// for lines logged through the logger NCCL would pass to init.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/param.h"
#include "net_harness.h"

namespace signlion {
namespace nettest {

inline int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Env {
 public:
  Env(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
    signlion::paramResetCache();
  }
  ~Env() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
    signlion::paramResetCache();
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// The logger the fixture hands to init, as NCCL hands its own: prints every
// line and counts the WARNs, so a test can check that something was (or was
// not) worth a warning. Its lines can come from helper threads.
struct PluginLog {
  static std::atomic<int>& warns() {
    static std::atomic<int> n{0};
    return n;
  }
  // WARNs of a recv comm closed with messages no receive claimed (which the
  // closing side reports by design), counted apart.
  static std::atomic<int>& unclaimedWarns() {
    static std::atomic<int> n{0};
    return n;
  }
  static int otherWarns() { return warns().load() - unclaimedWarns().load(); }
  // INFO lines of the UCX transport replacing its shared worker after a comm
  // ended uncleanly (ucx_worker.cc, replaceTaintedWorker): every comm the
  // process makes later uses the new worker, the old one is kept until exit.
  static std::atomic<int>& workerReplacements() {
    static std::atomic<int> n{0};
    return n;
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::string& last() {
    static std::string s;
    return s;
  }
  static void logger(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (strstr(msg, "new comms use a new UCX worker") != nullptr) workerReplacements()++;
    if (level != NCCL_LOG_WARN) return;
    warns()++;
    if (strstr(msg, "no receive claimed") != nullptr) unclaimedWarns()++;
    std::lock_guard<std::mutex> lk(mu());
    last() = msg;
    fprintf(stderr, "plugin WARN %s:%d %s\n", file, line, msg);
  }
  static std::string lastWarn() {
    std::lock_guard<std::mutex> lk(mu());
    return last();
  }
};

// For tests of the socket transport's own machinery (stream headers,
// control-connection pairing, helper threads): skipped under another transport.
#define SKIP_UNLESS_SOCKET_TRANSPORT()                                                                    \
  do {                                                                                                    \
    if (!::signlion::nettest::pluginIsSocket(::signlion::nettest::pluginUnderTest(SIGNLION_PLUGIN_PATH))) \
      GTEST_SKIP() << "socket transport internals";                                                       \
  } while (0)

// Loads the plugin by path once per test and binds the requested version.
class PluginTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
    signlion::paramResetCache();
    std::string err;
    lib_ = openPlugin(libPath(), &err);
    ASSERT_NE(lib_, nullptr) << err;
    ASSERT_TRUE(net_.bind(lib_, GetParam()));
    ASSERT_EQ(net_.init(&PluginLog::logger), ncclSuccess);
    dev_ = findDevice(net_, "lo");
    ASSERT_GE(dev_, 0);
  }
  void TearDown() override {
    net_.finalize();
    if (lib_) dlclose(lib_);
  }
  static std::string libPath() { return pluginUnderTest(SIGNLION_PLUGIN_PATH); }
  static bool socketTransport() { return pluginIsSocket(libPath()); }
  // The UCX transport restricted (UCX_TLS) to transports without peer error
  // handling (shared memory): UCX can then cancel no send, so a deregMr of a
  // region with a send the peer never receives fails after
  // SIGNLION_SOCKET_TIMEOUT (docs/PLUGIN.md, Failures).
  static bool sendsUncancellable() {
    const char* tls = getenv("UCX_TLS");
    return !socketTransport() && tls != nullptr && strstr(tls, "tcp") == nullptr;
  }
  void pair(void** s, void** r) {
    std::string err;
    ASSERT_EQ(connectPair(net_, dev_, s, r, &err), ncclSuccess) << err;
  }
  // Tests req until done or error; the error (or success) is returned.
  ncclResult_t waitReq(void* req, int* sizes, int64_t limitMs = kLoopLimitMs) {
    int done = 0;
    int64_t start = nowMs();
    ncclResult_t r = ncclSuccess;
    while (!done && nowMs() - start < limitMs && (r = net_.test(req, &done, sizes)) == ncclSuccess) {
    }
    if (r == ncclSuccess && !done) return ncclInternalError;
    return r;
  }

  void* lib_ = nullptr;
  NetDriver net_;
  int dev_ = -1;
};

// The behaviours that are version independent run on v11 only; the suite is
// instantiated once, in plugin_transfer_test.cc, for the tests of every file.
class PluginV11 : public PluginTest {};

}  // namespace nettest
}  // namespace signlion
