#include "nccl/call_agreement.h"

#include "common/checks.h"
#include "common/param.h"

SIGNLION_PARAM(Check, "CHECK", 0, 0, 1)

namespace signlion {
namespace nccl {

static_assert(sizeof(CallSignature) % 8 == 0, "the signature travels as uint64 words");

bool checkCallsEnabled() { return signlionParamCheck() != 0; }

ncclResult_t checkAgreement(Backend& backend, const CallSignature& mine, int nranks, uint64_t* scratch,
                            CallSignature* table, const char* fn) {
  constexpr size_t kWords = sizeof(CallSignature) / 8;
  uint64_t* slot = scratch + (size_t)mine.rank * kWords;
  NCCLCHECK(backend.copyIn(slot, &mine, kWords));
  NCCLCHECK(backend.allGather(slot, scratch, kWords));
  NCCLCHECK(backend.copyOut(table, scratch, agreementWords(nranks)));
  for (int r = 0; r < nranks; r++) {
    if (r == mine.rank) continue;
    if (table[r].rank != r) {
      WARN("%s: call %llu: rank %d's signature came back as rank %d's: the ranks are not in the same collective", fn,
           (unsigned long long)mine.seq, r, (int)table[r].rank);
      return ncclInvalidUsage;
    }
    NCCLCHECK(compareSignatures(table[r], mine, fn));
  }
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
