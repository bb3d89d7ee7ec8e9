// The network the host communicator's links run on: an ncclNet v11 instance.
// By default signlion's own socket transport, linked in; otherwise any NCCL
// net plugin library, loaded exactly as NCCL loads one (by name or path). The
// executor talks to nothing but the ncclNet interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "net_v11.h"
#include "nccl_sign.h"

namespace signlion {
namespace host {

class Net {
 public:
  // plugin: nullptr, "" or "signlion" = the built-in socket transport; "foo"
  // loads libnccl-net-foo.so; a name containing '/' (or ending in .so) is a
  // path. The library must export ncclNetPlugin_v11.
  // Errors: ncclInvalidArgument (WARN naming the library) when it cannot be
  // loaded or has no v11 struct; the plugin's own error when init fails or it
  // has no device.
  static ncclResult_t open(const char* plugin, std::unique_ptr<Net>* out);
  ~Net();

  const ncclNet_v11_t& api() const { return *api_; }
  void* ctx() const { return ctx_; }
  // Device 0; with the built-in transport and SIGNLION_SOCKET_IFNAME naming
  // several interfaces, a device fused from them (makeVDevice, up to 4), so
  // each link stripes its data streams over all of them.
  int dev() const { return dev_; }
  const char* name() const { return api_->name; }

  // Sleeps up to timeoutMs until `comm` may have progressed (signlion's
  // transport can say; for another plugin this is a short sleep).
  void wait(void* comm, int timeoutMs) const;
  // The same for n comms: returns when any of them may have progressed.
  void waitAny(void* const* comms, size_t n, int timeoutMs) const;
  // Bytes on the wire of one of our comms; false for another plugin's.
  bool wireBytes(void* comm, uint64_t* sent, uint64_t* received) const;
  // Ends a link comm as a crash would, waiting for nothing: the peer's
  // pending and later operations on that link fail at once. A plain close
  // is an orderly one, after which the peer's sends to a closed receiver
  // complete undelivered, so a peer of an aborted rank went on waiting. The
  // comm must still be closed. Signlion's transports can (the built-in one;
  // a plugin library that exports kAbortCommSymbol); for another plugin this
  // does nothing and the close is all the peer sees.
  void abortComm(void* comm) const;
  // Tells the built-in transport the link rate a communicator learned
  // (Mbit/s; 0: none): the data streams of the links made next follow it
  // (socketDeviceStreams). Returns how many a link now opens; 0 for another
  // plugin, which does not hear it.
  int setLinkRate(int64_t mbps) const;
  // Caps how fast a send comm of the built-in transport puts bytes on the
  // wire (bytes/s over all its data streams; 0: no cap). False for another
  // plugin's comm, which is left as it is, or when a socket refused.
  bool setSendPacing(void* sendComm, uint64_t bytesPerSec) const;
  // Whether dev() is the loopback interface (the built-in transport's "lo"):
  // no network link to learn.
  bool loopback() const;
  static constexpr const char* kAbortCommSymbol = "signlionNetAbortComm";

 private:
  Net() = default;
  void* dl_ = nullptr;
  const ncclNet_v11_t* api_ = nullptr;
  void* ctx_ = nullptr;
  int dev_ = 0;
  bool ours_ = false;
  ncclResult_t (*abortComm_)(void* comm) = nullptr;
};

}  // namespace host
}  // namespace signlion
