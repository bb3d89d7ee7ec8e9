// Ranks as threads for the multirank tests: one host communicator, every
// rank a thread of this process running the test's body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "nccl_sign.h"

namespace signlion {
namespace test {

// Makes an nranks communicator with ranks as threads and runs body(rank, comm)
// on each; every rank's results are checked inside body. Init failures fail
// the calling test.
void withRanks(int nranks, const ncclSignConfig_t& config, const std::function<void(int, ncclSignComm_t)>& body);
// The same with a config per rank (configOf(rank)), e.g. a host id per group
// of ranks so that threads of one process act as several nodes.
void withRanks(int nranks, const std::function<ncclSignConfig_t(int)>& configOf,
               const std::function<void(int, ncclSignComm_t)>& body);

// The same with a config per rank (configOf(rank)), for ranks that disagree:
// body runs on the ranks whose init succeeded and may abort the comm (then
// setting it to NULL); returns every rank's init result.
std::vector<ncclResult_t> runRanks(int nranks, const std::function<ncclSignConfig_t(int)>& configOf,
                                   const std::function<void(int, ncclSignComm_t&)>& body);

// The bytes this rank's transport sent during one majority
// ncclSignHostAllReduce of `count` fp32 elements from `in` into `out`, by
// ncclSignCommGetWireBytes before and after. A failed call fails the calling
// test (and the count returned is then meaningless).
uint64_t bytesSentByOneCall(ncclSignComm_t comm, const void* in, void* out, size_t count);

}  // namespace test
}  // namespace signlion
