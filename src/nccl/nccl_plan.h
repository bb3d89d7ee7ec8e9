// How the NCCL executor runs one rank's schedule: where each buffer lives in
// the device scratch, how each step's transfers are cut into chunks and
// grouped, which receive is fused with the decide that follows it, and which
// output blocks the final unpack writes. Plain data made from a Schedule
// alone (no CUDA, no NCCL), so it is unit-tested on the CPU.
//
// Chunks. A transfer of `planes` planes over blocks [begin, end) is cut into
// chunks of algo::chunkBlocks(transfer, chunkBytes) blocks; sender and receiver
// cut it the same way (same range, same planes, same coding), and every chunk
// travels as one ncclSend/ncclRecv per plane, planes in order, so no plane is
// ever gathered into a contiguous message: NCCL matches the point-to-point
// operations of one peer in a group in the order they were posted. A decided
// result coded 5 elements per byte (algo::Coding::kTrits) is the exception:
// each chunk is coded into the stage before the step's first group and
// travels as one message; a received one is decoded into the result planes
// on the side lane, as an add is. Chunk k of every
// transfer of a step forms group k (one ncclGroupStart/End); a receive that
// adds runs after its group, on the side stream, while group k+1 moves.
//
// Exchanges. Allgather and field-sum do not run their schedule's ring steps:
// the vote slots are gathered by one ncclAllGather, the field words summed by
// one ncclAllReduce, so NCCL's own tuned paths carry them (src/algo's
// field_sum.cc and allgather.cc describe the same exchange as steps).
#pragma once

#include <cstdint>
#include <vector>

#include "algo/schedule.h"
#include "algo/scratch_layout.h"

namespace signlion {
namespace nccl {

// Scratch regions start on this many words (256 bytes).
constexpr int64_t kScratchAlignWords = 32;

// The regions of algo/scratch_layout.h; here the stage is where the payloads
// of adding receives land (one step's worth).
using algo::ScratchLayout;

// Blocks [begin, begin + len) of transfer `index` (into the step's sends, or
// its recvs).
struct Chunk {
  int index = 0;
  int64_t begin = 0;
  int64_t len = 0;
  // A receive with an action (add, or decoding a coded result): payload offset
  // in words within the stage region (an add's planes len words apart); a
  // coded result's send: where it is coded. -1: the payload travels in place.
  int64_t stage = -1;
};

// Chunk k of every transfer of a step: one NCCL group.
struct ChunkGroup {
  std::vector<Chunk> sends;
  std::vector<Chunk> recvs;
  bool hasActions = false;  // a receive in it runs a kernel once its data is here
};

enum class Exchange : uint8_t {
  kSteps,      // the step's own sends and receives, as chunk groups
  kAllGather,  // after the locals: ncclAllGather of the vote slots
  kAllReduce,  // after the locals: ncclAllReduce (uint64 sum) of the field words
};

struct StepPlan {
  int step = 0;             // index in Schedule::steps
  std::vector<int> locals;  // the step's locals to run, in order (a fused decide is left out)
  Exchange exchange = Exchange::kSteps;
  std::vector<ChunkGroup> groups;  // kSteps
  int fusedRecv = -1;              // the recv (index) whose add is fused with the decide that follows
};

struct Plan {
  ScratchLayout layout;
  std::vector<StepPlan> steps;
  // The fused receive: add + decide + unpack of `fused` blocks, straight to
  // the output. Its result planes are stored too when a later step sends them.
  algo::Range fused;
  bool fusedStoresPlanes = false;
  // Blocks the final unpack (or average) writes: every block not in `fused`,
  // in order, as at most two ranges.
  std::vector<algo::Range> unpack;
  int64_t stageWords = 0;  // the stage region's size
};

// The plan of schedule s with chunks of at most chunkBytes payload bytes
// (>= 8). Errors: ncclInternalError (with a WARN) for a schedule this
// executor cannot run (a receive op or buffer it does not know).
ncclResult_t makePlan(const algo::Schedule& s, int64_t chunkBytes, Plan* out);

}  // namespace nccl
}  // namespace signlion
