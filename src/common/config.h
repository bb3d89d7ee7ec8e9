// Resolution of an ncclSignConfig_t into the settings a communicator runs with:
// defaults filled in, SIGNLION_* overrides applied, every field validated.
#pragma once

#include <string>

#include "nccl_sign.h"

namespace signlion {

struct ResolvedConfig {
  ncclSignAlgo_t algorithm = ncclSignAlgoAuto;
  ncclSignZeroRule_t zeroRule = ncclSignZeroPositive;
  ncclSignTieRule_t tieRule = ncclSignTieZero;
  int timeoutMs = 0;      // 0 until resolved: SIGNLION_TIMEOUT_MS
  std::string netPlugin;  // config->netPlugin, else SIGNLION_NET_PLUGIN; empty: the built-in socket transport
  std::string hostId;     // config->hostId, else defaultHostId() (common/host_id.h)
};

// Whether a config struct made with the header of version `v` can be read by
// this library: same major and minor version (patch releases keep layouts).
constexpr bool headerVersionCompatible(unsigned v) { return v / 100 == NCCL_SIGN_VERSION_CODE / 100; }

// Parses an algorithm name as accepted by SIGNLION_ALGO ("auto", "ring", "hd"
// or "halving_doubling", "allgather", "fieldsum", "hier", "hierarchical"
// "direct" or "tree"). Returns false if unknown.
bool parseAlgoName(const char* name, ncclSignAlgo_t* algo);
// The name of an algorithm; "unknown" for any other value (an int: a peer's
// message may carry a value that is no ncclSignAlgo_t).
const char* algoName(int algo);

// config may be NULL (all defaults). `caller` names the API call in WARN lines.
ncclResult_t resolveConfig(const ncclSignConfig_t* config, const char* caller, ResolvedConfig* out);

// The vote rules a call or an optimizer carries (ncclSignCallConfig_t):
// each field an ncclSignZeroRule_t / ncclSignTieRule_t, or
// NCCL_SIGN_RULE_OF_COMM for the communicator's.
struct CallRules {
  int zeroRule = NCCL_SIGN_RULE_OF_COMM;
  int tieRule = NCCL_SIGN_RULE_OF_COMM;
  // The rules of one call on a communicator whose own are `comm`'s.
  ncclSignZeroRule_t zero(const ResolvedConfig& comm) const {
    return zeroRule == NCCL_SIGN_RULE_OF_COMM ? comm.zeroRule : static_cast<ncclSignZeroRule_t>(zeroRule);
  }
  ncclSignTieRule_t tie(const ResolvedConfig& comm) const {
    return tieRule == NCCL_SIGN_RULE_OF_COMM ? comm.tieRule : static_cast<ncclSignTieRule_t>(tieRule);
  }
};

// Checks the two rule fields (`what` names their struct in WARN lines,
// e.g. "config"): ncclInvalidArgument naming the field when out of range.
ncclResult_t checkRules(int zeroRule, int tieRule, const char* caller, const char* what, CallRules* out);

// config may be NULL (the communicator's rules). Errors: ncclInvalidArgument
// with a WARN naming the field (size, magic, version, a rule out of range).
ncclResult_t resolveCallConfig(const ncclSignCallConfig_t* config, const char* caller, CallRules* out);

}  // namespace signlion
