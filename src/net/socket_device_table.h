// The socket transport's device table: the interfaces that pass
// SIGNLION_SOCKET_IFNAME (rescanned when parameters change), followed by the
// virtual devices makeVDevice fused from them (NCCL's NIC fusion, ncclNet v9
// and later), and how many data streams a comm on each opens. A comm on a
// fused device spreads its data streams over the member interfaces
// (plugin/socket/socket_transport.h). Below the transport, so that the host
// communicator (src/host/net.cc) can tell it the learned link rate and ask
// for a device's interfaces without including the transport.
#pragma once

#include <cstdint>

#include "common/debug.h"
#include "nccl_sign.h"
#include "net/socket_devices.h"

namespace signlion {
namespace net {

constexpr int kSocketMaxDevs = 16;
constexpr int kSocketMaxRecvs = 8;                // grouped receives per irecv
constexpr int kSocketMaxStreams = 64;             // cap on SIGNLION_NSOCKS
// Interfaces one fused device (makeVDevice) may hold: what the listen handle
// has room for (128 bytes: one address each plus the connection's fields).
// ncclNet v12 lets NCCL ask for up to 8; more than 4 is refused.
constexpr int kSocketMaxFusedNics = 4;

struct SocketProps {
  const char* name;     // a fused device: its interfaces' names joined by '+'
  const char* pciPath;  // nullptr for virtual interfaces
  uint64_t guid;
  int speedMbps;  // a fused device: the sum of its interfaces'
  int maxComms;
  int maxRecvs;
  int ndevs;  // physical devices it is made of (1 unless fused)
  int devs[kSocketMaxFusedNics];
};

ncclResult_t socketInit(LogSink logger);
ncclResult_t socketDevices(int* ndev);
ncclResult_t socketGetProperties(int dev, SocketProps* props);
// NCCL's NIC fusion: a new device made of ndevs (1..4) distinct physical
// devices of one address family; *d gets its index (physical devices first,
// then fused ones in the order made; ndevs == 1 returns that device, the
// same list again the device made for it). Refused (ncclInvalidUsage, an
// INFO line; NCCL then keeps the interfaces apart) for more than
// kSocketMaxFusedNics, and unless the interface spec names the interfaces
// (IfnameSpec::namesInterfaces): NCCL asks on its own. A comm
// on it deals its data streams over the interfaces, stream i on interface
// i mod n at each end, control stream on the first. socket_device_table.cc.
ncclResult_t socketMakeVDevice(int ndevs, const int* devs, int* d);

// The interfaces of a device: one for a physical device, 2..4 for a fused one.
struct NicSet {
  int n = 0;
  int devs[kSocketMaxFusedNics] = {};  // physical device indices
  SocketAddress addr[kSocketMaxFusedNics] = {};
};

// Fills *out for device dev (physical or fused); false when dev is no device.
bool deviceNics(int dev, NicSet* out);

// Links at least this fast (Mbit/s) get kSocketFastLinkStreams data streams
// per comm: one TCP stream does not fill them (a 10 Gbit/s veth: 8.9 Gbit/s
// with one stream, 9.5 with four; loopback 15 against 24).
constexpr int kSocketFastLinkMbps = 10000;
constexpr int kSocketFastLinkStreams = 4;

// Data streams for a link of `mbps` (0: unknown) over `nics` interfaces: one
// per interface, and kSocketFastLinkStreams on a fast link.
int socketStreamsForRate(int mbps, int nics);

// The rate (Mbit/s; 0: none) a host communicator learned for the links it
// makes next (src/host/link_rate.h). Process-wide: every communicator of a
// process runs over the same interfaces, and the latest one's rate stands.
void socketSetLinkRate(int mbps);

// Data streams a comm on these interfaces opens: SIGNLION_NSOCKS when set
// (1..kSocketMaxStreams); else socketStreamsForRate of the slowest
// interface's rate: SIGNLION_SOCKET_SPEED when set, else the learned rate
// (socketSetLinkRate), else the interface's speed where it is real (a device
// behind it, or no sysfs speed at all: SIGNLION_SOCKET_DEFAULT_SPEED); a
// virtual interface's made-up speed counts as unknown (one stream). Slower links get one stream per interface
// because several streams share a shallow switch queue badly: each loss halves
// one stream's window, not the link's, so the queue keeps overflowing (four
// streams at 100 Mbit/s behind a 20 ms queue: 1.3-3x the wire time of a sign
// all-reduce and tens of thousands of drops, one stream 1.05-1.2x).
int socketDeviceStreams(const NicSet& nics);

}  // namespace net
}  // namespace signlion
