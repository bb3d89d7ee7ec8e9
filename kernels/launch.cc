// Grid sizing: the number of blocks that fill a device once, read with two
// cudaDeviceGetAttribute calls the first time a device launches and cached,
// so a launch costs a cudaGetDevice and an array read.
#include <atomic>

#include "kernels/launch.cuh"

namespace signlion {
namespace kernels {

namespace {

constexpr int kCachedDevices = 64;
// Resident blocks of kBlockThreads per device; 0 = not read yet. Threads
// that race to fill an entry store the same value.
std::atomic<unsigned> gResidentBlocks[kCachedDevices];

cudaError_t residentBlocks(int dev, unsigned* blocks) {
  if (dev >= 0 && dev < kCachedDevices) {
    *blocks = gResidentBlocks[dev].load(std::memory_order_relaxed);
    if (*blocks != 0) return cudaSuccess;
  }
  int sms = 0, threadsPerSm = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&threadsPerSm, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
  if (err != cudaSuccess) return err;
  unsigned perSm = (unsigned)threadsPerSm / kBlockThreads;
  *blocks = (unsigned)sms * (perSm ? perSm : 1);
  if (*blocks == 0) *blocks = 1;
  if (dev >= 0 && dev < kCachedDevices) gResidentBlocks[dev].store(*blocks, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace

cudaError_t gridFor(size_t threads, unsigned* blocks) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  unsigned full = 0;
  err = residentBlocks(dev, &full);
  if (err != cudaSuccess) return err;
  size_t wanted = (threads + kBlockThreads - 1) / kBlockThreads;
  *blocks = wanted == 0 ? 1u : wanted < full ? (unsigned)wanted : full;
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace signlion
