#include "lion/nccl_lion_comm.h"

#include <cuda_runtime_api.h>

#include "common/cuda_checks.h"
#include "kernels/lion_kernels.h"
#include "nccl/comm_context.h"
#include "nccl/last_use_event.h"
#include "nccl/nccl_symbols.h"

namespace signlion {
namespace lion {
namespace {

const char* memoryTypeName(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeHost: return "pinned host";
    case cudaMemoryTypeDevice: return "device";
    case cudaMemoryTypeManaged: return "managed";
    default: return "host (not registered with CUDA)";
  }
}

}  // namespace

ncclResult_t NcclCommunicator::create(ncclComm_t comm, const ncclSignCallConfig_t& rules, const char* caller,
                                      std::unique_ptr<NcclCommunicator>* out) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->rules_ = rules;
  NCCLCHECK(c->init(comm, caller));
  *out = std::move(c);
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::init(ncclComm_t comm, const char* caller) {
  comm_ = comm;
  if (comm != nullptr) {
    const nccl::NcclApi* api = nullptr;
    NCCLCHECK(nccl::ncclApi(&api));
    nccl::CommShape shape;
    NCCLCHECK(nccl::queryComm(*api, comm, caller, &shape));
    nranks_ = shape.nranks;
    rank_ = shape.rank;
    device_ = shape.cudaDev;
    allReduce_ = api->allReduce;
  } else {
    CUDACHECK(cudaGetDevice(&device_));
  }
  nccl::DeviceGuard guard;
  NCCLCHECK(guard.set(device_));
  CUDACHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
  CUDACHECK(cudaEventCreateWithFlags(&stepped_, cudaEventDisableTiming));
  return ncclSuccess;
}

NcclCommunicator::~NcclCommunicator() {
  nccl::DeviceGuard guard;
  if (device_ < 0 || guard.set(device_) != ncclSuccess) return;
  if (stepped_ != nullptr) (void)cudaEventDestroy(stepped_);
  if (copies_ != nullptr) (void)cudaStreamDestroy(copies_);
}

// A step reuses the momentum, vote and scratch buffers of the step before it,
// which may have run on another stream: it starts after that step's end
// event, so steps are ordered whatever streams the caller uses, and every
// wait on stepped_ (state copies, destruction) covers all of them. A step
// captured into a CUDA graph makes the wait and the record external event
// nodes (last_use_event.h), as ncclSignAllReduce's calls do: each launch of
// the graph waits for the last step before it, eager or replayed, and is the
// one that later steps, copies and destruction wait for.
ncclResult_t NcclCommunicator::beginStep(void* stream) {
  stream_ = static_cast<cudaStream_t>(stream);
  CUDACHECK(cudaGetDevice(&callerDevice_));
  if (callerDevice_ != device_) CUDACHECK(cudaSetDevice(device_));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream_, &status);
  capturing_ = err == cudaSuccess && status == cudaStreamCaptureStatusActive;
  if (err == cudaSuccess) err = nccl::waitForLastUse(stream_, stepped_, capturing_);
  if (err != cudaSuccess) {
    if (callerDevice_ != device_) (void)cudaSetDevice(callerDevice_);  // endStep will not run
    CUDACHECK(err);
  }
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::endStep() {
  const cudaError_t recorded = nccl::markLastUse(stepped_, stream_, capturing_);
  if (callerDevice_ != device_) CUDACHECK(cudaSetDevice(callerDevice_));
  CUDACHECK(recorded);
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::checkBuffer(const void* p, const char* caller, const char* name) const {
  cudaPointerAttributes a;
  cudaError_t err = cudaPointerGetAttributes(&a, p);
  if (err == cudaErrorInvalidValue) {  // some drivers say so of plain host memory: refuse it as such below
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  } else {
    CUDACHECK(err);
  }
  ARGCHECK(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged, caller, name,
           "%p is %s memory; this optimizer works on device buffers", p, memoryTypeName(a.type));
  ARGCHECK(a.type == cudaMemoryTypeManaged || a.device == device_, caller, name,
           "%p is memory of GPU %d; the optimizer's communicator is on GPU %d", p, a.device, device_);
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::signAllReduce(void* votes, size_t count, ncclDataType_t type, ncclSignOp_t op) {
  return ncclSignAllReduceWithConfig(votes, votes, count, type, op, &rules_, comm_, stream_);
}

ncclResult_t NcclCommunicator::sumAllReduce(float* x, size_t count) {
  if (count == 0) return ncclSuccess;  // the same on every rank: nothing to agree on
  NCCLCHECK(allReduce_(x, x, count, ncclFloat32, ncclSum, comm_, stream_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::allocate(size_t bytes, void** ptr) {
  *ptr = nullptr;
  if (bytes == 0) return ncclSuccess;
  nccl::DeviceGuard guard;
  NCCLCHECK(guard.set(device_));
  CUDACHECK(cudaMalloc(ptr, bytes));
  CUDACHECK(cudaMemsetAsync(*ptr, 0, bytes, copies_));
  CUDACHECK(cudaStreamSynchronize(copies_));
  return ncclSuccess;
}

// Waits for the steps in flight: they may still use the buffer.
void NcclCommunicator::release(void* ptr) {
  nccl::DeviceGuard guard;
  if (guard.set(device_) != ncclSuccess) return;
  cudaError_t err = cudaEventSynchronize(stepped_);
  if (err == cudaSuccess) err = cudaFree(ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("Lion: freeing optimizer state on GPU %d: %s", device_, cudaGetErrorString(err));
  }
}

ncclResult_t NcclCommunicator::copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return ncclSuccess;
  nccl::DeviceGuard guard;
  NCCLCHECK(guard.set(device_));
  CUDACHECK(cudaStreamWaitEvent(copies_, stepped_, 0));
  CUDACHECK(cudaMemcpyAsync(dst, src, bytes, kind, copies_));
  CUDACHECK(cudaStreamSynchronize(copies_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::copyToHost(void* host, const void* src, size_t bytes) {
  return copy(host, src, bytes, cudaMemcpyDeviceToHost);
}

ncclResult_t NcclCommunicator::copyFromHost(void* dst, const void* host, size_t bytes) {
  return copy(dst, host, bytes, cudaMemcpyHostToDevice);
}

ncclResult_t NcclCommunicator::interpolateAndVote(ncclDataType_t gradType, const void* grads, float divisor,
                                                  float* momentum, VoteEncoding encoding, void* votes, size_t count,
                                                  const Coefficients& k, const float* skip) {
  CUDACHECK(kernels::lionInterpolateAndVote(gradType, grads, divisor, momentum, encoding, votes, count, k, skip,
                                            stream_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::applyUpdate(ncclDataType_t paramType, void* params, float* master,
                                           ncclDataType_t updateType, const void* update, size_t count, float lr,
                                           float weightDecay, const float* skip, uint64_t* skipped) {
  CUDACHECK(kernels::lionApplyUpdate(paramType, params, master, updateType, update, count, lr, weightDecay, skip,
                                     skipped, stream_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::flagNonFinite(ncclDataType_t type, const void* x, size_t count, float* flag) {
  CUDACHECK(kernels::lionFlagNonFinite(type, x, count, flag, stream_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::toFloat(ncclDataType_t type, const void* x, float* dst, size_t count) {
  CUDACHECK(kernels::lionToFloat(type, x, dst, count, stream_));
  return ncclSuccess;
}

ncclResult_t NcclCommunicator::divide(float* x, float divisor, size_t count) {
  CUDACHECK(kernels::lionDivide(x, divisor, count, stream_));
  return ncclSuccess;
}

}  // namespace lion
}  // namespace signlion
