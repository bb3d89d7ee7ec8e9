// What the Lion GPU tests share (lion_kernel_test.cc, lion_device_test.cc):
// the device probe, device buffers with room for unaligned views, inputs
// with every kind of special value, and a comparison where a NaN equals any
// NaN (GPU arithmetic returns the canonical NaN where x86 keeps an operand's
// payload).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "bits/float16.h"
#include "lion/lion_passes.h"
#include "nccl_sign.h"

namespace signlion {
namespace test {

using Bytes = std::vector<uint8_t>;

inline bool gpuAvailable(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "cudaGetDeviceCount found no device";
    return false;
  }
  return true;
}

// Skips the calling test (GTEST_SKIP, with the reason) when no GPU answers.
#define REQUIRE_GPU()                                                               \
  do {                                                                              \
    std::string why_;                                                               \
    if (!::signlion::test::gpuAvailable(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

#define CUDA_ASSERT(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

// A device buffer of `bytes` plus `slack` (views at an offset), every byte
// set to kGuard first, so that a kernel that writes outside the view it was
// given shows (guardIntact).
class DeviceBuffer {
 public:
  static constexpr uint8_t kGuard = 0xa5;
  explicit DeviceBuffer(size_t bytes, size_t slack = 16) : total_(bytes + slack) {
    // The fill is done before the buffer is handed out: a test may use it on
    // a non-blocking stream, which is not ordered after this one.
    // stream-order: ok (synchronized on the next line)
    if (cudaMalloc(&base_, total_) != cudaSuccess || cudaMemset(base_, kGuard, total_) != cudaSuccess ||
        cudaStreamSynchronize(0) != cudaSuccess) {
      cudaFree(base_);
      base_ = nullptr;
    }
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool ok() const { return base_ != nullptr; }
  // The view `offset` bytes past the start (cudaMalloc: at least 16-byte aligned).
  void* at(size_t offset) const { return static_cast<char*>(base_) + offset; }
  // On `stream`, the stream of the work that reads or wrote the buffer (no
  // default: a copy on another stream than that work would race with it).
  cudaError_t upload(size_t offset, const Bytes& b, cudaStream_t stream) const {
    return cudaMemcpyAsync(at(offset), b.data(), b.size(), cudaMemcpyHostToDevice, stream);
  }
  // Waits for `stream`, so everything enqueued on it before is in *b.
  cudaError_t download(size_t offset, Bytes* b, cudaStream_t stream) const {
    cudaError_t err = cudaMemcpyAsync(b->data(), at(offset), b->size(), cudaMemcpyDeviceToHost, stream);
    return err != cudaSuccess ? err : cudaStreamSynchronize(stream);
  }
  // Every byte outside [offset, offset + bytes) still holds kGuard, once
  // `stream` (the stream of the work that wrote the buffer) gets here.
  ::testing::AssertionResult guardIntact(size_t offset, size_t bytes, cudaStream_t stream) const {
    Bytes all(total_);
    if (download(0, &all, stream) != cudaSuccess) return ::testing::AssertionFailure() << "download failed";
    for (size_t i = 0; i < total_; i++)
      if ((i < offset || i >= offset + bytes) && all[i] != kGuard)
        return ::testing::AssertionFailure() << "byte " << i << " outside the view [" << offset << ", "
                                             << offset + bytes << ") was written";
    return ::testing::AssertionSuccess();
  }

 private:
  void* base_ = nullptr;
  size_t total_;
};

inline void setFloat(Bytes& b, ncclDataType_t dt, size_t i, float v) { bits::storeFloatAs(v, dt, b.data(), i); }

// Values of every kind, with specials at fixed places: +-0, subnormals,
// inf, NaN (quiet, with a payload), the largest finite values.
inline Bytes inputs(ncclDataType_t dt, size_t count, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Bytes b(count * bits::typeSize(dt));
  const float nanPayload = [] {
    uint32_t u = 0x7fc01234u;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }();
  const float table[] = {0.0f, -0.0f, 1e-41f, -3e-39f, 6e-8f, std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity(), nanPayload, 3.0e38f, 65504.0f, -2.5f};
  for (size_t i = 0; i < count; i++) {
    float v = normal(rng) * (i % 5 == 0 ? 1000.0f : 1.0f);
    if (specials && i % 17 == 3) v = table[(i / 17) % (sizeof(table) / sizeof(table[0]))];
    setFloat(b, dt, i, v);
  }
  return b;
}

// Element by element: the same bytes, or both NaN. Names the first difference.
inline ::testing::AssertionResult sameElements(ncclDataType_t dt, const Bytes& got, const Bytes& want) {
  const size_t es = bits::typeSize(dt);
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << ", " << want.size();
  for (size_t i = 0; i < got.size() / es; i++) {
    if (memcmp(got.data() + i * es, want.data() + i * es, es) == 0) continue;
    if (dt != ncclInt8) {
      float a, b;
      lion::toFloat(dt, got.data() + i * es, &a, 1);
      lion::toFloat(dt, want.data() + i * es, &b, 1);
      if (std::isnan(a) && std::isnan(b)) continue;
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
    }
    return ::testing::AssertionFailure() << "element " << i << ": " << (int)(int8_t)got[i] << " != "
                                         << (int)(int8_t)want[i];
  }
  return ::testing::AssertionSuccess();
}

inline Bytes floatBytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  if (!v.empty()) memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace test
}  // namespace signlion
