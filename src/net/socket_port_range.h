// The ports signlion's listening sockets may take (SIGNLION_SOCKET_PORT_RANGE),
// for clusters whose firewall opens a fixed range between nodes. Unset, every
// listener takes a port the kernel picks from its ephemeral range
// (net.ipv4.ip_local_port_range). docs/PARAMETERS.md and docs/ADMIN.md
// ("Ports and firewalls") have the user's view.
#pragma once

#include <string>

namespace signlion {
namespace net {

// Inclusive; lo == 0 means "no range: the kernel's ephemeral port".
struct PortRange {
  int lo = 0;
  int hi = 0;
};

// Parses "LO-HI" (1 <= LO <= HI <= 65535) or a single port "P"; "" is no
// range. On a malformed value returns false and *why says what is wrong.
bool parsePortRange(const std::string& spec, PortRange* out, std::string* why);

// SIGNLION_SOCKET_PORT_RANGE, parsed. A malformed value WARNs (naming the
// variable and the value) and returns false: listening then fails, rather than
// silently taking a port the firewall may block.
bool configuredPortRange(PortRange* out);

}  // namespace net
}  // namespace signlion
