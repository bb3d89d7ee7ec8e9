// sign_allreduce_perf --nccl: ncclSignAllReduce on device buffers and NCCL
// communicators, timed next to NCCL's own ncclAllReduce (sum) of the same
// element count in fp32 and in bf16, on the same communicators in the same
// run. Ranks are processes forked by the binary (perf/nccl_ranks.h), rank r
// on GPU r % devices.
#pragma once

#include <cstddef>
#include <string>

namespace signlion {
namespace perf {

struct NcclPerfOptions {
  int nranks = 2;
  size_t minBytes = 0, maxBytes = 0, stepBytes = 0, stepFactor = 1;
  int iters = 20, warmupIters = 5, aggIters = 1, runCycles = 1, check = 1, average = 1;
  std::string op = "mavo";     // mavo, avg, all
  std::string type = "float";  // float, half, bfloat16, int8, all
  int algo = 0;                // ncclSignAlgo_t for ncclSignCommSetConfig
  std::string algoName = "auto";
};

// Runs the GPU mode; returns the exit code: 0, 1 (a wrong result or a failed
// call), 2 (bad options), 77 (no GPU: the mode cannot run here; a message
// says why).
int runNcclMode(const NcclPerfOptions& options);

}  // namespace perf
}  // namespace signlion
