// Whether the process at the other end of a UCX comm is still there, told
// by the TCP connection the comm was set up over (its "out-of-band socket").
//
// UCX alone cannot tell the cases ncclNet must tell apart: a peer that closed
// its comm in order (its sends and receives then end without error), one
// that died (an error within SIGNLION_SOCKET_TIMEOUT), and one that is frozen
// (SIGSTOP: UCX over TCP keeps seeing a healthy connection, over shared
// memory it sees nothing at all). So every comm keeps its setup socket, and:
//   - one thread per process writes a heartbeat byte ('H') on every open
//     comm's socket each SIGNLION_SOCKET_TIMEOUT / 4 (a stopped process
//     writes none; a busy one still does, its thread is not the caller's);
//   - a closing comm writes a bye byte ('B') before it releases its UCX
//     resources, then closes the socket;
//   - the kernel closes the socket of a killed process: end of file, no bye.
// The comm's own calls read the socket (OobWatch), at most once per few ms.
#pragma once

#include <cstdint>

namespace signlion {
namespace net {

// Adds / removes a socket from the heartbeat thread's list. The thread runs
// while the list is not empty; the last remove joins it (so a dlclose'd
// library leaves no thread behind).
void heartbeatAdd(int fd);
void heartbeatRemove(int fd);

// The far side's state as read from one out-of-band socket.
class OobWatch {
 public:
  enum State { kAlive, kClosed /* bye read */, kDead /* EOF or error without bye */ };

  void start(int fd, int64_t nowMs) {
    fd_ = fd;
    lastHeardMs_ = nowMs;
  }
  // Drains what has arrived (without blocking); returns the state.
  State poll(int64_t nowMs);
  // Waits up to limitMs for the decisive bytes (a bye or the end of file),
  // for a comm whose UCX operations just failed: did the peer close or die?
  State settle(int64_t limitMs);
  State state() const { return state_; }
  // Milliseconds since anything was read from the peer (heartbeats included).
  int64_t silentFor(int64_t nowMs) const { return nowMs - lastHeardMs_; }
  // The bye, written by the closing side itself.
  static void sayBye(int fd);

 private:
  int fd_ = -1;
  int64_t lastHeardMs_ = 0;
  State state_ = kAlive;
};

int64_t monotonicMs();

}  // namespace net
}  // namespace signlion
