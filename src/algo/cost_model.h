// Alpha-beta cost model of the sign all-reduce algorithms, and the per-call
// choice among them. docs/ALGORITHMS.md ("Choosing") explains the model.
#pragma once

#include <cstdint>

#include "algo/schedule.h"
#include "common/param.h"
#include "nccl_sign.h"

// The network link's bandwidth the host communicator's model assumes, MB/s
// (bytes per microsecond); here because the host executor's chunk size also
// follows it (host::hostChunkBytes).
SIGNLION_PARAM(CostBetaMBps, "COST_BETA_MBPS", 1250, 1, int64_t{1} << 40)

namespace signlion {
namespace algo {

// predicted time = sum over the message steps of the larger of (alpha +
// bytes/beta) and the step's adds, where bytes is the larger of what the rank
// sends and receives in the step (links are full duplex), a message step is
// one in which any rank sends (steps are sequential: a step idle on this rank
// still waits for the others), and the adds cost gamma per bit received (one
// plane of one element added or stored; the executors add each chunk while
// the next ones are on the wire, so the step takes the longer of the two);
// plus the CPU work that no transfer hides: every element packed into its
// vote planes (pack per element and counter) before the first step, and
// decided or unpacked into the output (decide per element) after the last.
// Rank 0's schedule is costed: it is on the critical path (a fold partner in
// halving-doubling, and ring shards differ by at most one block); for the
// tree, whose steps are a pipeline, the busiest rank's (treeBusiestRank).
//
// The host executor overlaps that CPU work with the transfers
// (overlapChunkBytes > 0, src/host/schedule_executor.h): then the pack into
// the counter runs under the transfers, each block under the step that first
// sends or adds to it (the executor's lazy pack), but for the first chunk
// sent (packed before anything leaves); a pack into vote slots runs under
// the first message step; each result range is unpacked (decide per
// element) under the transfers of the step that writes it, and each step's
// last chunk received is added and unpacked after the wire: a step costs
// max(transfer, adds + pack and unpack under it) + that last chunk's add and
// unpack. A step without messages costs its unpacks. Where a schedule does
// not allow it (resultWrittenOnceAfterPacks) the output is unpacked after the
// last step, as without overlap. A message longer than segmentElements runs
// as whole schedules of that many elements, each costed so.
//
// Two link classes. When the topology is known, a message between ranks of
// one node costs intraAlphaUs + bytes/intraBetaBytesPerUs (each rank its own
// links: loopback, shared memory, NVLink), and the messages that leave a node
// share that node's one network link: a step costs alphaUs + (the larger of
// the bytes all ranks of rank 0's node send to and receive from other
// nodes) / betaBytesPerUs. A step costs the larger of its intra and inter
// parts. Unknown topology: every rank is its own node (the flat model).
struct CostParams {
  double alphaUs = 20.0;           // per message step between nodes; SIGNLION_COST_ALPHA_NS (20000)
  double betaBytesPerUs = 1250.0;  // a node's network link; SIGNLION_COST_BETA_MBPS (1250 = 10 Gb/s)
  double gammaUsPerPlane = 1e-5;   // add per bit received; SIGNLION_COST_GAMMA_PS (10)
  // Negative: every algorithm runs its schedule's steps one after the other
  // (the host executor). Otherwise allgather and field-sum run as one library
  // collective (the NCCL executor: ncclAllGather, ncclAllReduce), whose steps
  // are pipelined inside one launch: alphaUs once per call, then this per
  // message step.
  double collectiveStepUs = -1.0;
  double intraAlphaUs = 10.0;           // per message step inside a node; SIGNLION_COST_INTRA_ALPHA_NS (10000)
  double intraBetaBytesPerUs = 8000.0;  // a rank's links inside a node; SIGNLION_COST_INTRA_BETA_MBPS (8000)
  // The host executor's CPU kernels (AVX2, one core, fp32: perf/bits_bench,
  // docs/PERFORMANCE.md section 1): pack 9.35 GB/s of input, decide 6.96 GB/s
  // of output.
  double packUsPerElement = 430e-6;    // per element and counter; SIGNLION_COST_PACK_PS (430)
  double decideUsPerElement = 575e-6;  // per element; SIGNLION_COST_DECIDE_PS (575)
  // The executor's overlap and segments (setHostExecutor); 0: none (CPU work
  // before the first and after the last step, one schedule per message).
  int64_t overlapChunkBytes = 0;
  int64_t segmentElements = 0;
};

// Cost parameters from SIGNLION_<prefix>_ALPHA_NS, _BETA_MBPS and _GAMMA_PS
// as the caller's cached parameters read them: a value <= 0 logs a WARN
// naming the variable and keeps the one in `defaults`.
CostParams costParamsFrom(const char* prefix, int64_t alphaNs, int64_t betaMBps, int64_t gammaPs,
                          const CostParams& defaults);
// The intra-node class from SIGNLION_<prefix>_INTRA_ALPHA_NS and
// _INTRA_BETA_MBPS, the same way.
void intraCostParamsFrom(const char* prefix, int64_t alphaNs, int64_t betaMBps, CostParams* p);
// The CPU costs from SIGNLION_<prefix>_PACK_PS and _DECIDE_PS, the same way.
void cpuCostParamsFrom(const char* prefix, int64_t packPs, int64_t decidePs, CostParams* p);

// Bit i set when algorithm i (ncclSignAlgo_t) may be used.
constexpr unsigned algoBit(ncclSignAlgo_t algo) { return 1u << static_cast<unsigned>(algo); }
constexpr unsigned kAllAlgorithms = algoBit(ncclSignAlgoRing) | algoBit(ncclSignAlgoHalvingDoubling) |
                                    algoBit(ncclSignAlgoAllGather) | algoBit(ncclSignAlgoFieldSum) |
                                    algoBit(ncclSignAlgoHierarchical) | algoBit(ncclSignAlgoDirect) |
                                    algoBit(ncclSignAlgoTree);

class CostModel {
 public:
  // Defaults overridden by SIGNLION_COST_ALPHA_NS, _BETA_MBPS, _GAMMA_PS,
  // _INTRA_ALPHA_NS, _INTRA_BETA_MBPS, _PACK_PS, _DECIDE_PS (a value <= 0
  // logs a WARN and keeps the default).
  CostModel();
  explicit CostModel(const CostParams& params) : params_(params) {}

  // Replace alpha and beta with measured values (a bootstrap ping-pong, say).
  // Errors: ncclInvalidArgument for alphaUs < 0 or betaBytesPerUs <= 0 (or NaN).
  ncclResult_t setMeasured(double alphaUs, double betaBytesPerUs);
  const CostParams& params() const { return params_; }
  // The host executor: transfers cut into chunks of chunkBytes with CPU work
  // overlapped (see CostParams), messages run as segments of segmentElements.
  void setHostExecutor(int64_t chunkBytes, int64_t segmentElements) {
    params_.overlapChunkBytes = chunkBytes;
    params_.segmentElements = segmentElements;
  }

  // Predicted microseconds of one call of `algo` on `count` elements over
  // `topo` (nullptr: unknown), as segments of segmentElements when set.
  ncclResult_t predict(ncclSignAlgo_t algo, int nranks, uint64_t count, const OpSpec& spec, double* us,
                       const Topology* topo = nullptr) const;
  // The same for an already built schedule (of rank 0, or whichever rank's
  // node is to be costed) of one segment; the schedules of its node's other
  // ranks are built here when the topology is known.
  double predict(const Schedule& s, const Topology* topo = nullptr) const;

 private:
  CostParams params_;
};

// The tree's predicted time must be under this share of the best other
// algorithm's for auto to take it (cost_model.cc says why).
constexpr double kTreeMargin = 0.9;

// Picks the algorithm of one call. A concrete `requested` (from the config or
// SIGNLION_ALGO, see resolveConfig) is returned as is, if `available` allows
// it (buildSchedule then refuses it if a setting rules it out);
// ncclSignAlgoAuto picks the cheapest available one under `model` (ties go
// to the lower enum value; the hierarchical algorithm only where topo has
// several nodes and one of them several ranks, as elsewhere it is
// halving-doubling or has nothing to cross; the direct algorithm only up to
// kMaxDirectRanks ranks, algo/direct.h; the tree only where it is predicted
// to take at most kTreeMargin of the best other one's time), leaving out any that a setting rules out
// (settingsConflict) with one WARN per algorithm, N and setting value in the
// process. The choice is logged at INFO (subsystem ALGO).
// Errors: ncclInvalidArgument (with a WARN) for nranks < 1, an unknown
// requested algorithm, a bad OpSpec, a forced algorithm that is not
// available, or no available algorithm (after the settings) at all.
// `topo` (nullptr: unknown) is the communicator's topology.
ncclResult_t chooseAlgorithm(int nranks, uint64_t count, const OpSpec& spec, unsigned available,
                             ncclSignAlgo_t requested, const CostModel& model, ncclSignAlgo_t* chosen,
                             const Topology* topo = nullptr);

}  // namespace algo
}  // namespace signlion
