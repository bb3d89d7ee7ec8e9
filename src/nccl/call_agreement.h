// SIGNLION_CHECK=1 on the NCCL path: before a call runs, every rank's
// signature (count, datatype, op, rules, algorithm, segment, and the call's
// sequence number on the comm) is all-gathered with one small collective and
// compared on the host, so ranks that disagree fail with ncclInvalidUsage
// and the same WARN as on the host communicator, rather than hang or corrupt
// inside NCCL. It waits for the stream (the table comes back to the host):
// off by default, and not usable during CUDA graph capture.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/call_signature.h"
#include "nccl/backend.h"

namespace signlion {
namespace nccl {

// Words of backend scratch checkAgreement needs for nranks ranks.
constexpr size_t agreementWords(int nranks) { return (size_t)nranks * (sizeof(CallSignature) / 8); }

// mine.rank is this rank; scratch: agreementWords(nranks) words of backend
// memory; table: nranks signatures of host memory. Every rank reads the same
// table, so every rank fails when any two differ, each naming the first rank
// whose signature differs from its own.
ncclResult_t checkAgreement(Backend& backend, const CallSignature& mine, int nranks, uint64_t* scratch,
                            CallSignature* table, const char* fn);

// Whether SIGNLION_CHECK asks for it (read once).
bool checkCallsEnabled();

}  // namespace nccl
}  // namespace signlion
