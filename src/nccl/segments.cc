#include "nccl/segments.h"

#include <algorithm>
#include <cstdint>

#include "bits/bits.h"
#include "common/checks.h"
#include "nccl/device_backend.h"
#include "nccl/nccl_executor.h"
#include "nccl/nccl_params.h"

namespace signlion {
namespace nccl {

ncclResult_t runSegments(const NcclApi& api, CommContext& ctx, const algo::OpSpec& spec, const char* send, char* recv,
                         size_t count, ncclDataType_t dt, cudaStream_t stream, bool capturing) {
  const uint64_t segment = segmentElements();
  const size_t esize = bits::typeSize(dt);
  for (size_t done = 0; done < count;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(segment, count - done));
    const algo::ScheduleCache<Plan>::Entry* entry = nullptr;
    NCCLCHECK(ctx.planFor(algo::blocksForCount(n), spec, &entry));
    uint64_t* scratch;
    NCCLCHECK(ctx.scratch(static_cast<size_t>(entry->extra.layout.bytes()), stream, capturing, &scratch));
    DeviceBackend backend(api, ctx.comm, stream, ctx.side(), ctx.forkEvent(), ctx.joinEvent(), ctx.malformedFlag());
    NCCLCHECK(
        runSchedule(entry->schedule, entry->extra, scratch, send + done * esize, recv + done * esize, n, dt, backend));
    done += n;
  }
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
