#include "nccl/node_groups.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/checks.h"

namespace signlion {
namespace nccl {

namespace {

// A nonblocking parent makes a nonblocking split (it inherits the config):
// wait until NCCL has finished making it, for as long as a peer may take to
// reach its first call.
ncclResult_t awaitSplit(const NcclApi& api, ncclComm_t nodeComm) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t res = api.commGetAsyncError(nodeComm, &state);
    if (res != ncclSuccess) return res;
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline) {
      WARN("ncclSignAllReduce: ncclCommSplit by node still in progress after 10 minutes");
      return ncclSystemError;
    }
    sched_yield();
  }
}

}  // namespace

ncclResult_t learnNodeGroups(const NcclApi& api, Backend& backend, ncclComm_t comm, int nranks, int rank,
                             const std::string& hostId, uint64_t* scratch, NodeGroups* out) {
  static const char* kFn = "ncclSignAllReduce";
  NodeGroups g;
  const uint64_t mine = algo::hostIdHash(hostId);
  std::vector<uint64_t> hashes(static_cast<size_t>(nranks));
  NCCLCHECK(backend.copyIn(scratch + rank, &mine, 1));
  NCCLCHECK(backend.allGather(scratch + rank, scratch, 1));
  NCCLCHECK(backend.copyOut(hashes.data(), scratch, nodeGroupWords(nranks)));
  const algo::Topology topo = algo::topologyFromHostHashes(hashes);
  const std::vector<std::vector<int>> members = topo.members(nranks);
  g.nodes = static_cast<int>(members.size());
  g.learned = true;
  // One node, or every rank its own: nothing to group (the flat model).
  if (g.nodes == 1 || g.nodes == nranks) {
    INFO(kSubsysInit, "%s: comm %p rank %d/%d (host id '%s'): %s, no node grouping", kFn, (void*)comm, rank, nranks,
         hostId.c_str(), topo.describe(nranks).c_str());
    *out = g;
    return ncclSuccess;
  }
  if (api.commSplit == nullptr) {
    WARN(
        "%s: comm %p spans %s, but the NCCL at %s has no ncclCommSplit (NCCL 2.18+): no node grouping, every "
        "algorithm runs flat (hierarchical as halving-doubling)",
        kFn, (void*)comm, topo.describe(nranks).c_str(), api.path);
    *out = g;
    return ncclSuccess;
  }
  const int node = topo.nodeOf(rank);
  const std::vector<int>& mates = members[static_cast<size_t>(node)];
  ncclComm_t nodeComm = nullptr;
  ncclResult_t res = api.commSplit(comm, node, rank, &nodeComm, nullptr);
  if (res == ncclInProgress) res = awaitSplit(api, nodeComm);
  if (res != ncclSuccess) {
    WARN("%s: ncclCommSplit(comm %p, color %d, key %d) failed: %s", kFn, (void*)comm, node, rank,
         api.getErrorString(res));
    if (nodeComm != nullptr) (void)api.commDestroy(nodeComm);
    return res;
  }
  int size = 0, local = -1;
  res = api.commCount(nodeComm, &size);
  if (res == ncclSuccess) res = api.commUserRank(nodeComm, &local);
  const int wantLocal = static_cast<int>(std::find(mates.begin(), mates.end(), rank) - mates.begin());
  if (res != ncclSuccess || size != static_cast<int>(mates.size()) || local != wantLocal) {
    WARN("%s: comm %p rank %d: NCCL's node comm %p is rank %d of %d (%s), expected rank %d of %d", kFn, (void*)comm,
         rank, (void*)nodeComm, local, size, api.getErrorString(res), wantLocal, (int)mates.size());
    (void)api.commDestroy(nodeComm);
    return res != ncclSuccess ? res : ncclInternalError;
  }
  g.topology = topo;
  g.nodeComm = nodeComm;
  g.api = &api;
  INFO(kSubsysInit, "%s: comm %p rank %d/%d (host id '%s'): %s; node %d, local rank %d of %d (node comm %p)", kFn,
       (void*)comm, rank, nranks, hostId.c_str(), topo.describe(nranks).c_str(), node, local, size, (void*)nodeComm);
  *out = g;
  return ncclSuccess;
}

ncclResult_t releaseNodeGroups(NodeGroups* groups) {
  ncclResult_t res = ncclSuccess;
  if (groups->nodeComm != nullptr && groups->api != nullptr) {
    res = groups->api->commDestroy(groups->nodeComm);
    if (res != ncclSuccess)
      WARN("ncclSignCommRelease: ncclCommDestroy of the node comm %p failed: %s", (void*)groups->nodeComm,
           groups->api->getErrorString(res));
  }
  *groups = NodeGroups();
  return res;
}

}  // namespace nccl
}  // namespace signlion
