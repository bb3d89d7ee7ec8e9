// What the optimizer needs from a communicator: the sign all-reduce, an fp32
// sum all-reduce, and the buffers' memory space. The host communicator
// implements it here; an NCCL communicator (device buffers, a stream, the
// CUDA passes) is the second implementation once ncclSignAllReduce exists.
#pragma once

#include <cstddef>

#include "nccl_sign.h"

namespace signlion {
namespace lion {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int nranks() const = 0;
  virtual int rank() const = 0;
  // In place: votes (int8 or fp32) become the majority / average of all ranks'.
  virtual ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) = 0;
  // In place: x becomes the sum over all ranks, identical on every rank.
  virtual ncclResult_t sumAllReduce(float* x, size_t count) = 0;
};

// A host communicator (ncclSignComm_t) the caller owns; CPU buffers.
class HostCommunicator final : public Communicator {
 public:
  explicit HostCommunicator(ncclSignComm_t comm);
  int nranks() const override { return nranks_; }
  int rank() const override { return rank_; }
  ncclResult_t signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) override;
  ncclResult_t sumAllReduce(float* x, size_t count) override;

 private:
  ncclSignComm_t comm_;
  int nranks_ = 1, rank_ = 0;
};

}  // namespace lion
}  // namespace signlion
