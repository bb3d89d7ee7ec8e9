// The executor's Backend on a CUDA device: the launchers of kernels/ and the
// process's NCCL, all on the user's stream; the side lane is a stream of the
// communicator's context, forked from and joined back into the user's stream
// through two events. Nothing here synchronizes or allocates, so a call is
// capturable in a CUDA graph. The caller makes the communicator's device
// current.
#pragma once

#include <cuda_runtime_api.h>

#include "nccl/backend.h"
#include "nccl/nccl_symbols.h"

namespace signlion {
namespace nccl {

class DeviceBackend final : public Backend {
 public:
  // forkEvent and joinEvent are reused for every fork and join: a stream
  // waits for an event's most recent record at the time of the wait.
  // `malformed` (device-writable; null: no decodes) is where decodeTrits
  // records a malformed coded result: peer + 1 (CommContext's flag).
  DeviceBackend(const NcclApi& api, ncclComm_t comm, cudaStream_t stream, cudaStream_t side, cudaEvent_t forkEvent,
                cudaEvent_t joinEvent, uint32_t* malformed = nullptr)
      : api_(api),
        comm_(comm),
        stream_(stream),
        side_(side),
        fork_(forkEvent),
        join_(joinEvent),
        malformed_(malformed) {}
  // After an error between divert() and join(), the side lane is still
  // joined, so the user's stream (and a capture) stays whole.
  ~DeviceBackend() override;

  ncclResult_t pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
                    size_t stride) override;
  ncclResult_t add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
                   size_t so, size_t nwords) override;
  ncclResult_t sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout, size_t so,
                        size_t nwords) override;
  ncclResult_t decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so,
                          size_t nwords) override;
  ncclResult_t unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt,
                      void* dst) override;
  ncclResult_t average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) override;
  ncclResult_t addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                               ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* planesOut,
                               size_t so, size_t count, ncclDataType_t dt, void* dst) override;
  ncclResult_t packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero, int fieldBits,
                          uint64_t* out, size_t stride) override;
  ncclResult_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                              size_t planeStride) override;
  ncclResult_t copyPlanes(uint64_t* dst, size_t dstStride, const uint64_t* src, size_t srcStride, int planes,
                          size_t nwords) override;
  ncclResult_t encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nwords, uint64_t* out) override;
  ncclResult_t decodeTrits(const uint64_t* in, size_t nwords, uint64_t* pos, uint64_t* neg, int peer) override;

  ncclResult_t groupStart() override;
  ncclResult_t groupEnd() override;
  ncclResult_t send(const uint64_t* data, size_t words, int peer) override;
  ncclResult_t recv(uint64_t* data, size_t words, int peer) override;
  ncclResult_t allGather(const uint64_t* send, uint64_t* recv, size_t wordsPerRank) override;
  ncclResult_t allReduceSum(uint64_t* data, size_t words) override;

  ncclResult_t copyIn(uint64_t* dst, const void* src, size_t words) override;
  ncclResult_t copyOut(void* dst, const uint64_t* src, size_t words) override;

  ncclResult_t divert() override;
  ncclResult_t join() override;

 private:
  cudaStream_t lane() const { return diverted_ ? side_ : stream_; }
  // The result of an NCCL call that enqueues work: logged when it failed;
  // ncclInProgress (a nonblocking communicator) waited out, since the
  // kernels that follow must be enqueued after NCCL's.
  ncclResult_t settle(ncclResult_t res, const char* call);

  const NcclApi& api_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaStream_t side_;
  cudaEvent_t fork_;
  cudaEvent_t join_;
  uint32_t* malformed_;
  bool diverted_ = false;
};

}  // namespace nccl
}  // namespace signlion
