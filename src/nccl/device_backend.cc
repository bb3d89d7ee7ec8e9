#include "nccl/device_backend.h"

#include <cuda_runtime_api.h>

#include <thread>

#include "common/cuda_checks.h"
#include "kernels/sign_kernels.h"

namespace signlion {
namespace nccl {

DeviceBackend::~DeviceBackend() {
  if (diverted_ && join() != ncclSuccess) WARN("could not join the side stream back into stream %p", (void*)stream_);
}

ncclResult_t DeviceBackend::pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule,
                                 uint64_t* out, size_t stride) {
  CUDACHECK(kernels::pack(src, dt, count, rule, out, stride, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb,
                                uint64_t* out, int wout, size_t so, size_t nwords) {
  CUDACHECK(kernels::add(a, wa, sa, b, wb, sb, out, wout, so, nwords, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout,
                                     size_t so, size_t nwords) {
  CUDACHECK(kernels::sumVotes(votes, nslots, slotStride, out, wout, so, nwords, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out,
                                       size_t so, size_t nwords) {
  CUDACHECK(kernels::decideBits(c, nranks, tie, out, so, nwords, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt,
                                   void* dst) {
  CUDACHECK(kernels::unpack(planes, nplanes, stride, count, dt, dst, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) {
  CUDACHECK(kernels::average(c, nranks, count, dt, dst, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                                            ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                                            uint64_t* planesOut, size_t so, size_t count, ncclDataType_t dt,
                                            void* dst) {
  CUDACHECK(kernels::addDecideUnpack(acc, in, sumWidth, nranks, op, zero, tie, planesOut, so, count, dt, dst, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero,
                                       int fieldBits, uint64_t* out, size_t stride) {
  CUDACHECK(kernels::packFields(src, dt, count, zero, fieldBits, out, stride, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n,
                                           uint64_t* planes, int width, size_t planeStride) {
  CUDACHECK(kernels::fieldsToPlanes(words, fieldBits, first, n, planes, width, planeStride, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::copyPlanes(uint64_t* dst, size_t dstStride, const uint64_t* src, size_t srcStride,
                                       int planes, size_t nwords) {
  if (planes <= 0 || nwords == 0) return ncclSuccess;
  CUDACHECK(cudaMemcpy2DAsync(dst, dstStride * 8, src, srcStride * 8, nwords * 8, static_cast<size_t>(planes),
                              cudaMemcpyDeviceToDevice, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nwords, uint64_t* out) {
  CUDACHECK(kernels::encodeTrits(pos, neg, nwords, reinterpret_cast<uint8_t*>(out), lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::decodeTrits(const uint64_t* in, size_t nwords, uint64_t* pos, uint64_t* neg, int peer) {
  if (malformed_ == nullptr) {
    WARN("NCCL executor: a coded result to decode, and no flag to record a malformed one in");
    return ncclInternalError;
  }
  CUDACHECK(kernels::decodeTrits(reinterpret_cast<const uint8_t*>(in), nwords, pos, neg, malformed_,
                                 static_cast<uint32_t>(peer) + 1, lane()));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::settle(ncclResult_t res, const char* call) {
  if (res == ncclInProgress) {
    // A nonblocking communicator enqueues in the background; NCCL's
    // documented way to know it is done is to poll its async error.
    do {
      std::this_thread::yield();
      ncclResult_t q = api_.commGetAsyncError(comm_, &res);
      if (q != ncclSuccess) res = q;
    } while (res == ncclInProgress);
  }
  if (res != ncclSuccess) {
    WARN("%s on comm %p failed: %s", call, (void*)comm_, api_.getErrorString(res));
    return res;
  }
  return ncclSuccess;
}

ncclResult_t DeviceBackend::groupStart() { return settle(api_.groupStart(), "ncclGroupStart"); }

ncclResult_t DeviceBackend::groupEnd() { return settle(api_.groupEnd(), "ncclGroupEnd"); }

ncclResult_t DeviceBackend::send(const uint64_t* data, size_t words, int peer) {
  return settle(api_.send(data, words, ncclUint64, peer, comm_, stream_), "ncclSend");
}

ncclResult_t DeviceBackend::recv(uint64_t* data, size_t words, int peer) {
  return settle(api_.recv(data, words, ncclUint64, peer, comm_, stream_), "ncclRecv");
}

ncclResult_t DeviceBackend::allGather(const uint64_t* send, uint64_t* recv, size_t wordsPerRank) {
  return settle(api_.allGather(send, recv, wordsPerRank, ncclUint64, comm_, stream_), "ncclAllGather");
}

ncclResult_t DeviceBackend::allReduceSum(uint64_t* data, size_t words) {
  return settle(api_.allReduce(data, data, words, ncclUint64, ncclSum, comm_, stream_), "ncclAllReduce");
}

ncclResult_t DeviceBackend::copyIn(uint64_t* dst, const void* src, size_t words) {
  // From pageable memory: the copy has taken the bytes when this returns.
  CUDACHECK(cudaMemcpyAsync(dst, src, words * 8, cudaMemcpyHostToDevice, stream_));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::copyOut(void* dst, const uint64_t* src, size_t words) {
  CUDACHECK(cudaMemcpyAsync(dst, src, words * 8, cudaMemcpyDeviceToHost, stream_));
  CUDACHECK(cudaStreamSynchronize(stream_));
  return ncclSuccess;
}

ncclResult_t DeviceBackend::divert() {
  CUDACHECK(cudaEventRecord(fork_, stream_));
  CUDACHECK(cudaStreamWaitEvent(side_, fork_, 0));
  diverted_ = true;
  return ncclSuccess;
}

ncclResult_t DeviceBackend::join() {
  diverted_ = false;
  CUDACHECK(cudaEventRecord(join_, side_));
  CUDACHECK(cudaStreamWaitEvent(stream_, join_, 0));
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
