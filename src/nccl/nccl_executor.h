// The NCCL executor: runs one rank's schedule (src/algo), as its plan
// (nccl_plan.h) lays it out, through a Backend: the locals as kernels on the
// main lane; each step's chunk groups as grouped sends and receives, the
// adds of chunk k diverted to the side lane while chunk k+1 moves, joined
// before the next step reads what they wrote; allgather and field-sum as one
// collective; finally the result planes unpacked (or averaged) into the
// output. It issues work and returns; it decides nothing the schedule and
// the plan have not.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algo/schedule.h"
#include "nccl/backend.h"
#include "nccl/nccl_plan.h"

namespace signlion {
namespace nccl {

// count elements of dt from send -> count results into recv, for a schedule
// built for blocksForCount(count) blocks and planned as `plan`. scratch holds
// plan.layout.words words. send may be recv: every pack runs before the
// first result is written (makePlan fuses only where that holds).
ncclResult_t runSchedule(const algo::Schedule& s, const Plan& plan, uint64_t* scratch, const void* send, void* recv,
                         size_t count, ncclDataType_t dt, Backend& backend);

}  // namespace nccl
}  // namespace signlion
