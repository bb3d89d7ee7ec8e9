// ncclSignGetUniqueId: the C entry point that starts a bootstrap root.
#include "common/checks.h"
#include "common/config.h"
#include "host/bootstrap.h"

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignGetUniqueId(ncclSignUniqueId* uniqueId) {
  ARGCHECK(uniqueId != nullptr, "ncclSignGetUniqueId", "uniqueId", "NULL");
  // The root lives as long as the longest wait any rank may make: SIGNLION_TIMEOUT_MS.
  signlion::ResolvedConfig config;
  NCCLCHECK(signlion::resolveConfig(nullptr, "ncclSignGetUniqueId", &config));
  return signlion::host::bootstrapCreateRoot(uniqueId, config.timeoutMs);
}
