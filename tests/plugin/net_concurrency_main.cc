// signlion_net_concurrency: comms of several threads are independent.
//
// Two processes (this binary, run once per role), each with --threads
// threads; thread t of one process talks only to thread t of the other,
// through its own listen comm, kept for the whole run (reused every round).
// Per round each thread connects --comms send comms to its partner's listen
// comm while it accepts the partner's, and drives all of them at once: each
// step it picks one comm at random (or the accept) and makes one call on it
// (connect, accept, regMr, isend, irecv, test, deregMr, close). Each comm
// pair has a fate drawn from the seed and the pair's identity, which the
// receiver learns from the first message (a hello):
//   - normal (60 %): 1..6 messages of random sizes (0 bytes to 200 KB: eager
//     and rendezvous), every one must complete, arrive whole and be right;
//   - sender aborts: the sender posts some sends and closes with them in
//     flight, the receiver posts every receive and closes once each ended
//     (arrived right, or failed) or a while after the sender closed;
//   - receiver aborts: the receiver posts some receives and closes with them
//     in flight, the sender tests its sends until each ended or failed and
//     closes once the receiver has closed.
// Every payload that is reported received is checked byte for byte and by
// size, also on aborted comms. Outside the transport, the receiver tells the
// sender by a file in --dir that it has the hello and, on a normal comm,
// every message: a sender closes a normal comm only then, as NCCL closes
// only once its peers are done (a sender's close may cut off what its
// receiver has not read yet), and waits for the hello before it aborts, so
// that the receiver knows the comm's fate. Any failure on a normal comm, or any close
// that does not return success, fails the run: what one comm does never
// affects another. Rounds and the whole run are bounded in time.
//
//   signlion_net_concurrency --lib PATH [--threads 4] [--comms 3] [--rounds 10]
//                            [--seed S] [--round-limit-ms 20000] [--limit-ms 120000]
//                            [--ifname lo] [--version 11]
// spawns the two roles, prints the seed (replay one with --seed S: each
// thread's decisions repeat; the threads' interleaving is the OS's), and
// exits 0 when both passed. --role a|b --dir DIR runs one side.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net_harness.h"

using namespace signlion::nettest;

namespace {

struct Options {
  std::string lib, dir, role, ifname = "lo";
  int version = 11, threads = 4, comms = 3, rounds = 10;
  int weights[3] = {6, 2, 2};  // --fates normal,sender-aborts,receiver-aborts (out of their sum)
  uint64_t seed = 0;
  bool seedGiven = false;
  int64_t roundLimitMs = 20000, limitMs = 120000;
};

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t mix(uint64_t a, uint64_t b) { return mix(a ^ mix(b)); }

// A failure ends the process at once (exit code 1): the other comms may be in
// any state, and closing them could hide the failure behind a hang.
[[noreturn]] void fail(const Options& o, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "net_concurrency[%s]: FAILED (seed 0x%" PRIx64 "): %s\n", o.role.c_str(), o.seed, msg);
  fflush(stderr);
  _exit(1);
}

// ---- What both sides know of a comm pair ----------------------------------------

enum Fate { kNormal, kSenderAborts, kReceiverAborts };
const char* fateName(int f) { return f == kNormal ? "normal" : f == kSenderAborts ? "sender-aborts" : "receiver-aborts"; }

constexpr int kMaxMsgs = 6;
constexpr size_t kSlot = 200 * 1024;  // capacity of every receive
constexpr uint32_t kHelloMagic = 0x434f4e43;
constexpr int kHelloTag = 1000;

struct Hello {
  uint32_t magic, round, comm, thread;
};

struct Plan {
  int fate, msgs, sendsBeforeClose, recvsBeforeClose;
  size_t sizes[kMaxMsgs];
};

// sender: the sending process's role ('a' or 'b').
Plan planFor(const Options& o, char sender, int thread, int round, int comm) {
  uint64_t h = mix(mix(mix(mix(o.seed, (uint64_t)sender), (uint64_t)thread), (uint64_t)round), (uint64_t)comm);
  Plan p{};
  int f = (int)(h % (uint64_t)(o.weights[0] + o.weights[1] + o.weights[2]));
  p.fate = f < o.weights[0] ? kNormal : f < o.weights[0] + o.weights[1] ? kSenderAborts : kReceiverAborts;
  p.msgs = 1 + (int)((h >> 8) % kMaxMsgs);
  p.sendsBeforeClose = (int)((h >> 16) % (p.msgs + 1));
  p.recvsBeforeClose = (int)((h >> 24) % (p.msgs + 1));
  static const size_t kSizes[] = {0, 1, 31, 4096, 9000, 65536, kSlot};
  for (int i = 0; i < kMaxMsgs; i++) p.sizes[i] = kSizes[mix(h, 100 + i) % (sizeof(kSizes) / sizeof(kSizes[0]))];
  return p;
}
uint64_t payloadSeed(uint64_t seed, char sender, int thread, int round, int comm, int msg) {
  return mix(mix(mix(mix(mix(seed, (uint64_t)sender), (uint64_t)thread), (uint64_t)round), (uint64_t)comm), 7 + msg);
}

// ---- One comm as one thread drives it ---------------------------------------------

struct Actor {
  bool send;
  int round = -1, comm = -1;  // recv: known from the hello
  int state = 0;              // see stepSend / stepRecv
  void* c = nullptr;
  void* mr = nullptr;
  alignas(8) char handle[NCCL_NET_HANDLE_MAXSIZE];
  Plan plan{};
  std::vector<char> buf;  // kMaxMsgs slots of kSlot bytes
  Hello hello{};
  void* helloReq = nullptr;
  void* reqs[kMaxMsgs] = {};
  bool ended[kMaxMsgs] = {};  // completed (checked) or failed
  int posted = 0, endedCount = 0;
  bool broken = false;  // a call on an aborted comm failed: only close it now
  int64_t startMs = 0, phaseMs = 0;
  bool closed = false;
};

class ThreadRun {
 public:
  ThreadRun(const Options& o, NetDriver& net, int dev, int t, void* listen, const char* peerHandle)
      : o_(o), net_(net), dev_(dev), t_(t), listen_(listen), rng_(mix(mix(o.seed, (uint64_t)o.role[0]), t)) {
    memcpy(peerHandle_, peerHandle, sizeof(peerHandle_));
  }

  void run() {
    int64_t start = nowMs();
    int expectedRecvs = o_.rounds * o_.comms;
    int recvsDone = 0;
    lastAcceptMs_ = nowMs();
    for (int round = 0;;) {
      // Send actors of the round: all at once, each through its own handle copy.
      bool sendsLeft = false;
      for (auto& a : actors_) sendsLeft |= a->send && !a->closed;
      if (!sendsLeft && round < o_.rounds) {
        if (round > 0) roundDone(round - 1, start);
        roundStartMs_ = nowMs();
        for (int i = 0; i < o_.comms; i++) {
          auto a = std::make_unique<Actor>();
          a->send = true;
          a->round = round;
          a->comm = i;
          a->startMs = nowMs();
          memcpy(a->handle, peerHandle_, sizeof(a->handle));
          a->plan = planFor(o_, o_.role[0], t_, round, i);
          actors_.push_back(std::move(a));
        }
        round++;
      }
      int64_t now = nowMs();
      if (now - start > o_.limitMs) fail(o_, "thread %d: the run's limit of %lld ms passed", t_, (long long)o_.limitMs);
      if (sendsLeft && now - roundStartMs_ > o_.roundLimitMs) stuck("a round's send comms", round - 1);
      // One step of one actor, or one accept, picked at random.
      size_t pick = rng_() % (actors_.size() + 1);
      if (pick == actors_.size()) {
        if (accepted_ < expectedRecvs) acceptOne();
      } else {
        Actor& a = *actors_[pick];
        if (!a.send && now - a.startMs > o_.roundLimitMs) stuck("a recv comm", a.round);
        if (a.send)
          stepSend(a);
        else
          stepRecv(a);
        if (a.closed) {
          if (!a.send) recvsDone++;
          actors_.erase(actors_.begin() + (long)pick);
        }
      }
      if (accepted_ < expectedRecvs && now - lastAcceptMs_ > o_.roundLimitMs)
        stuck("accept (no connection accepted)", round - 1);
      if (rng_() % 64 == 0) std::this_thread::yield();
      if (rng_() % 512 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng_() % 500));
      bool sendsLeftNow = false;
      for (auto& a : actors_) sendsLeftNow |= a->send && !a->closed;
      if (round >= o_.rounds && !sendsLeftNow && recvsDone >= expectedRecvs) break;
    }
    roundDone(o_.rounds - 1, start);
  }

  uint64_t checkedBytes() const { return checkedBytes_; }
  int fates(int f) const { return fates_[f]; }

 private:
  void roundDone(int round, int64_t start) {
    if (getenv("NET_CONCURRENCY_VERBOSE"))
      fprintf(stderr, "net_concurrency[%s] thread %d: round %d sent (%lld ms)\n", o_.role.c_str(), t_, round,
              (long long)(nowMs() - start));
  }

  [[noreturn]] void stuck(const char* what, int round) {
    std::string states;
    for (auto& a : actors_) {
      char b[96];
      snprintf(b, sizeof(b), " %s(r%d c%d %s st%d %d/%d)", a->send ? "send" : "recv", a->round, a->comm,
               fateName(a->plan.fate), a->state, a->endedCount, a->plan.msgs);
      states += b;
    }
    fail(o_, "thread %d round %d: %s made no progress within %lld ms (%d of %d recv comms accepted); comms:%s", t_,
         round, what, (long long)o_.roundLimitMs, accepted_, o_.rounds * o_.comms, states.c_str());
  }

  void check(ncclResult_t r, const Actor& a, const char* call) {
    if (r != ncclSuccess)
      fail(o_, "thread %d: %s on %s comm (round %d, comm %d, %s) returned %d", t_, call, a.send ? "send" : "recv",
           a.round, a.comm, fateName(a.plan.fate), (int)r);
  }

  void acceptOne() {
    void* rc = nullptr;
    ncclResult_t r = net_.accept(listen_, &rc);
    if (r != ncclSuccess) fail(o_, "thread %d: accept returned %d (%d accepted so far)", t_, (int)r, accepted_);
    if (rc == nullptr) return;
    accepted_++;
    lastAcceptMs_ = nowMs();
    auto a = std::make_unique<Actor>();
    a->send = false;
    a->c = rc;
    a->startMs = nowMs();
    actors_.push_back(std::move(a));
  }

  // Send side: 0 connect, 1 hello, 2 hello acknowledged, 3 transfers, then closed.
  void stepSend(Actor& a) {
    if (a.state == 0) {
      check(net_.connect(dev_, a.handle, &a.c), a, "connect");
      if (a.c == nullptr) return;
      a.buf.resize(kMaxMsgs * kSlot);
      check(net_.regMr(a.c, a.buf.data(), a.buf.size(), &a.mr), a, "regMr");
      a.hello = Hello{kHelloMagic, (uint32_t)a.round, (uint32_t)a.comm, (uint32_t)t_};
      a.state = 1;
      return;
    }
    if (a.state == 1) {
      if (a.helloReq == nullptr) {
        check(net_.isend(a.c, &a.hello, sizeof(a.hello), kHelloTag, nullptr, &a.helloReq), a, "isend(hello)");
        return;
      }
      int done = 0;
      check(net_.test(a.helloReq, &done, nullptr), a, "test(hello)");
      if (done) a.state = 2;
      return;
    }
    if (a.state == 2) {  // the receiver has the hello (so it knows the fate)
      if (!acked(o_.role[0], a, 'h')) return;
      a.state = 3;
      fates_[a.plan.fate]++;
      return;
    }
    const Plan& p = a.plan;
    int goal = p.fate == kSenderAborts ? p.sendsBeforeClose : p.msgs;
    bool canPost = a.posted < goal && !a.broken;
    bool testable = a.posted > a.endedCount && !a.broken;
    if (p.fate == kSenderAborts && a.posted == goal && (rng_() % 3 == 0 || !testable)) {
      closeActor(a, false);  // with whatever is still in flight
      return;
    }
    if (canPost && (!testable || rng_() % 2 == 0)) {
      int i = a.posted;
      char* d = a.buf.data() + (size_t)i * kSlot;
      fillPattern(d, p.sizes[i], payloadSeed(o_.seed, o_.role[0], t_, a.round, a.comm, i));
      void* req = nullptr;
      ncclResult_t r = net_.isend(a.c, d, p.sizes[i], i, a.mr, &req);
      if (r != ncclSuccess && p.fate == kReceiverAborts) {
        a.broken = true;
        return;
      }
      check(r, a, "isend");
      if (req != nullptr) a.reqs[a.posted++] = req;
      return;
    }
    if (testable) {
      int i = pickUnended(a);
      int done = 0;
      ncclResult_t r = net_.test(a.reqs[i], &done, nullptr);
      if (r != ncclSuccess && p.fate == kReceiverAborts) {
        a.broken = true;  // the receiver closed: its loss may show as an error
        return;
      }
      check(r, a, "test(send)");
      if (done) a.ended[i] = true, a.endedCount++;
      return;
    }
    // Nothing left to post or test (or broken): close. A normal comm closes
    // once the receiver has every message, and a comm whose receiver aborts
    // once the receiver has closed (its close may leave our sends in flight
    // until then), as NCCL closes only after its peers are done: a sender's
    // close may cut off what the receiver has not read yet, docs/PLUGIN.md,
    // and fail receives the receiver still has posted, which is not what a
    // receiver-aborts comm tests. A receiver that never closes is caught by
    // the round's limit.
    bool allEnded = a.endedCount == a.posted && a.posted == goal;
    if (p.fate == kNormal ? allEnded && acked(o_.role[0], a, 'd')
        : p.fate == kReceiverAborts ? acked(o_.role[0], a, 'c')
                                    : allEnded || a.broken)
      closeActor(a, p.fate == kNormal);
  }

  // The receiver's word to the sender, outside the transport: a file
  // <dir>/ack-<sender role>-<thread>-<round>-<comm>-<stage>, stage 'h' (it
  // has the hello), 'd' (it has every message of a normal comm) or 'c' (it
  // closed a comm whose receiver aborts).
  std::string ackPath(char sender, const Actor& a, char stage) const {
    char b[96];
    snprintf(b, sizeof(b), "/ack-%c-%d-%d-%d-%c", sender, t_, a.round, a.comm, stage);
    return o_.dir + b;
  }
  bool acked(char sender, const Actor& a, char stage) const {
    return access(ackPath(sender, a, stage).c_str(), F_OK) == 0;
  }
  void ack(const Actor& a, char stage) { touch(ackPath(peerRole(), a, stage)); }
  // The sender's word to the receiver, the same way: stage 's' (it closed a
  // comm whose sender aborts).
  void say(const Actor& a, char stage) { touch(ackPath(o_.role[0], a, stage)); }
  void touch(const std::string& path) {
    int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) fail(o_, "cannot write %s", path.c_str());
    close(fd);
  }

  // Recv side: 0 hello posted or to post, 1 transfers, then closed.
  void stepRecv(Actor& a) {
    if (a.state == 0) {
      if (a.helloReq == nullptr) {
        size_t cap = sizeof(a.hello) + 48;  // larger than the hello: the size is checked
        a.buf.resize(cap);
        void* d = a.buf.data();
        int tag = kHelloTag;
        check(net_.irecv(a.c, 1, &d, &cap, &tag, nullptr, &a.helloReq), a, "irecv(hello)");
        return;
      }
      int done = 0, size = -1;
      check(net_.test(a.helloReq, &done, &size), a, "test(hello)");
      if (!done) return;
      if (size != (int)sizeof(Hello)) fail(o_, "thread %d: hello of %d bytes, expected %zu", t_, size, sizeof(Hello));
      memcpy(&a.hello, a.buf.data(), sizeof(Hello));
      const Hello& h = a.hello;
      if (h.magic != kHelloMagic || h.thread != (uint32_t)t_ || h.round >= (uint32_t)o_.rounds ||
          h.comm >= (uint32_t)o_.comms)
        fail(o_, "thread %d: bad hello (magic 0x%x, thread %u, round %u, comm %u)", t_, h.magic, h.thread, h.round,
             h.comm);
      if (!seen_.insert({(int)h.round, (int)h.comm}).second)
        fail(o_, "thread %d: a second comm said it was round %u comm %u", t_, h.round, h.comm);
      a.round = (int)h.round;
      a.comm = (int)h.comm;
      a.plan = planFor(o_, peerRole(), t_, a.round, a.comm);
      a.buf.assign(kMaxMsgs * kSlot, 0);
      check(net_.regMr(a.c, a.buf.data(), a.buf.size(), &a.mr), a, "regMr");
      a.state = 1;
      a.phaseMs = nowMs();
      ack(a, 'h');
      return;
    }
    const Plan& p = a.plan;
    int goal = p.fate == kReceiverAborts ? p.recvsBeforeClose : p.msgs;
    bool canPost = a.posted < goal && !a.broken;
    bool testable = a.posted > a.endedCount && !a.broken;
    if (p.fate == kReceiverAborts && a.posted == goal && (rng_() % 3 == 0 || !testable)) {
      closeActor(a, false);
      return;
    }
    if (canPost && (!testable || rng_() % 2 == 0)) {
      int i = a.posted;
      void* d = a.buf.data() + (size_t)i * kSlot;
      memset(d, 0xee, kSlot);
      size_t cap = kSlot;
      int tag = i;
      void* req = nullptr;
      ncclResult_t r = net_.irecv(a.c, 1, &d, &cap, &tag, &a.mr, &req);
      if (r != ncclSuccess && p.fate == kSenderAborts) {
        a.broken = true;
        return;
      }
      check(r, a, "irecv");
      if (req != nullptr) a.reqs[a.posted++] = req;
      return;
    }
    if (testable) {
      int i = pickUnended(a);
      int done = 0, size = -1;
      ncclResult_t r = net_.test(a.reqs[i], &done, &size);
      if (r != ncclSuccess && p.fate == kSenderAborts) {
        a.broken = true;  // the sender closed before sending it
        return;
      }
      check(r, a, "test(recv)");
      if (!done) return;
      a.ended[i] = true;
      a.endedCount++;
      if (size != (int)p.sizes[i])
        fail(o_, "thread %d: round %d comm %d message %d (%s): %d bytes received, %zu sent", t_, a.round, a.comm, i,
             fateName(p.fate), size, p.sizes[i]);
      const char* d = a.buf.data() + (size_t)i * kSlot;
      size_t bad = checkPattern(d, p.sizes[i], payloadSeed(o_.seed, peerRole(), t_, a.round, a.comm, i));
      if (bad != SIZE_MAX)
        fail(o_, "thread %d: round %d comm %d message %d (%s, %zu bytes): byte %zu is wrong", t_, a.round, a.comm, i,
             fateName(p.fate), p.sizes[i], bad);
      checkedBytes_ += p.sizes[i];
      return;
    }
    bool allEnded = a.endedCount == a.posted && a.posted == goal;
    if (allEnded && p.fate == kNormal) ack(a, 'd');
    // A sender that aborts may leave our receives posted: once it has closed
    // (its word 's'), they end soon; a while after, close with them.
    if (allEnded || a.broken ||
        (p.fate == kSenderAborts && acked(peerRole(), a, 's') && nowMs() - a.phaseMs > 3000))
      closeActor(a, p.fate == kNormal);
  }

  int pickUnended(const Actor& a) {
    int n = a.posted - a.endedCount, k = (int)(rng_() % (uint64_t)n);
    for (int i = 0; i < a.posted; i++)
      if (!a.ended[i] && k-- == 0) return i;
    return -1;
  }

  // A normal comm deregisters its memory first (all its requests ended); an
  // aborted one is closed with requests in flight, which frees its regions.
  void closeActor(Actor& a, bool dereg) {
    if (dereg && a.mr != nullptr) check(net_.deregMr(a.c, a.mr), a, "deregMr");
    check(a.send ? net_.closeSend(a.c) : net_.closeRecv(a.c), a, "close");
    a.closed = true;
    if (!a.send && a.plan.fate == kReceiverAborts) ack(a, 'c');  // the sender may close now
    if (a.send && a.plan.fate == kSenderAborts) say(a, 's');     // the receiver may give up now
  }

  char peerRole() const { return o_.role == "a" ? 'b' : 'a'; }

  const Options& o_;
  NetDriver& net_;
  int dev_, t_;
  void* listen_;
  char peerHandle_[NCCL_NET_HANDLE_MAXSIZE];
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<Actor>> actors_;
  std::set<std::pair<int, int>> seen_;
  int accepted_ = 0;
  int64_t lastAcceptMs_ = 0, roundStartMs_ = 0;
  uint64_t checkedBytes_ = 0;
  int fates_[3] = {0, 0, 0};
};

bool writeFile(const std::string& path, const void* data, size_t size) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f.write(static_cast<const char*>(data), (std::streamsize)size)) return false;
  }
  return rename(tmp.c_str(), path.c_str()) == 0;
}
bool waitFile(const std::string& path, void* data, size_t size, int64_t limitMs) {
  int64_t start = nowMs();
  while (nowMs() - start < limitMs) {
    std::ifstream f(path, std::ios::binary);
    if (f && (size == 0 || f.read(static_cast<char*>(data), (std::streamsize)size))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

int runRole(const Options& o) {
  setenv("SIGNLION_SOCKET_IFNAME", o.ifname.c_str(), 1);  // the transports list only that interface
  std::string err;
  void* lib = openPlugin(o.lib, &err);
  NetDriver net;
  if (lib == nullptr || !net.bind(lib, o.version) || net.init() != ncclSuccess)
    fail(o, "cannot load %s: %s", o.lib.c_str(), err.c_str());
  int dev = findDevice(net, o.ifname);
  if (dev < 0) fail(o, "no device named %s", o.ifname.c_str());
  std::vector<void*> listens(o.threads, nullptr);
  std::vector<std::vector<char>> peerHandles(o.threads, std::vector<char>(NCCL_NET_HANDLE_MAXSIZE));
  for (int t = 0; t < o.threads; t++) {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    if (net.listen(dev, h, &listens[t]) != ncclSuccess) fail(o, "listen failed");
    if (!writeFile(o.dir + "/" + o.role + "." + std::to_string(t) + ".handle", h, sizeof(h)))
      fail(o, "cannot write a handle in %s", o.dir.c_str());
  }
  std::string peer = o.role == "a" ? "b" : "a";
  for (int t = 0; t < o.threads; t++)
    if (!waitFile(o.dir + "/" + peer + "." + std::to_string(t) + ".handle", peerHandles[t].data(),
                  NCCL_NET_HANDLE_MAXSIZE, o.limitMs))
      fail(o, "the peer published no handle for thread %d", t);
  std::vector<std::unique_ptr<ThreadRun>> runs;
  for (int t = 0; t < o.threads; t++)
    runs.push_back(std::make_unique<ThreadRun>(o, net, dev, t, listens[t], peerHandles[t].data()));
  int64_t start = nowMs();
  std::vector<std::thread> threads;
  for (auto& r : runs) threads.emplace_back([&r] { r->run(); });
  for (auto& th : threads) th.join();
  int64_t ms = nowMs() - start;
  // Both sides finished every comm before either closes its listen comms.
  if (!writeFile(o.dir + "/" + o.role + ".done", "1", 1)) fail(o, "cannot write in %s", o.dir.c_str());
  if (!waitFile(o.dir + "/" + peer + ".done", nullptr, 0, o.limitMs)) fail(o, "the peer did not finish");
  for (void* l : listens)
    if (net.closeListen(l) != ncclSuccess) fail(o, "closeListen failed");
  if (net.finalize() != ncclSuccess) fail(o, "finalize failed");
  uint64_t bytes = 0;
  int f[3] = {0, 0, 0};
  for (auto& r : runs) {
    bytes += r->checkedBytes();
    for (int k = 0; k < 3; k++) f[k] += r->fates(k);
  }
  printf("net_concurrency[%s]: %d threads x %d comms x %d rounds passed in %lld ms: %d normal, %d sender-aborts, %d "
         "receiver-aborts send comms; %" PRIu64 " received bytes checked\n",
         o.role.c_str(), o.threads, o.comms, o.rounds, (long long)ms, f[0], f[1], f[2], bytes);
  return 0;
}

// Runs both roles and waits for both, at most limitMs plus a margin; a side
// that fails or outlives the bound gets its partner killed.
int runBoth(Options o, const char* self) {
  char tmpl[] = "/tmp/signlion-netconc-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  o.dir = tmpl;
  printf("net_concurrency: seed 0x%" PRIx64 " (replay: --seed 0x%" PRIx64 "), %s, %d threads x %d comms x %d rounds\n",
         o.seed, o.seed, o.lib.c_str(), o.threads, o.comms, o.rounds);
  fflush(stdout);
  pid_t pids[2];
  const char* roles[2] = {"a", "b"};
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char seed[32];
      snprintf(seed, sizeof(seed), "0x%" PRIx64, o.seed);
      std::string fates = std::to_string(o.weights[0]) + "," + std::to_string(o.weights[1]) + "," +
                          std::to_string(o.weights[2]);
      std::vector<std::string> args = {self,
                                       "--lib", o.lib, "--dir", o.dir, "--role", roles[i], "--seed", seed,
                                       "--threads", std::to_string(o.threads), "--comms", std::to_string(o.comms),
                                       "--rounds", std::to_string(o.rounds), "--ifname", o.ifname,
                                       "--version", std::to_string(o.version),
                                       "--round-limit-ms", std::to_string(o.roundLimitMs),
                                       "--limit-ms", std::to_string(o.limitMs), "--fates", fates};
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      execv(self, argv.data());
      _exit(127);
    }
  }
  int status[2] = {-1, -1}, left = 2;
  int64_t start = nowMs(), deadline = start + o.limitMs + 15000;
  while (left > 0 && nowMs() < deadline) {
    for (int i = 0; i < 2; i++) {
      int st = 0;
      if (status[i] >= 0 || waitpid(pids[i], &st, WNOHANG) != pids[i]) continue;
      status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      left--;
      if (status[i] != 0 && status[1 - i] < 0)  // the partner's own report comes within a round's limit
        deadline = std::min(deadline, nowMs() + o.roundLimitMs + 3000);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int i = 0; i < 2; i++)
    if (status[i] < 0) {
      fprintf(stderr, "net_concurrency: side %s still running after %lld ms: killed\n", roles[i],
              (long long)(nowMs() - start));
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
      status[i] = 124;
    }
  std::string cmd = "rm -rf '" + o.dir + "'";
  if (getenv("NET_CONCURRENCY_KEEP_DIR")) cmd = "echo kept " + o.dir;
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", o.dir.c_str());
  if (status[0] != 0 || status[1] != 0) {
    fprintf(stderr, "net_concurrency: FAILED (side a: %d, side b: %d); replay: %s --lib %s --seed 0x%" PRIx64
            " --threads %d --comms %d --rounds %d\n", status[0], status[1], self, o.lib.c_str(), o.seed, o.threads,
            o.comms, o.rounds);
    return 1;
  }
  printf("net_concurrency: passed (seed 0x%" PRIx64 ")\n", o.seed);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--lib") o.lib = v;
    else if (k == "--dir") o.dir = v;
    else if (k == "--role") o.role = v;
    else if (k == "--ifname") o.ifname = v;
    else if (k == "--version") o.version = atoi(v.c_str());
    else if (k == "--threads") o.threads = atoi(v.c_str());
    else if (k == "--comms") o.comms = atoi(v.c_str());
    else if (k == "--rounds") o.rounds = atoi(v.c_str());
    else if (k == "--seed") o.seed = strtoull(v.c_str(), nullptr, 0), o.seedGiven = true;
    else if (k == "--round-limit-ms") o.roundLimitMs = atoll(v.c_str());
    else if (k == "--fates" && sscanf(v.c_str(), "%d,%d,%d", &o.weights[0], &o.weights[1], &o.weights[2]) == 3) {
    }
    else if (k == "--limit-ms") o.limitMs = atoll(v.c_str());
    else {
      fprintf(stderr, "net_concurrency: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (o.lib.empty() || o.weights[0] < 0 || o.weights[1] < 0 || o.weights[2] < 0 ||
      o.weights[0] + o.weights[1] + o.weights[2] < 1 || o.threads < 1 || o.threads > 64 || o.comms < 1 || o.comms > 64 || o.rounds < 1 ||
      o.version < 8 || o.version > 12 || (!o.role.empty() && o.role != "a" && o.role != "b")) {
    fprintf(stderr, "usage: %s --lib PATH [--threads 1..64] [--comms 1..64] [--rounds N] [--seed S] "
            "[--round-limit-ms MS] [--limit-ms MS] [--ifname lo] [--version 8..12]\n", argv[0]);
    return 2;
  }
  if (!o.seedGiven) o.seed = mix((uint64_t)std::chrono::system_clock::now().time_since_epoch().count() ^ getpid());
  if (o.role.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
      perror("readlink /proc/self/exe");
      return 2;
    }
    self[n] = '\0';
    return runBoth(o, self);
  }
  if (o.dir.empty()) {
    fprintf(stderr, "net_concurrency: --role needs --dir\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return runRole(o);
}
