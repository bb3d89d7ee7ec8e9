// The CUDA runtime calls the NCCL path (DeviceBackend, the comm context, the
// entry points) and the device optimizer (src/lion/nccl_lion_comm.cc) make
// beyond cuda_runtime.cc's, on the SIMT emulator. Streams are synchronous
// there, so an event orders nothing that is not already done; what is asked
// of events is logged instead (event_log.h). Linked into the emulated NCCL
// test binary only.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "simt/event_log.h"

namespace signlion {
namespace simt {
namespace {
thread_local std::vector<EventOp>* tEventLog = nullptr;
thread_local bool tCapturing = false;
}  // namespace
std::vector<EventOp>*& eventLog() { return tEventLog; }
bool& capturing() { return tCapturing; }
}  // namespace simt
}  // namespace signlion

namespace {
using signlion::simt::tCapturing;
void logEvent(char kind, cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (signlion::simt::tEventLog != nullptr) signlion::simt::tEventLog->push_back({kind, stream, event, flags});
}
}  // namespace

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  logEvent('r', s, e, cudaEventRecordDefault);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
  // As CUDA: the external flag is for capture only.
  if (flags != cudaEventRecordDefault && (flags != cudaEventRecordExternal || !tCapturing)) return cudaErrorInvalidValue;
  logEvent('r', s, e, flags);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  if (flags != cudaEventWaitDefault && (flags != cudaEventWaitExternal || !tCapturing)) return cudaErrorInvalidValue;
  logEvent('w', s, e, flags);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
// Each event its own address, so that the log tells them apart.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<char*>(e);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = tCapturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
// Mapped host memory (the comm's malformed-result flag): the emulator's device
// reads and writes host memory, so the device's address is the host's.
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  *ptr = calloc(1, bytes ? bytes : 1);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int) {
  *device = host;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  free(ptr);
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
// Every buffer here is the emulator's device memory of device 0.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  memset(attr, 0, sizeof(*attr));
  attr->type = cudaMemoryTypeDevice;
  attr->device = 0;
  attr->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  for (size_t row = 0; row < height; row++)
    memcpy(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) { return cudaMemset(dst, value, bytes); }
