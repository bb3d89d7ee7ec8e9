// The command line of sign_allreduce_perf: nccl-tests' flags and defaults,
// shared by the host mode (sign_allreduce_perf.cc) and the GPU mode
// (sign_allreduce_perf_nccl.cc).
#pragma once

#include <cstddef>
#include <string>

namespace signlion {
namespace perf {

struct Options {
  int nThreads = 1;  // host mode: ranks as threads per process; --nccl: ranks (processes)
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20, stepFactor = 1;
  int iters = 20, warmupIters = 5, aggIters = 1, runCycles = 1, check = 1;
  int blocking = 0, timeoutSec = 0, average = 1;  // average: 0 rank 0, 1 mean, 2 min, 3 max
  std::string op = "mavo", type = "float", algo = "auto";
  // Processes started by hand.
  int rank = -1, nranks = 0;
  std::string idFile;
  bool nccl = false;  // the GPU mode
};

}  // namespace perf
}  // namespace signlion
