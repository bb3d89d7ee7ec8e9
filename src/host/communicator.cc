// Creation, destruction and queries of the host communicator (C ABI).
#include "host/communicator.h"

#include <cstring>
#include <string>

#include "algo/direct.h"
#include "common/checks.h"
#include "common/live_handles.h"
#include "host/host_params.h"
#include "host/link_rate.h"

#define SIGNLION_API extern "C" __attribute__((visibility("default")))

namespace signlion {
namespace host {

namespace {

// Every comm ncclSignCommInitRank returned and no destroy or abort has taken
// back. Never destroyed: a comm destroyed from an atexit handler still finds it.
LiveHandles& liveComms() {
  static LiveHandles* live = new LiveHandles();
  return *live;
}

ncclSignComm* notLive(ncclSignComm_t comm, const char* caller) {
  WARN("%s: invalid argument 'comm': %p is not a live ncclSignComm_t (never returned by ncclSignCommInitRank, or "
       "destroyed or aborted)",
       caller, (void*)comm);
  return nullptr;
}

}  // namespace

// Looked up by address before anything reads through the handle: a freed or
// foreign pointer is never dereferenced.
ncclSignComm* checkComm(ncclSignComm_t comm, const char* caller) {
  if (comm == nullptr || !liveComms().contains(comm)) return notLive(comm, caller);
  return comm;
}

// Takes a live comm out of the set, so that its destroy (or abort) is the
// only one: a second, or one racing it on another thread, gets nullptr.
ncclSignComm* takeComm(ncclSignComm_t comm, const char* caller) {
  if (comm == nullptr || !liveComms().remove(comm)) return notLive(comm, caller);
  return comm;
}

namespace {

// Closes everything the comm owns. Links first: peers blocked on them see an
// error rather than waiting for their timeout, and closing a comm joins the
// transport's helper threads, which may still be writing into the arena after
// a failed call. Only then is the arena's memory freed (its registrations
// went with the comms).
void destroy(ncclSignComm* comm) {
  if (comm->net) {
    comm->executor.reset();
    comm->sumTransfers.reset();
    comm->links.close(*comm->net);
    comm->arena.forget();
    comm->check.forget();
  }
  comm->bootstrap.reset();
  comm->net.reset();
  delete comm;
}

// Learns the link's rate (link_rate.h: the same on every rank) and sets what
// follows it, where no variable says otherwise: the cost model's beta, the
// chunk, and the data streams of the links made next.
ncclResult_t followLinkRate(ncclSignComm* comm) {
  LearnedLink link;
  NCCLCHECK(learnLinkRate(*comm->net, *comm->bootstrap, comm->topology, comm->config.timeoutMs, &link));
  const int streams = comm->net->setLinkRate(link.mbits);
  comm->linkMbits = link.mbits;
  comm->linkIsLineRate = link.lineRate;
  if (link.mbits > 0 && !signlionParamCostBetaMBpsIsSet()) {
    const LinkSettings s = linkSettingsFor(link.mbits);
    NCCLCHECK(comm->costModel.setMeasured(comm->costModel.params().alphaUs, (double)s.betaMBps));
    if (signlionParamHostChunkBytes() < 64)  // 0, or 1..63 (WARNed by hostChunkBytes): from the link
      comm->costModel.setHostExecutor(s.chunkBytes, comm->costModel.params().segmentElements);
  }
  if (comm->rank == 0)
    INFO(kSubsysInit | kSubsysNet,
         "ncclSignCommInitRank: link rate %lld Mbit/s (%s): cost model beta %.0f MB/s, host chunk %lld bytes, %s",
         (long long)link.mbits, link.how.c_str(), comm->costModel.params().betaBytesPerUs,
         (long long)comm->costModel.params().overlapChunkBytes,
         streams > 0 ? (std::to_string(streams) + " data streams per connection").c_str()
                     : "data streams as the net plugin picks them");
  return ncclSuccess;
}

ncclResult_t initRank(ncclSignComm* comm, int nranks, const ncclSignUniqueId& id, int rank,
                      const ncclSignConfig_t* config) {
  NCCLCHECK(resolveConfig(config, "ncclSignCommInitRank", &comm->config));
  comm->rank = rank;
  comm->nranks = nranks;
  NCCLCHECK(Bootstrap::create(id, rank, nranks, comm->config.timeoutMs, &comm->bootstrap));
  NCCLCHECK(Net::open(comm->config.netPlugin.c_str(), &comm->net));
  // What the executor overlaps and how it cuts messages (both compared
  // across ranks by the call check's settings).
  comm->costModel.setHostExecutor(hostChunkBytes(), (int64_t)hostSegmentElements());
  NCCLCHECK(checkSettingsAgree(*comm->bootstrap, comm->config, comm->costModel.params(), &comm->topology));
  NCCLCHECK(followLinkRate(comm));
  comm->hierNodeRanks = hierarchicalNodeRanks(comm->topology, nranks, comm->config.algorithm);
  if (comm->config.algorithm == ncclSignAlgoHierarchical && comm->hierNodeRanks == 0)
    WARN("ncclSignCommInitRank: rank %d: the hierarchical algorithm is forced (config->algorithm or SIGNLION_ALGO), "
         "but a node of this communicator has more than %d ranks (%s): its sign all-reduce calls will fail with "
         "ncclInvalidArgument",
         rank, kMaxHierNodeRanks, comm->topology.describe(nranks).c_str());
  if (comm->config.algorithm == ncclSignAlgoDirect && !algo::directAllowed(nranks))
    WARN("ncclSignCommInitRank: rank %d: the direct algorithm is forced (config->algorithm or SIGNLION_ALGO), but it "
         "talks to every rank and runs on at most %d ranks, not %d: its sign all-reduce calls will fail with "
         "ncclInvalidArgument",
         rank, algo::kMaxDirectRanks, nranks);
  NCCLCHECK(comm->links.connect(*comm->net, *comm->bootstrap,
                                schedulePeers(nranks, rank, comm->topology, comm->hierNodeRanks > 0,
                                              comm->config.algorithm),
                                comm->config.timeoutMs, comm->hierNodeRanks));
  NCCLCHECK(comm->check.init(*comm->net, comm->links, rank, nranks));
  std::vector<int> remote;
  for (int p : comm->links.peers())
    if (!comm->topology.sameNode(rank, p)) remote.push_back(p);
  bool onePerNode = true;
  for (const std::vector<int>& node : comm->topology.members(nranks)) onePerNode &= node.size() == 1;
  comm->pacing.init(comm->linkIsLineRate && onePerNode ? comm->linkMbits : 0, std::move(remote));
  comm->executor.reset(new ScheduleExecutor(*comm->net, comm->links, comm->arena, comm->check, comm->config.timeoutMs));
  comm->sumTransfers.reset(new Transfers(*comm->net, comm->config.timeoutMs));
  INFO(kSubsysInit, "ncclSignCommInitRank: rank %d/%d ready, algorithm %s, net %s, %s (host id %s)", rank, nranks,
       algoName(comm->config.algorithm), comm->net->name(), comm->topology.describe(nranks).c_str(),
       comm->config.hostId.c_str());
  return ncclSuccess;
}

}  // namespace

ncclResult_t scheduleFor(ncclSignComm* comm, int64_t nblocks, const algo::OpSpec& spec, const ScheduleEntry** out) {
  auto finish = [comm](ScheduleEntry* e) {
    makeHostPlan(e->schedule, &e->extra, comm->costModel.params().overlapChunkBytes);
    return ncclSuccess;
  };
  // Without its links (one node, or nodes too large) the hierarchical
  // algorithm is not available: auto leaves it out, forcing it fails. So is
  // the direct one past algo::kMaxDirectRanks ranks (no links made for it).
  unsigned available = algo::kAllAlgorithms;
  if (comm->hierNodeRanks == 0) available &= ~algo::algoBit(ncclSignAlgoHierarchical);
  if (!algo::directAllowed(comm->nranks)) available &= ~algo::algoBit(ncclSignAlgoDirect);
  return comm->schedules.get(comm->nranks, comm->rank, nblocks, spec, comm->config.algorithm, available,
                             comm->costModel, finish, out, &comm->topology);
}

ncclResult_t callStart(ncclSignComm* comm, const char* fn) {
  ncclResult_t err = comm->asyncError.load();
  if (err != ncclSuccess) {
    WARN(
        "%s: rank %d: an earlier call on this communicator failed (error %d): it takes no further calls; "
        "ncclSignCommAbort or ncclSignCommDestroy it",
        fn, comm->rank, (int)err);
    return err;
  }
  comm->calls++;
  return ncclSuccess;
}

ncclResult_t callEnd(ncclSignComm* comm, ncclResult_t res) {
  // An argument error is found the same way on every rank before anything of
  // the call moves (the settings agree): the caller's mistake, not the
  // comm's state, as in NCCL.
  if (res != ncclSuccess && res != ncclInProgress && res != ncclInvalidArgument) {
    ncclResult_t none = ncclSuccess;
    comm->asyncError.compare_exchange_strong(none, res);
  }
  return res;
}

void wireBytes(const ncclSignComm* comm, bool interNodeOnly, uint64_t* sent, uint64_t* received) {
  *sent = *received = 0;
  for (int p : comm->links.peers()) {
    if (interNodeOnly && comm->topology.sameNode(p, comm->rank)) continue;
    uint64_t s = 0, r = 0;
    if (comm->net->wireBytes(comm->links.peer(p).sendComm, &s, &r)) *sent += s;
    if (comm->net->wireBytes(comm->links.peer(p).recvComm, &s, &r)) *received += r;
  }
}

}  // namespace host
}  // namespace signlion

using signlion::host::checkComm;

SIGNLION_API ncclResult_t ncclSignCommInitRank(ncclSignComm_t* comm, int nranks, ncclSignUniqueId commId, int rank,
                                               const ncclSignConfig_t* config) {
  ARGCHECK(comm != nullptr, "ncclSignCommInitRank", "comm", "must not be NULL");
  *comm = nullptr;
  ARGCHECK(nranks >= 1, "ncclSignCommInitRank", "nranks", "%d must be at least 1", nranks);
  ARGCHECK(rank >= 0 && rank < nranks, "ncclSignCommInitRank", "rank", "%d is not in [0, %d)", rank, nranks);
  ncclSignComm* c = new ncclSignComm();
  ncclResult_t res = signlion::host::initRank(c, nranks, commId, rank, config);
  if (res == ncclSuccess && !signlion::host::liveComms().add(c)) {
    WARN("ncclSignCommInitRank: rank %d: out of memory recording the communicator", rank);
    res = ncclSystemError;
  }
  if (res != ncclSuccess) {
    signlion::host::destroy(c);
    return res;
  }
  *comm = c;
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommDestroy(ncclSignComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as ncclCommDestroy(NULL)
  ncclSignComm* c = signlion::host::takeComm(comm, "ncclSignCommDestroy");
  if (c == nullptr) return ncclInvalidArgument;
  signlion::host::destroy(c);
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommAbort(ncclSignComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ncclSignComm* c = signlion::host::takeComm(comm, "ncclSignCommAbort");
  if (c == nullptr) return ncclInvalidArgument;
  // Every link first, as a crash would end it: peers waiting in a collective
  // on this rank (to receive from it or to send to it) fail now, not after
  // their own timeout, and not only once the close of a link to a frozen
  // peer has given up.
  if (c->net) c->links.abort(*c->net);
  if (c->bootstrap) c->bootstrap->abort();
  signlion::host::destroy(c);
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommCount(const ncclSignComm_t comm, int* count) {
  ARGCHECK(count != nullptr, "ncclSignCommCount", "count", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommCount");
  if (c == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommUserRank(const ncclSignComm_t comm, int* rank) {
  ARGCHECK(rank != nullptr, "ncclSignCommUserRank", "rank", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommUserRank");
  if (c == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignBarrier(ncclSignComm_t comm) {
  ncclSignComm* c = checkComm(comm, "ncclSignBarrier");
  if (c == nullptr) return ncclInvalidArgument;
  ncclResult_t err = c->asyncError.load();
  if (err != ncclSuccess) {
    WARN("ncclSignBarrier: rank %d: an earlier call on this communicator failed (error %d)", c->rank, (int)err);
    return err;
  }
  return signlion::host::callEnd(c, c->bootstrap->barrier());
}

SIGNLION_API ncclResult_t ncclSignCommGetAsyncError(ncclSignComm_t comm, ncclResult_t* asyncError) {
  ARGCHECK(asyncError != nullptr, "ncclSignCommGetAsyncError", "asyncError", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommGetAsyncError");
  if (c == nullptr) return ncclInvalidArgument;
  *asyncError = c->asyncError.load();
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommGetWireBytes(const ncclSignComm_t comm, uint64_t* sentBytes,
                                                   uint64_t* recvBytes) {
  ARGCHECK(sentBytes != nullptr, "ncclSignCommGetWireBytes", "sentBytes", "must not be NULL");
  ARGCHECK(recvBytes != nullptr, "ncclSignCommGetWireBytes", "recvBytes", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommGetWireBytes");
  if (c == nullptr) return ncclInvalidArgument;
  signlion::host::wireBytes(c, false, sentBytes, recvBytes);
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommGetLinkRate(const ncclSignComm_t comm, int64_t* mbits) {
  ARGCHECK(mbits != nullptr, "ncclSignCommGetLinkRate", "mbits", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommGetLinkRate");
  if (c == nullptr) return ncclInvalidArgument;
  *mbits = c->linkMbits;
  return ncclSuccess;
}

SIGNLION_API ncclResult_t ncclSignCommGetInterNodeWireBytes(const ncclSignComm_t comm, int* node, uint64_t* sentBytes,
                                                            uint64_t* recvBytes) {
  ARGCHECK(node != nullptr, "ncclSignCommGetInterNodeWireBytes", "node", "must not be NULL");
  ARGCHECK(sentBytes != nullptr, "ncclSignCommGetInterNodeWireBytes", "sentBytes", "must not be NULL");
  ARGCHECK(recvBytes != nullptr, "ncclSignCommGetInterNodeWireBytes", "recvBytes", "must not be NULL");
  ncclSignComm* c = checkComm(comm, "ncclSignCommGetInterNodeWireBytes");
  if (c == nullptr) return ncclInvalidArgument;
  *node = c->topology.nodeOf(c->rank);
  signlion::host::wireBytes(c, true, sentBytes, recvBytes);
  return ncclSuccess;
}
