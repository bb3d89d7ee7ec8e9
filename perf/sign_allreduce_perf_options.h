// The command line of sign_allreduce_perf: nccl-tests' flags and defaults,
// shared by the host mode (sign_allreduce_perf.cc) and the GPU mode
// (sign_allreduce_perf_nccl.cc). Flags that only mean something on a GPU are
// accepted in the host mode with a "# note:" line saying so (perf_report.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace signlion {
namespace perf {

struct Options {
  int nThreads = 1;  // -t: host mode: threads per process; --nccl: processes
  int nGpus = 1;     // -g: ranks per thread (host mode) or per process (--nccl): ranks = t x g
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20, stepFactor = 1;
  int iters = 20, warmupIters = 1, aggIters = 1, runCycles = 1, check = 1;
  // -z: 0 none; 1 wait and barrier after each inner call (-m); 2 wait after
  // each inner call; 3 wait and barrier after each outer iteration (-n), the
  // barrier left out of the time.
  int blocking = 0;
  int timeoutSec = 0, average = 1;          // average: 0 rank 0, 1 mean, 2 min, 3 max
  int parallelInit = 0;                     // -p
  int streamNull = 0;                       // -y: --nccl on the legacy default stream
  int graphLaunches = 0;                    // -G: --nccl: capture -n x -m calls once, launch the graph G times
  int reportCputime = 0;                    // -C: the time to issue the calls, not to complete them
  int reportTimestamps = 0;                 // -S
  std::string outputFile;                   // -J: JSON
  int localRegister = 0;                    // -R: --nccl: ncclCommRegister the buffers
  int ctaPolicy = -1;                       // -x (not applied; a note says so)
  int deviceImpl = 0, deviceCtaCount = 16;  // -D, -V (nccl-tests' own kernels; a note says so)
  int memoryReport = 0;                     // -M
  int unalign = 0;                          // -u: buffers start this many elements past their alignment
  int perIterTiming = 0, perIterSkip = 0;   // -I, -K
  bool given[128] = {};                     // which short flags the command line named
  std::vector<std::string> args;            // the whole command line (-J writes it)
  std::string op = "mavo", type = "float", algo = "auto";
  // What the header adds after the algorithm: SIGNLION_ALGO, and the -A it
  // overrode (main() sets algo to the name of what runs).
  std::string algoNote;
  // Processes started by hand.
  int rank = -1, nranks = 0;
  std::string idFile;
  bool nccl = false;      // the GPU mode
  std::string netPlugin;  // --net-plugin: config.netPlugin of the host communicator (empty: the built-in socket one)
  int tieRule = 0;  // ncclSignTieZero; --tie-rule: config.tieRule of the host communicator (host mode)
  int ranksPerProcess() const { return nThreads * nGpus; }
};

}  // namespace perf
}  // namespace signlion
