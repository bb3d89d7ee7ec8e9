// The header every comm object of signlion's transports (the socket
// transport, plugin/socket, and the UCX one, plugin/ucx) begins with: a magic
// word and kind that tell its comms from anything else, and the byte
// counters the host communicator reads (net/socket_net.h, commBytes) from a
// comm pointer alone, whichever library made the comm.
#pragma once

#include <atomic>
#include <cstdint>

namespace signlion {
namespace net {

// First member of every comm object we hand out, so byte counters can be read
// from a comm pointer alone (also by a copy of this code in another library).
struct CommHeader {
  uint32_t magic;
  uint32_t kind;
  std::atomic<uint64_t> bytesSent{0};
  std::atomic<uint64_t> bytesRecv{0};
  // The control connection carries both directions between the two ranks
  // (socket_pairing.h): set once this comm has sent or read the offer, or
  // moved onto the shared connection.
  std::atomic<uint32_t> ctrlShared{0};
};
constexpr uint32_t kCommMagic = 0x534c4e43;  // "SLNC"
enum CommKind : uint32_t { kCommListen = 1, kCommSend = 2, kCommRecv = 3 };

}  // namespace net
}  // namespace signlion
