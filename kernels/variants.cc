// The variant table of kernels/variants.h: names, defaults, the current choice.
#include "kernels/variants.h"

#include <atomic>

namespace signlion {
namespace kernels {

namespace {

struct TunedInfo {
  const char* name;
  int defaultVariant;  // the measured kernel; change only with a measurement (docs/dev/GPU.md)
  const char* variants[4];
};

// Variant names, in the order of each kernel file's dispatch (variant 0
// first). kernels/README.md says what each one is.
const TunedInfo kTable[kTunedKernels] = {
    {"sumVotes", 0, {"word", "word-batch8", "pair-batch8", nullptr}},
    {"unpack", 0, {"chunk", "chunk-x2", "chunk-x4", nullptr}},
    {"average", 0, {"vector", "chunk-table", nullptr, nullptr}},
    {"fusedMajority", 0, {"chunk", "chunk-prefetch", nullptr, nullptr}},
    {"fusedAverage", 0, {"vector", "chunk-table", nullptr, nullptr}},
    {"packFields", 0, {"ballot", "thread-word", nullptr, nullptr}},
    {"fieldsToPlanes", 0, {"ballot", "thread-block", "thread-block-pow2", "thread-block-gather"}},
    {"encodeTrits", 0, {"thread-byte", "thread-word", nullptr, nullptr}},
    {"decodeTrits", 0, {"warp", "warp-x4", nullptr, nullptr}},
};

// The selected variant plus one; 0 = none selected: the default.
std::atomic<int> gSelected[kTunedKernels] = {};

bool valid(Tuned k) { return (int)k >= 0 && (int)k < kTunedKernels; }

}  // namespace

const char* tunedName(Tuned k) { return valid(k) ? kTable[(int)k].name : nullptr; }

int variantCount(Tuned k) {
  if (!valid(k)) return 0;
  int n = 0;
  while (n < 4 && kTable[(int)k].variants[n] != nullptr) n++;
  return n;
}

const char* variantName(Tuned k, int v) {
  return v >= 0 && v < variantCount(k) ? kTable[(int)k].variants[v] : nullptr;
}

int defaultVariant(Tuned k) { return valid(k) ? kTable[(int)k].defaultVariant : 0; }

int currentVariant(Tuned k) {
  if (!valid(k)) return 0;
  const int selected = gSelected[(int)k].load(std::memory_order_relaxed);
  return selected == 0 ? kTable[(int)k].defaultVariant : selected - 1;
}

cudaError_t selectVariant(Tuned k, int v) {
  if (v < 0 || v >= variantCount(k)) return cudaErrorInvalidValue;
  gSelected[(int)k].store(v + 1, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace kernels
}  // namespace signlion
