// What every rank must pass identically to one collective call, and the
// comparison that names a difference. The host communicator carries it in
// each call's header (src/host/call_check.h); ncclSignAllReduce compares it
// across ranks under SIGNLION_CHECK=1 (src/nccl/call_agreement.h).
#pragma once

#include <cstdint>

#include "nccl_sign.h"

namespace signlion {

enum class CallKind : uint8_t { kSignAllReduce = 1, kSumAllReduce = 2 };

// Plain bytes on a wire: every field fixed width, no padding left undefined.
struct CallSignature {
  uint64_t seq = 0;      // calls on this communicator so far, this one included
  uint64_t count = 0;    // elements of the whole call
  uint64_t segment = 0;  // elements per segment
  uint32_t part = 0;     // segment of the call (or step of a header ring)
  int32_t rank = -1;     // the rank that made it
  uint8_t kind = 0;      // CallKind
  uint8_t datatype = 0;
  uint8_t op = 0;
  uint8_t zeroRule = 0;
  uint8_t tieRule = 0;
  uint8_t algorithm = 0;  // the algorithm the call (segment) runs
  uint8_t pad[2] = {0, 0};
};
static_assert(sizeof(CallSignature) == 40, "CallSignature is a wire format");

// ncclSuccess when theirs (made by rank theirs.rank) equals mine in every
// field but rank; else ncclInvalidUsage after a WARN from `fn` naming the
// first field that differs and both values ("call 7: rank 3 passed count
// 999, rank 0 passed 1000: every rank must pass the same count"). Allocates
// nothing when they agree.
ncclResult_t compareSignatures(const CallSignature& theirs, const CallSignature& mine, const char* fn);

const char* zeroRuleName(int zeroRule);
const char* tieRuleName(int tieRule);

}  // namespace signlion
