// The ranks of an NCCL communicator as forked processes on this machine's
// GPUs: sign_allreduce_perf --nccl and the GPU tests start their ranks so.
//
// Call it before this process touches CUDA: a forked child cannot use a CUDA
// context its parent made, so the parent stays CUDA-free (the device probe
// runs in a child too). Rank r runs on device r % devices. When ranks share a
// device, each gets its own NCCL_HOSTID, so NCCL treats them as separate
// hosts (it refuses two ranks on one GPU of one host) and connects them
// through its network plugin (NCCL_NET_PLUGIN, when netPlugin is set).
// Rank 0 makes the ncclUniqueId and hands it to the others through pipes.
#pragma once

#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

namespace signlion {
namespace perf {

// CUDA devices this machine has, asked in a child process; 0 with the reason
// in *why when there are none (no driver, no device).
int probeCudaDevices(std::string* why);

struct NcclRanksOptions {
  int nranks = 2;
  int devices = 1;        // from probeCudaDevices
  std::string netPlugin;  // NCCL_NET_PLUGIN for every rank; empty: as inherited
  std::string hostIdPrefix = "signlion-rank";
  int timeoutSec = 600;  // ranks still running then are killed
};

// Runs body(rank, nranks, comm) in nranks child processes, each with its
// device current and its communicator made (and destroyed after the body);
// the body's return value is the child's exit code. Returns each rank's
// exit code: 0 is success; -1 killed at the timeout; 128 + signal; 3 when
// the communicator could not be made (the child says why on stderr).
std::vector<int> runNcclRanks(const NcclRanksOptions& options,
                              const std::function<int(int rank, int nranks, ncclComm_t comm)>& body);

}  // namespace perf
}  // namespace signlion
