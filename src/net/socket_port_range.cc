#include "net/socket_port_range.h"

#include <cerrno>
#include <cstdlib>

#include "common/debug.h"
#include "net/socket_params.h"

namespace signlion {
namespace net {

namespace {

// A decimal port in [1, 65535] that fills the whole of s.
bool parsePort(const std::string& s, int* port) {
  if (s.empty() || s.size() > 5) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  long v = strtol(s.c_str(), nullptr, 10);
  if (v < 1 || v > 65535) return false;
  *port = static_cast<int>(v);
  return true;
}

}  // namespace

bool parsePortRange(const std::string& spec, PortRange* out, std::string* why) {
  *out = PortRange{};
  if (spec.empty()) return true;
  size_t dash = spec.find('-');
  std::string lo = spec.substr(0, dash), hi = dash == std::string::npos ? lo : spec.substr(dash + 1);
  PortRange r;
  if (!parsePort(lo, &r.lo) || !parsePort(hi, &r.hi)) {
    *why = "not LO-HI or P with ports in 1..65535";
    return false;
  }
  if (r.lo > r.hi) {
    *why = "LO is above HI";
    return false;
  }
  *out = r;
  return true;
}

bool configuredPortRange(PortRange* out) {
  std::string spec = signlionParamSocketPortRange(), why;
  if (parsePortRange(spec, out, &why)) return true;
  WARN("NET/signlion: SIGNLION_SOCKET_PORT_RANGE='%s': %s (for example 50000-50099)", spec.c_str(), why.c_str());
  return false;
}

}  // namespace net
}  // namespace signlion
