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
  std::string hostId;     // config->hostId, else algo::defaultHostId()
};

// Whether a config struct made with the header of version `v` can be read by
// this library: same major and minor version (patch releases keep layouts).
constexpr bool headerVersionCompatible(unsigned v) { return v / 100 == NCCL_SIGN_VERSION_CODE / 100; }

// Parses an algorithm name as accepted by SIGNLION_ALGO ("auto", "ring", "hd"
// or "halving_doubling", "allgather", "fieldsum", "hier" or "hierarchical"). Returns false if unknown.
bool parseAlgoName(const char* name, ncclSignAlgo_t* algo);
// The name of an algorithm; "unknown" for any other value (an int: a peer's
// message may carry a value that is no ncclSignAlgo_t).
const char* algoName(int algo);

// config may be NULL (all defaults). `caller` names the API call in WARN lines.
ncclResult_t resolveConfig(const ncclSignConfig_t* config, const char* caller, ResolvedConfig* out);

}  // namespace signlion
