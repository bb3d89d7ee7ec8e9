// Run-time choice among candidate implementations of the kernels that are
// still short of memory speed (docs/PERFORMANCE.md, section 5) or were never
// measured (the trit coders), so that one
// build carries them all and perf/kernel_bench can time each on a GPU. Every
// variant of a kernel computes the same bits (tests/gpu/kernel_test.cc runs
// every test for every variant, on the SIMT emulator and on a GPU); they
// differ only in how threads and warps share the work. The launchers in
// sign_kernels.h read the choice at each launch; it is process-wide.
//
// The defaults (kDefaultVariant in variants.cc) are the kernels that were
// measured; a variant becomes a default only with a measurement beside it
// (docs/dev/GPU.md, "Choosing kernel variants").
#pragma once

#include <cuda_runtime_api.h>

namespace signlion {
namespace kernels {

// The kernels with variants.
enum class Tuned : int {
  kSumVotes,        // sumVotes
  kUnpack,          // unpack
  kAverage,         // average
  kFusedMajority,   // addDecideUnpack, majority
  kFusedAverage,    // addDecideUnpack, average
  kPackFields,      // packFields
  kFieldsToPlanes,  // fieldsToPlanes
  kEncodeTrits,     // encodeTrits
  kDecodeTrits,     // decodeTrits
  kCount
};
constexpr int kTunedKernels = (int)Tuned::kCount;

// "sumVotes", "unpack", ... (the launcher's name).
const char* tunedName(Tuned k);
// How many variants k has (variant 0 is the original kernel), and the name of
// variant v ("word", "batch8", ...; nullptr when out of range).
int variantCount(Tuned k);
const char* variantName(Tuned k, int v);
// The variant k launches unless told otherwise.
int defaultVariant(Tuned k);
// The variant k launches now.
int currentVariant(Tuned k);
// From now on k launches variant v (process-wide; a launch already enqueued
// keeps its own). cudaErrorInvalidValue, and no change, when v is out of range.
cudaError_t selectVariant(Tuned k, int v);

}  // namespace kernels
}  // namespace signlion
