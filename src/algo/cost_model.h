// Alpha-beta cost model of the sign all-reduce algorithms, and the per-call
// choice among them. docs/ALGORITHMS.md ("Choosing") explains the model.
#pragma once

#include <cstdint>

#include "algo/schedule.h"
#include "nccl_sign.h"

namespace signlion {
namespace algo {

// predicted time = sum over the message steps of (alpha + bytes/beta), where
// bytes is the larger of what the rank sends and receives in the step (links
// are full duplex) and a message step is one in which any rank sends (steps
// are sequential: a step idle on this rank still waits for the others), plus gamma per element-plane of compute: every bit
// received is one plane of one element added or stored, and every element is
// packed (counters planes) and decided/unpacked (resultPlanes planes) once.
// Rank 0's schedule is costed: it is on the critical path (a fold partner in
// halving-doubling, and ring shards differ by at most one block).
struct CostParams {
  double alphaUs = 20.0;            // per message step; SIGNLION_COST_ALPHA_NS (20000)
  double betaBytesPerUs = 1250.0;   // link bandwidth; SIGNLION_COST_BETA_MBPS (1250 = 10 Gb/s)
  double gammaUsPerPlane = 1e-5;    // compute per element-plane; SIGNLION_COST_GAMMA_PS (10)
  // Negative: every algorithm runs its schedule's steps one after the other
  // (the host executor). Otherwise allgather and field-sum run as one library
  // collective (the NCCL executor: ncclAllGather, ncclAllReduce), whose steps
  // are pipelined inside one launch: alphaUs once per call, then this per
  // message step.
  double collectiveStepUs = -1.0;
};

// Cost parameters from SIGNLION_<prefix>_ALPHA_NS, _BETA_MBPS and _GAMMA_PS
// as the caller's cached parameters read them: a value <= 0 logs a WARN
// naming the variable and keeps the one in `defaults`.
CostParams costParamsFrom(const char* prefix, int64_t alphaNs, int64_t betaMBps, int64_t gammaPs,
                          const CostParams& defaults);

// Bit i set when algorithm i (ncclSignAlgo_t) may be used.
constexpr unsigned algoBit(ncclSignAlgo_t algo) { return 1u << static_cast<unsigned>(algo); }
constexpr unsigned kAllAlgorithms = algoBit(ncclSignAlgoRing) | algoBit(ncclSignAlgoHalvingDoubling) |
                                    algoBit(ncclSignAlgoAllGather) | algoBit(ncclSignAlgoFieldSum);

class CostModel {
 public:
  // Defaults overridden by SIGNLION_COST_ALPHA_NS, _BETA_MBPS, _GAMMA_PS (a
  // value <= 0 logs a WARN and keeps the default).
  CostModel();
  explicit CostModel(const CostParams& params) : params_(params) {}

  // Replace alpha and beta with measured values (a bootstrap ping-pong, say).
  // Errors: ncclInvalidArgument for alphaUs < 0 or betaBytesPerUs <= 0 (or NaN).
  ncclResult_t setMeasured(double alphaUs, double betaBytesPerUs);
  const CostParams& params() const { return params_; }

  // Predicted microseconds of one call of `algo` on `count` elements.
  ncclResult_t predict(ncclSignAlgo_t algo, int nranks, uint64_t count, const OpSpec& spec, double* us) const;
  // The same for an already built schedule.
  double predict(const Schedule& s) const;

 private:
  CostParams params_;
};

// Picks the algorithm of one call. A concrete `requested` (from the config or
// SIGNLION_ALGO, see resolveConfig) is returned as is, if `available` allows
// it (buildSchedule then refuses it if a setting rules it out);
// ncclSignAlgoAuto picks the cheapest available one under `model` (ties go
// to the lower enum value), leaving out any that a setting rules out
// (settingsConflict) with one WARN per algorithm, N and setting value in the
// process. The choice is logged at INFO (subsystem ALGO).
// Errors: ncclInvalidArgument (with a WARN) for nranks < 1, an unknown
// requested algorithm, a bad OpSpec, a forced algorithm that is not
// available, or no available algorithm (after the settings) at all.
ncclResult_t chooseAlgorithm(int nranks, uint64_t count, const OpSpec& spec, unsigned available,
                             ncclSignAlgo_t requested, const CostModel& model, ncclSignAlgo_t* chosen);

}  // namespace algo
}  // namespace signlion
