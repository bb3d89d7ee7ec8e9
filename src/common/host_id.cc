#include "common/host_id.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "common/param.h"

SIGNLION_STRING_PARAM(HostId, "HOSTID", "")

namespace signlion {

std::string defaultHostId() {
  std::string env = signlionParamHostId();
  if (!env.empty()) return env;
  // Read as NCCL reads it: from the environment, at the time of the call.
  const char* nccl = getenv("NCCL_HOSTID");
  if (nccl != nullptr && nccl[0] != '\0') return nccl;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = 0;
  std::string bootId;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, bootId);
  return std::string(name) + bootId;
}

}  // namespace signlion
