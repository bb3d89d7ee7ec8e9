#include "lion/lion_comm.h"

namespace signlion {
namespace lion {

HostCommunicator::HostCommunicator(ncclSignComm_t comm) : comm_(comm) {
  ncclSignCommCount(comm, &nranks_);
  ncclSignCommUserRank(comm, &rank_);
}

ncclResult_t HostCommunicator::signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) {
  return ncclSignHostAllReduce(votes, votes, count, type, op, comm_);
}

ncclResult_t HostCommunicator::sumAllReduce(float* x, size_t count) {
  return ncclSignHostSumAllReduce(x, x, count, ncclFloat32, comm_);
}

}  // namespace lion
}  // namespace signlion
