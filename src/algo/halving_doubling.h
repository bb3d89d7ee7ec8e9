// Recursive halving-doubling over a group of ranks on one range of blocks,
// shared by the flat algorithm (every rank, the whole message) and the
// hierarchical one (the node leaders of one shard, each holding its node's
// votes).
#pragma once

#include <cstdint>
#include <vector>

#include "algo/schedule.h"

namespace signlion {
namespace algo {
namespace detail {

struct HdGroup {
  std::vector<int> ranks;      // the group's members (global ranks), in group order
  std::vector<int64_t> votes;  // votes each member's counter holds over `range` at the start
  int me = -1;                 // this rank's index in `ranks`; -1: not a member (idle steps only)
  Range range;                 // the blocks the group reduces
};

// Steps appended: a fold step (always; `first`'s locals run in it), log2(P)
// halving steps, a decide step, log2(P) doubling steps, and an unfold step
// when the group size is no power of two: the same count for every rank that
// passes a group of the same size, member or not. Afterwards every member
// holds the decided result over range. The decide compares with
// s->nranks (the communicator's total), so the members' votes must sum to it.
void appendHalvingDoubling(Schedule* s, const HdGroup& g, Step first);

// The steps appendHalvingDoubling appends for a group of `members` ranks.
int halvingDoublingSteps(int members);

}  // namespace detail
}  // namespace algo
}  // namespace signlion
