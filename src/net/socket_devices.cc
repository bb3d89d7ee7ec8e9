#include "net/socket_devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <strings.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/debug.h"
#include "net/socket_params.h"

namespace signlion {
namespace net {

IfnameFilter parseIfnameFilter(const std::string& spec) {
  IfnameFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') { f.exclude = true; i++; }
  if (i < spec.size() && spec[i] == '=') { f.exact = true; i++; }
  std::string rest = spec.substr(i);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = item.find(':');  // NCCL allows "name:port"; the port is ignored here
    if (colon != std::string::npos) item.resize(colon);
    if (!item.empty()) f.names.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return f;
}

bool IfnameFilter::matches(const std::string& ifname) const {
  if (names.empty()) return true;
  bool hit = false;
  for (const std::string& n : names) {
    if (exact ? ifname == n : ifname.compare(0, n.size(), n) == 0) { hit = true; break; }
  }
  return exclude ? !hit : hit;
}

std::string addressString(const SocketAddress& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  char out[INET6_ADDRSTRLEN + 16];
  if (a.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a.sin.sin_addr, host, sizeof(host));
    snprintf(out, sizeof(out), "%s:%u", host, ntohs(a.sin.sin_port));
  } else if (a.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a.sin6.sin6_addr, host, sizeof(host));
    snprintf(out, sizeof(out), "[%s]:%u", host, ntohs(a.sin6.sin6_port));
  } else {
    snprintf(out, sizeof(out), "<family %d>", (int)a.sa.sa_family);
  }
  return out;
}

namespace {

// The interface's speed in sysfs, Mbit/s; -1 when it states none (virtual
// links: lo, many VMs' interfaces).
int sysfsSpeed(const std::string& ifname) {
  std::string path = "/sys/class/net/" + ifname + "/speed";
  int speed = -1;
  if (FILE* f = fopen(path.c_str(), "r")) {
    if (fscanf(f, "%d", &speed) != 1) speed = -1;
    fclose(f);
  }
  return speed > 0 ? speed : -1;
}

int readSpeed(const std::string& ifname) {
  if (int64_t set = signlionParamSocketSpeed(); set != 0) return (int)set;
  const int speed = sysfsSpeed(ifname);
  return speed > 0 ? speed : (int)signlionParamSocketDefaultSpeed();
}

std::string readPciPath(const std::string& ifname) {
  std::string path = "/sys/class/net/" + ifname + "/device";
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) return "";
  return real;
}

// One pass over getifaddrs keeping the first usable address (of family
// `family`, or any when AF_UNSPEC) of each interface that passes filter.
void collect(const IfnameFilter& filter, int family, int maxDevs, std::vector<SocketDevice>* devs) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    WARN("NET/signlion: getifaddrs failed: %s", strerror(errno));
    return;
  }
  for (ifaddrs* it = list; it != nullptr && (int)devs->size() < maxDevs; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || !(it->ifa_flags & IFF_UP)) continue;
    int fam = it->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (family != AF_UNSPEC && fam != family) continue;
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((sockaddr_in6*)it->ifa_addr)->sin6_addr)) continue;
    std::string name = it->ifa_name;
    if (!filter.matches(name)) continue;
    bool seen = false;
    for (const SocketDevice& d : *devs) seen |= d.name == name;
    if (seen) continue;
    SocketDevice d;
    d.name = name;
    memset(&d.addr, 0, sizeof(d.addr));
    memcpy(&d.addr, it->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    d.speedMbps = readSpeed(name);
    d.pciPath = readPciPath(name);
    d.speedReal = signlionParamSocketSpeed() != 0 || !d.pciPath.empty() || sysfsSpeed(name) < 0;
    devs->push_back(d);
  }
  freeifaddrs(list);
}

}  // namespace

bool IfnameSpec::namesInterfaces() const { return !spec.empty() && !parseIfnameFilter(spec).exclude; }

IfnameSpec socketIfnameSpec() {
  IfnameSpec out;
  out.spec = signlionParamSocketIfname();
  if (!out.spec.empty()) {
    out.source = "SIGNLION_SOCKET_IFNAME";
    return out;
  }
  // Gloo names interfaces exactly (a device per name); NCCL's value has NCCL's syntax already.
  const char* gloo = getenv("GLOO_SOCKET_IFNAME");
  if (gloo != nullptr && gloo[0] != '\0') {
    out.spec = std::string("=") + gloo;
    out.source = "GLOO_SOCKET_IFNAME";
    return out;
  }
  const char* nccl = getenv("NCCL_SOCKET_IFNAME");
  if (nccl != nullptr && nccl[0] != '\0') {
    out.spec = nccl;
    out.source = "NCCL_SOCKET_IFNAME";
  }
  return out;
}

std::vector<SocketDevice> findSocketDevices(int maxDevs) {
  std::vector<SocketDevice> devs;
  std::string fam = signlionParamSocketFamily();
  int family = AF_UNSPEC;
  if (strcasecmp(fam.c_str(), "AF_INET") == 0) family = AF_INET;
  else if (strcasecmp(fam.c_str(), "AF_INET6") == 0) family = AF_INET6;  // else unset (anything else was WARNed)
  IfnameSpec spec = socketIfnameSpec();
  if (!spec.spec.empty()) {
    collect(parseIfnameFilter(spec.spec), family, maxDevs, &devs);
    if (devs.empty()) {
      WARN("NET/signlion: no usable interface matches %s=%s", spec.source, spec.spec.c_str());
    } else if (strcmp(spec.source, "SIGNLION_SOCKET_IFNAME") != 0) {
      INFO(kSubsysNet | kSubsysInit, "NET/signlion: interfaces from %s (SIGNLION_SOCKET_IFNAME is unset): %s",
           spec.source, spec.spec.c_str());
    }
    return devs;
  }
  // NCCL's default order: real interfaces first, then docker bridges, then loopback.
  collect(parseIfnameFilter("^docker,lo"), family, maxDevs, &devs);
  if (devs.empty()) collect(parseIfnameFilter("docker"), family, maxDevs, &devs);
  if (devs.empty()) collect(parseIfnameFilter("lo"), family, maxDevs, &devs);
  return devs;
}

}  // namespace net
}  // namespace signlion
