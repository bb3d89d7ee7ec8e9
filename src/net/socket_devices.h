// The socket transport's devices: usable network interfaces, picked by
// SIGNLION_SOCKET_IFNAME with NCCL's syntax, and what sysfs says about them.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace signlion {
namespace net {

union SocketAddress {
  sockaddr sa;
  sockaddr_in sin;
  sockaddr_in6 sin6;
};

struct SocketDevice {
  std::string name;     // interface name
  SocketAddress addr;   // the address we listen on (port 0)
  std::string pciPath;  // realpath of /sys/class/net/<if>/device, or empty
  int speedMbps = 0;    // sysfs speed, or SIGNLION_SOCKET_DEFAULT_SPEED
  // False when speedMbps is what a virtual interface (no device behind it:
  // veth, bridge, tun) makes up: a veth says 10000 whatever limits it.
  bool speedReal = true;
};

// One parsed element of an interface filter.
struct IfnameFilter {
  bool exclude = false;  // leading '^'
  bool exact = false;    // leading '='
  std::vector<std::string> names;
  // True when ifname passes (an empty filter passes everything).
  bool matches(const std::string& ifname) const;
};
IfnameFilter parseIfnameFilter(const std::string& spec);

// The interface filter in force and the variable it came from. SIGNLION_SOCKET_IFNAME
// when set; else GLOO_SOCKET_IFNAME (Gloo's comma list of exact names, read as
// "=name,..."), else NCCL_SOCKET_IFNAME (NCCL's syntax, as NCCL reads it): a job that
// told torch.distributed which interface to use needs nothing more for signlion.
// Neither: an empty spec (NCCL's default order) and source "".
struct IfnameSpec {
  std::string spec;
  const char* source = "";
  // True when the spec picks interfaces by name or prefix ("eth0,eth1",
  // "=ib0,ib1", "eth"): every interface it passes was asked for. False for
  // no spec (every interface but docker and lo, some of which may reach no
  // peer: a bridge to local VMs, a host-only network) and for an exclude
  // list ("^docker"), which means the same. Only then are several
  // interfaces fused into one device (socketMakeVDevice, src/host/net.cc).
  bool namesInterfaces() const;
};
IfnameSpec socketIfnameSpec();

// Enumerates the interfaces (at most maxDevs) that pass socketIfnameSpec().
std::vector<SocketDevice> findSocketDevices(int maxDevs);

// "1.2.3.4:5" / "[::1]:5" for logs.
std::string addressString(const SocketAddress& a);

}  // namespace net
}  // namespace signlion
