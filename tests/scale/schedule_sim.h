// The sign all-reduce at any rank count in one process: every rank's schedule
// from src/algo (the real builders), its locals and receive actions run with
// the real CPU vote kernels of src/bits over real bit-plane buffers laid out
// by algo::layoutScratch, and only the transport is in memory. Steps run in
// lockstep (all locals of step i, then every send of step i is copied out,
// then every receive of step i is matched and applied), which the schedule
// format allows: within a step no rank writes a range it sends, and a
// receive from a peer matches that peer's sends to it in order, as ncclNet
// comms deliver. Nothing is chunked or overlapped: the host executor's
// overlap is tested at small N by the multirank tests; this checks the
// schedules and the bit algebra where processes cannot go.
//
// Memory is what N ranks' scratch needs (no stage), plus each rank's
// schedule with its empty steps dropped: a ring over N ranks has 2(N-1)
// steps per rank, but with fewer blocks than ranks most of them move
// nothing, which keeps N = 4096 within a few hundred MiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "algo/schedule.h"
#include "algo/topology.h"
#include "nccl_sign.h"

namespace signlion {
namespace test {

struct SimCase {
  ncclSignAlgo_t algo = ncclSignAlgoRing;
  int nranks = 1;
  algo::Topology topo;  // empty: unknown (the hierarchical algorithm then runs as halving-doubling)
  algo::OpSpec spec;
  ncclDataType_t dt = ncclFloat32;
  size_t count = 0;
};

struct SimOutcome {
  bool ok = false;
  std::string error;         // what went wrong, when !ok
  int steps = 0;             // per rank (every rank has the same)
  int64_t messages = 0;      // delivered, all ranks
  uint64_t bytesMoved = 0;   // payload bytes delivered, all ranks
  uint64_t maxRankSent = 0;  // the most bytes one rank sent
  size_t scratchBytes = 0;   // all ranks' buffers
  double seconds = 0;        // build + run + check
};

// Runs c over inputs[r] (count elements of c.dt per rank) and writes each
// rank's result to outputs[r] (count elements). Fails (ok = false, error
// set) when a schedule cannot be built, the ranks' schedules disagree (step
// counts, a send without its receive or with other bytes), a message is
// left undelivered, or the bytes delivered differ from what the schedules
// declare (Schedule::bytesSent).
SimOutcome simulateSchedules(const SimCase& c, const std::vector<const void*>& inputs,
                             const std::vector<void*>& outputs);

// Bytes every rank sends under c (what simulateSchedules would deliver), from
// the schedules alone: for the wire-cost tables at message sizes whose
// scratch would not fit N ranks in one process. Built one rank at a time.
// Returns false (error set) when a schedule cannot be built.
bool scheduleBytesSent(const SimCase& c, int64_t nblocks, std::vector<uint64_t>* perRank, std::string* error);

// Adds the ranks s sends to or receives from to *peers.
void addSchedulePeers(const algo::Schedule& s, std::set<int>* peers);

}  // namespace test
}  // namespace signlion
