// The few CUDA runtime calls the kernels and their tests make, on the SIMT
// emulator: one device with 2 SMs of 512 threads (so a launch has a few
// blocks and the grid-stride loops wrap), "device" memory from mmap with an
// inaccessible page right after each buffer (a kernel that reads or writes
// past the end of one faults), copies as memcpy, and synchronous streams.
// Linked instead of cudart into the emulated test binary only.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "simt/emulator.h"

namespace {

struct Mapping {
  void* base;
  size_t bytes;
};
std::map<void*, Mapping> gMappings;  // by the pointer handed out

size_t roundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 2; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 512; return cudaSuccess;
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t cudaGetLastError() { return cudaSuccess; }

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    default: return "error (SIMT emulator)";
  }
}

// 16-byte aligned (what the kernels' vector paths look at), ending at most 15
// bytes before a PROT_NONE page.
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t body = roundUp(bytes, page);
  void* base = mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return cudaErrorMemoryAllocation;
  char* guard = static_cast<char*>(base) + body;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    munmap(base, body + page);
    return cudaErrorMemoryAllocation;
  }
  *ptr = guard - roundUp(bytes, 16);
  gMappings[*ptr] = Mapping{base, body + page};
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto it = gMappings.find(ptr);
  if (it == gMappings.end()) return cudaErrorInvalidValue;
  munmap(it->second.base, it->second.bytes);
  gMappings.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes) memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);  // the emulator's streams run in order, at once
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (bytes) memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  static int dummy;
  *stream = reinterpret_cast<cudaStream_t>(&dummy);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
