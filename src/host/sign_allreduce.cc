// ncclSignHostAllReduce: the sign all-reduce on host buffers. Long messages
// run as segments of SIGNLION_HOST_SEGMENT elements, each a whole schedule,
// so scratch memory is bounded whatever the count.
#include <algorithm>
#include <cstdint>

#include "bits/bits.h"
#include "common/checks.h"
#include "common/config.h"
#include "host/host_params.h"
#include "host/communicator.h"

namespace {

// Both entry points: rules of the call where config names them, else the
// communicator's (its config at ncclSignCommInitRank).
ncclResult_t hostAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclSignOp_t op, const ncclSignCallConfig_t* config, ncclSignComm_t comm, const char* kFn) {
  ncclSignComm* c = signlion::host::checkComm(comm, kFn);
  if (c == nullptr) return ncclInvalidArgument;
  signlion::CallRules rules;
  NCCLCHECK(signlion::resolveCallConfig(config, kFn, &rules));
  NCCLCHECK(signlion::bits::checkVoteArgs(datatype, (int)op, kFn));
  ARGCHECK(sendbuff != nullptr || count == 0, kFn, "sendbuff", "NULL with count %zu", count);
  ARGCHECK(recvbuff != nullptr || count == 0, kFn, "recvbuff", "NULL with count %zu", count);
  const size_t esize = signlion::bits::typeSize(datatype);
  // No object is larger than PTRDIFF_MAX bytes: a larger count is not a
  // buffer this rank can hold (and its byte offsets would overflow).
  ARGCHECK(count <= (size_t)PTRDIFF_MAX / esize, kFn, "count", "%zu elements of %zu bytes exceed PTRDIFF_MAX bytes",
           count, esize);
  NCCLCHECK(signlion::host::callStart(c, kFn));

  // The rules are part of the call's signature below, so ranks that pass
  // different ones fail the call rather than mix them.
  signlion::algo::OpSpec spec{op, rules.zero(c->config), rules.tie(c->config)};
  const size_t segment = signlion::host::hostSegmentElements();
  signlion::CallSignature h;
  h.seq = c->calls;
  h.count = count;
  h.segment = segment;
  h.kind = (uint8_t)signlion::CallKind::kSignAllReduce;
  h.datatype = (uint8_t)datatype;
  h.op = (uint8_t)op;
  h.zeroRule = (uint8_t)spec.zeroRule;
  h.tieRule = (uint8_t)spec.tieRule;
  ncclResult_t res = ncclSuccess;
  size_t done = 0;
  do {
    size_t n = std::min(segment, count - done);
    // count == 0 still runs a schedule, the one of a single block, whose
    // messages carry nothing of use: every rank takes part, and its headers
    // meet those of a rank that passed a small count, which then names it.
    const int64_t nblocks = std::max<int64_t>(1, signlion::algo::blocksForCount(n));
    const signlion::host::ScheduleEntry* e;
    res = signlion::host::scheduleFor(c, nblocks, spec, &e);
    if (res != ncclSuccess) break;
    h.part = (uint32_t)(done / segment);
    h.algorithm = (uint8_t)e->schedule.algo;
    c->check.begin(h);
    c->pacing.follow(*c->net, c->links, e->schedule.concurrentSendPeers);
    // The next segment's votes are packed while this one waits on the wire.
    signlion::host::Segments segs;
    segs.self = signlion::host::SegmentId{h.seq, h.part};
    if (done + n < count) {
      segs.nextSend = static_cast<const char*>(sendbuff) + (done + n) * esize;
      segs.nextCount = std::min(segment, count - done - n);
    }
    res = c->executor->run(e->schedule, e->extra, static_cast<const char*>(sendbuff) + done * esize,
                           static_cast<char*>(recvbuff) + done * esize, n, datatype, &segs);
    done += n;
  } while (done < count && res == ncclSuccess);
  return signlion::host::callEnd(c, res);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignHostAllReduce(
    const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclSignOp_t op, ncclSignComm_t comm) {
  return hostAllReduce(sendbuff, recvbuff, count, datatype, op, nullptr, comm, "ncclSignHostAllReduce");
}

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignHostAllReduceWithConfig(
    const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclSignOp_t op,
    const ncclSignCallConfig_t* config, ncclSignComm_t comm) {
  return hostAllReduce(sendbuff, recvbuff, count, datatype, op, config, comm, "ncclSignHostAllReduceWithConfig");
}
