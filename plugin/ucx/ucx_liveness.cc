#include "ucx/ucx_liveness.h"

#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "net/socket_params.h"

namespace signlion {
namespace net {

int64_t monotonicMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

namespace {

constexpr char kHeartbeat = 'H';
constexpr char kBye = 'B';

struct Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  std::unordered_set<int> fds;
  std::thread thread;
  bool stop = false;
};
Heartbeat& heartbeat() {
  static Heartbeat* h = new Heartbeat();  // never destroyed: used until process exit
  return *h;
}

int64_t heartbeatPeriodMs() {
  return std::max<int64_t>(10, socketTimeoutMs() / 4);
}

void heartbeatLoop() {
  Heartbeat& h = heartbeat();
  std::unique_lock<std::mutex> lk(h.mu);
  while (!h.stop) {
    for (int fd : h.fds) (void)send(fd, &kHeartbeat, 1, MSG_DONTWAIT | MSG_NOSIGNAL);  // full: peer is behind, fine
    h.cv.wait_for(lk, std::chrono::milliseconds(heartbeatPeriodMs()));
  }
}

}  // namespace

void heartbeatAdd(int fd) {
  Heartbeat& h = heartbeat();
  {
    std::lock_guard<std::mutex> lk(h.mu);
    h.fds.insert(fd);
    if (!h.thread.joinable()) {
      h.stop = false;
      h.thread = std::thread(heartbeatLoop);
    }
  }
  // The new socket's first heartbeat now, and the period read again: a
  // thread asleep for the period of an older (longer) timeout would leave
  // the new comm's peer hearing nothing for longer than its timeout.
  h.cv.notify_all();
}

void heartbeatRemove(int fd) {
  Heartbeat& h = heartbeat();
  std::thread done;
  {
    std::lock_guard<std::mutex> lk(h.mu);
    h.fds.erase(fd);
    if (!h.fds.empty() || !h.thread.joinable()) return;
    h.stop = true;
    done = std::move(h.thread);
  }
  h.cv.notify_all();
  done.join();
}

OobWatch::State OobWatch::poll(int64_t nowMs) {
  if (state_ != kAlive || fd_ < 0) return state_;
  char buf[256];
  for (int round = 0; round < 16; round++) {  // bounded: a peer cannot keep us here
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      lastHeardMs_ = nowMs;
      if (std::find(buf, buf + n, kBye) != buf + n) return state_ = kClosed;
      continue;
    }
    if (n == 0) return state_ = kDead;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return state_ = kDead;
  }
  return state_;
}

OobWatch::State OobWatch::settle(int64_t limitMs) {
  int64_t start = monotonicMs();
  while (poll(monotonicMs()) == kAlive) {
    int64_t left = limitMs - (monotonicMs() - start);
    if (left <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    (void)::poll(&p, 1, (int)std::min<int64_t>(left, 100));
  }
  return state_;
}

void OobWatch::sayBye(int fd) {
  if (fd >= 0) (void)send(fd, &kBye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace net
}  // namespace signlion
