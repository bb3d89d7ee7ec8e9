// The host communicator behind ncclSignComm_t: bootstrap, network, links,
// scratch, the schedule cache, and the executors that run on them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "algo/cost_model.h"
#include "algo/schedule.h"
#include "algo/schedule_cache.h"
#include "algo/scratch_layout.h"
#include "common/config.h"
#include "host/arena.h"
#include "host/bootstrap.h"
#include "host/call_check.h"
#include "host/links.h"
#include "host/net.h"
#include "host/schedule_executor.h"
#include "host/send_pacing.h"
#include "host/transfers.h"

struct ncclSignComm {
  int rank = 0;
  int nranks = 0;
  signlion::ResolvedConfig config;
  std::unique_ptr<signlion::host::Bootstrap> bootstrap;
  std::unique_ptr<signlion::host::Net> net;
  signlion::host::Links links;
  signlion::host::Arena arena;
  signlion::host::CallCheck check;  // the calls' headers (sequence number and signature)
  uint64_t calls = 0;               // collective calls started on this comm (their sequence numbers)
  // The first error of a call on this comm: every later call returns it, so
  // what a failed call left on the links is never read as a result. Read by
  // ncclSignCommGetAsyncError from any thread.
  std::atomic<ncclResult_t> asyncError{ncclSuccess};
  std::unique_ptr<signlion::host::ScheduleExecutor> executor;
  std::unique_ptr<signlion::host::Transfers> sumTransfers;  // the sum baseline's, reused across calls
  signlion::algo::CostModel costModel;
  signlion::algo::Topology topology;  // every rank's node, from the host ids traded at init
  int hierNodeRanks = 0;              // hierarchicalNodeRanks: 0 when hier has no links here
  int64_t linkMbits = 0;              // the link rate learned at init (0: none)
  bool linkIsLineRate = false;        // LearnedLink::lineRate
  signlion::host::SendPacing pacing;  // caps on the links to other nodes, per the call's schedule

  // Each schedule with the executor's arena layout for it, so a warm
  // communicator builds and lays out none.
  signlion::algo::ScheduleCache<signlion::host::HostPlan> schedules;
};

namespace signlion {
namespace host {

// The comm if `comm` is a live communicator (one ncclSignCommInitRank
// returned, not yet destroyed or aborted: a registry of addresses, consulted
// before any read through the handle), else nullptr after a WARN that names
// `caller`. One lock and one hash lookup, no allocation.
ncclSignComm* checkComm(ncclSignComm_t comm, const char* caller);
// As checkComm, and takes the comm out of the registry: what destroy and
// abort call first, so each comm is torn down once.
ncclSignComm* takeComm(ncclSignComm_t comm, const char* caller);

// The start of a collective call on comm: its sticky error (WARN naming
// `fn`) if an earlier call failed, else ncclSuccess with comm->calls counting
// this call.
ncclResult_t callStart(ncclSignComm* comm, const char* fn);
// The end of a call: res, kept as comm's sticky error when it is one (all but
// ncclInvalidArgument).
ncclResult_t callEnd(ncclSignComm* comm, ncclResult_t res);

using ScheduleEntry = algo::ScheduleCache<HostPlan>::Entry;

// The schedule for one segment (the algorithm the config forces, or the cost
// model's choice) and the executor's plan for it (makeHostPlan: arena layout,
// chunks and their waits); cached by
// (requested algorithm, blocks, op, rules).
ncclResult_t scheduleFor(ncclSignComm* comm, int64_t nblocks, const algo::OpSpec& spec, const ScheduleEntry** out);

// Bytes of wire traffic so far (our transport's counters, which include its
// headers): of all links, or only of the links to ranks on other nodes.
void wireBytes(const ncclSignComm* comm, bool interNodeOnly, uint64_t* sent, uint64_t* received);

}  // namespace host
}  // namespace signlion
