// Which ranks of an NCCL communicator share a node, and NCCL's own
// communicator of each node: what the hierarchical algorithm groups by and
// what the cost model tells intra-node links from inter-node links by on the
// NCCL path (docs/NCCL.md, "Nodes").
//
// Learned once per communicator, by its first ncclSignAllReduce (never
// during CUDA graph capture: a comm's first call is refused there already):
// every rank's host identity (config.hostId, else SIGNLION_HOSTID, else
// NCCL_HOSTID, else hostname + boot id: defaultHostId, the host
// communicator's rule) is hashed and all-gathered over the comm, the hashes
// are read back on the host (the stream is waited for, once), and when the
// comm has several nodes and one of them several ranks, NCCL's grouping is
// made with ncclCommSplit(comm, color = node index, key = rank). The split
// communicator is kept with the comm's context and destroyed with it
// (ncclSignCommRelease). Without ncclCommSplit in the loaded NCCL the
// topology stays unknown (a WARN): every algorithm runs flat, and a forced
// hierarchical one is halving-doubling.
//
// Intra-node steps of the hierarchical schedule run as point-to-point
// operations on the parent comm, not on the node comm: NCCL already carries
// a same-node peer over P2P/NVLink or shared memory there, a step's grouped
// sends and receives stay one ncclGroupStart/End on one comm, and no second
// set of p2p connection buffers is set up per peer. The node comm is NCCL's
// confirmation of the grouping (its size and rank must be this rank's node
// and local rank) and is there for intra-node collectives.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "algo/topology.h"
#include "nccl/backend.h"
#include "nccl/nccl_symbols.h"

namespace signlion {
namespace nccl {

struct NodeGroups {
  bool learned = false;  // the exchange ran on this comm (whatever it found)
  // Every rank's node; known only when the comm has several nodes, one of
  // them with several ranks, and the node comm exists. Unknown: flat.
  algo::Topology topology;
  int nodes = 0;                  // distinct host ids seen (0 before the exchange)
  ncclComm_t nodeComm = nullptr;  // this rank's node: ncclCommSplit(comm, node, rank)
  const NcclApi* api = nullptr;   // the table that made nodeComm, to destroy it

  bool hierarchical() const { return topology.known(); }
};

// Words of backend scratch learnNodeGroups needs on nranks ranks.
constexpr size_t nodeGroupWords(int nranks) { return static_cast<size_t>(nranks); }

// The exchange above, collective over comm (rank `rank` of nranks), with
// `hostId` this rank's identity; scratch: nodeGroupWords(nranks) words of
// backend memory. Fills *out (out->learned set even when nothing is split);
// a node comm keeps &api, which must outlive it (ncclApi's table does).
// Errors: what the backend, ncclCommSplit or ncclCommGetAsyncError return
// (each with a WARN); ncclInternalError (WARN) when the node comm NCCL made
// is not this rank's node. Nothing is kept on error.
ncclResult_t learnNodeGroups(const NcclApi& api, Backend& backend, ncclComm_t comm, int nranks, int rank,
                             const std::string& hostId, uint64_t* scratch, NodeGroups* out);

// Destroys the node comm (if any) and forgets the grouping; the first error
// is returned, the state is reset regardless.
ncclResult_t releaseNodeGroups(NodeGroups* groups);

}  // namespace nccl
}  // namespace signlion
