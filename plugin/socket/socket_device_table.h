// The socket transport's device table: the interfaces that pass
// SIGNLION_SOCKET_IFNAME (rescanned when parameters change), followed by the
// virtual devices makeVDevice fused from them (NCCL's NIC fusion, ncclNet v9
// and later). A comm on a fused device spreads its data streams over the
// member interfaces (socket_transport.h).
#pragma once

#include "nccl_sign.h"
#include "socket/socket_devices.h"
#include "socket/socket_transport.h"

namespace signlion {
namespace net {

// The interfaces of a device: one for a physical device, 2..4 for a fused one.
struct NicSet {
  int n = 0;
  int devs[kSocketMaxFusedNics] = {};  // physical device indices
  SocketAddress addr[kSocketMaxFusedNics] = {};
};

// Fills *out for device dev (physical or fused); false when dev is no device.
bool deviceNics(int dev, NicSet* out);

}  // namespace net
}  // namespace signlion
