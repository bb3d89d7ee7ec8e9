// ncclSignHostAllReduce: the sign all-reduce on host buffers. Long messages
// run as segments of SIGNLION_HOST_SEGMENT elements, each a whole schedule,
// so scratch memory is bounded whatever the count.
#include <algorithm>

#include "bits/bits.h"
#include "common/checks.h"
#include "host/host_params.h"
#include "host/communicator.h"


extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignHostAllReduce(
    const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclSignOp_t op,
    ncclSignComm_t comm) {
  static const char* kFn = "ncclSignHostAllReduce";
  ncclSignComm* c = signlion::host::checkComm(comm, kFn);
  if (c == nullptr) return ncclInvalidArgument;
  NCCLCHECK(signlion::bits::checkVoteArgs(datatype, (int)op, kFn));
  ARGCHECK(sendbuff != nullptr || count == 0, kFn, "sendbuff", "NULL with count %zu", count);
  ARGCHECK(recvbuff != nullptr || count == 0, kFn, "recvbuff", "NULL with count %zu", count);
  const size_t esize = signlion::bits::typeSize(datatype);
  ARGCHECK(count <= SIZE_MAX / esize, kFn, "count", "%zu elements overflow the address space", count);

  signlion::algo::OpSpec spec{op, c->config.zeroRule, c->config.tieRule};
  // Segments are whole blocks, so every segment but the last is a multiple of 64.
  size_t segment = (size_t)std::max<int64_t>(64, signlionParamHostSegment()) / 64 * 64;
  size_t done = 0;
  do {  // count == 0 still runs one (empty) schedule: every rank takes part
    size_t n = std::min(segment, count - done);
    const signlion::host::ScheduleEntry* e;
    NCCLCHECK(signlion::host::scheduleFor(c, signlion::algo::blocksForCount(n), spec, &e));
    NCCLCHECK(c->executor->run(e->schedule, e->extra, static_cast<const char*>(sendbuff) + done * esize,
                               static_cast<char*>(recvbuff) + done * esize, n, datatype));
    done += n;
  } while (done < count);
  return ncclSuccess;
}
