#include "common/config.h"

#include <strings.h>

#include <cstddef>
#include <cstdlib>
#include <string>

#include "common/checks.h"
#include "common/host_id.h"
#include "common/param.h"

SIGNLION_CHOICE_PARAM(Algo, "ALGO", "auto",
                      "auto,ring,hd,halving_doubling,allgather,fieldsum,hier,hierarchical,direct,tree")
SIGNLION_PARAM(TimeoutMs, "TIMEOUT_MS", 60000, 1, INT32_MAX)

namespace signlion {

namespace {
struct AlgoName {
  const char* name;
  ncclSignAlgo_t algo;
};
constexpr AlgoName kAlgoNames[] = {
    {"auto", ncclSignAlgoAuto},           {"ring", ncclSignAlgoRing},
    {"hd", ncclSignAlgoHalvingDoubling},  {"halving_doubling", ncclSignAlgoHalvingDoubling},
    {"allgather", ncclSignAlgoAllGather}, {"fieldsum", ncclSignAlgoFieldSum},
    {"hier", ncclSignAlgoHierarchical},   {"hierarchical", ncclSignAlgoHierarchical},
    {"direct", ncclSignAlgoDirect},       {"tree", ncclSignAlgoTree},
};
}  // namespace

bool parseAlgoName(const char* name, ncclSignAlgo_t* algo) {
  for (const auto& a : kAlgoNames) {
    if (strcasecmp(name, a.name) == 0) {
      *algo = a.algo;
      return true;
    }
  }
  return false;
}

const char* algoName(int algo) {
  for (const auto& a : kAlgoNames)
    if ((int)a.algo == algo) return a.name;
  return "unknown";
}

ncclResult_t resolveConfig(const ncclSignConfig_t* config, const char* caller, ResolvedConfig* out) {
  ResolvedConfig r;
  if (config != nullptr) {
    // The struct of a header without hostId ends just before it.
    const size_t withoutHostId = offsetof(ncclSignConfig_t, hostId);
    ARGCHECK(config->size == sizeof(ncclSignConfig_t) || config->size == withoutHostId, caller, "config->size",
             "%zu does not match sizeof(ncclSignConfig_t)=%zu; start from NCCL_SIGN_CONFIG_INITIALIZER", config->size,
             sizeof(ncclSignConfig_t));
    ARGCHECK(config->magic == NCCL_SIGN_CONFIG_MAGIC, caller, "config->magic",
             "0x%x is not NCCL_SIGN_CONFIG_MAGIC; start from NCCL_SIGN_CONFIG_INITIALIZER", config->magic);
    ARGCHECK(headerVersionCompatible(config->version), caller, "config->version",
             "%u is from an incompatible header (library %d)", config->version, NCCL_SIGN_VERSION_CODE);
    ARGCHECK(config->algorithm >= 0 && config->algorithm < ncclSignNumAlgos, caller, "config->algorithm",
             "%d is not an ncclSignAlgo_t", config->algorithm);
    ARGCHECK(config->zeroRule >= 0 && config->zeroRule < ncclSignNumZeroRules, caller, "config->zeroRule",
             "%d is not an ncclSignZeroRule_t", config->zeroRule);
    ARGCHECK(config->tieRule >= 0 && config->tieRule < ncclSignNumTieRules, caller, "config->tieRule",
             "%d is not an ncclSignTieRule_t", config->tieRule);
    ARGCHECK(config->timeoutMs >= 0, caller, "config->timeoutMs", "%d is negative", config->timeoutMs);
    r.algorithm = static_cast<ncclSignAlgo_t>(config->algorithm);
    r.zeroRule = static_cast<ncclSignZeroRule_t>(config->zeroRule);
    r.tieRule = static_cast<ncclSignTieRule_t>(config->tieRule);
    r.timeoutMs = config->timeoutMs;
    if (config->netPlugin != nullptr) r.netPlugin = config->netPlugin;
    if (config->size == sizeof(ncclSignConfig_t) && config->hostId != nullptr) r.hostId = config->hostId;
  }
  if (r.hostId.empty()) r.hostId = defaultHostId();
  // The host communicator's NCCL_NET_PLUGIN: read at every init (not cached),
  // so a process may open communicators over different transports.
  if (r.netPlugin.empty()) {
    const char* env = getenv("SIGNLION_NET_PLUGIN");
    if (env != nullptr) r.netPlugin = env;
  }
  // Within [1, 2^31-1]: out of range, the read kept the default (a WARN).
  if (r.timeoutMs == 0) r.timeoutMs = static_cast<int>(signlionParamTimeoutMs());
  // The environment forces an algorithm over the config, as NCCL_ALGO does
  // (a name that is none of them was WARNed and read as auto).
  ncclSignAlgo_t forced;
  if (parseAlgoName(signlionParamAlgo().c_str(), &forced) && forced != ncclSignAlgoAuto) r.algorithm = forced;
  *out = r;
  return ncclSuccess;
}

ncclResult_t checkRules(int zeroRule, int tieRule, const char* caller, const char* what, CallRules* out) {
  const std::string zeroName = std::string(what) + "->zeroRule", tieName = std::string(what) + "->tieRule";
  ARGCHECK(zeroRule == NCCL_SIGN_RULE_OF_COMM || (zeroRule >= 0 && zeroRule < ncclSignNumZeroRules), caller,
           zeroName.c_str(), "%d is neither an ncclSignZeroRule_t nor NCCL_SIGN_RULE_OF_COMM", zeroRule);
  ARGCHECK(tieRule == NCCL_SIGN_RULE_OF_COMM || (tieRule >= 0 && tieRule < ncclSignNumTieRules), caller,
           tieName.c_str(), "%d is neither an ncclSignTieRule_t nor NCCL_SIGN_RULE_OF_COMM", tieRule);
  out->zeroRule = zeroRule;
  out->tieRule = tieRule;
  return ncclSuccess;
}

ncclResult_t resolveCallConfig(const ncclSignCallConfig_t* config, const char* caller, CallRules* out) {
  *out = CallRules();
  if (config == nullptr) return ncclSuccess;
  // Only the size of this header is known: a larger struct is of a newer
  // header whose fields this library would silently ignore.
  ARGCHECK(config->size == sizeof(ncclSignCallConfig_t), caller, "config->size",
           "%zu does not match sizeof(ncclSignCallConfig_t)=%zu; start from NCCL_SIGN_CALL_CONFIG_INITIALIZER",
           config->size, sizeof(ncclSignCallConfig_t));
  ARGCHECK(config->magic == NCCL_SIGN_CALL_CONFIG_MAGIC, caller, "config->magic",
           "0x%x is not NCCL_SIGN_CALL_CONFIG_MAGIC; start from NCCL_SIGN_CALL_CONFIG_INITIALIZER", config->magic);
  ARGCHECK(headerVersionCompatible(config->version), caller, "config->version",
           "%u is from an incompatible header (library %d)", config->version, NCCL_SIGN_VERSION_CODE);
  return checkRules(config->zeroRule, config->tieRule, caller, "config", out);
}

}  // namespace signlion

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignConfigCheck(const ncclSignConfig_t* config) {
  signlion::ResolvedConfig unused;
  return signlion::resolveConfig(config, "ncclSignConfigCheck", &unused);
}
