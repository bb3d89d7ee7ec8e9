// The plain reference of the 1-bit compressed all-reduce baseline
// (onebit_baseline.h): the same arithmetic, in the same order, computed in one
// place over every rank's input, element by element: no packing, no chunks
// as messages, no network. The baseline must equal it bit for bit.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace signlion {
namespace perf {

// The pattern's layout: the tensor is padded with zeros to a multiple of
// 8 x nranks elements, so each rank's chunk is whole bytes of packed signs
// (as DeepSpeed pads its error buffers).
size_t onebitPaddedCount(size_t count, int nranks);
// Payload bytes one rank sends per call: (nranks - 1) messages of a chunk's
// packed signs plus one fp32 scale in each phase (0 for count 0 or 1 rank).
size_t onebitPayloadBytes(size_t count, int nranks);

// DeepSpeed's scale of a vector: its L2 norm over sqrt(its length). The
// squares are summed in double, element i into lane i mod 8 (lanes the
// compiler can vectorize), the lanes then in order, rounded once to fp32.
float onebitScale(const float* x, size_t n);
// onebitScale's sum, fed 8 elements at a time by a loop that does other work
// on them too: after add8 over x[0..n) in order, scale(n) == onebitScale(x, n).
struct OnebitSquares {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  void add8(const float* x) {
    for (int l = 0; l < 8; l++) lane[l] += (double)x[l] * (double)x[l];
  }
  float scale(size_t n) const;
};
// The sign the pattern sends: +1 for x >= 0 (zero and -0 included), else -1.
inline bool onebitPositive(float x) { return x >= 0.0f; }

class OnebitReference {
 public:
  // Error feedback off: every step starts from zero errors (what the first
  // call of a fresh baseline, or one after resetErrors(), computes) and the
  // reference keeps no per-rank state.
  OnebitReference(int nranks, size_t count, bool errorFeedback);
  // One call of the pattern. input(r, buf) writes rank r's `count` inputs to
  // buf; out receives the `count` outputs (the same on every rank).
  void step(const std::function<void(int rank, float* buf)>& input, float* out);

 private:
  int nranks_;
  size_t count_, padded_;
  bool feedback_;
  std::vector<std::vector<float>> workerError_;  // per rank, padded_ (feedback only)
  std::vector<float> serverError_;               // padded_: each chunk its owner's
};

}  // namespace perf
}  // namespace signlion
