#include "onebit_reference.h"

#include <cmath>

namespace signlion {
namespace perf {

size_t onebitPaddedCount(size_t count, int nranks) {
  const size_t unit = 8 * (size_t)nranks;
  return (count + unit - 1) / unit * unit;
}

size_t onebitPayloadBytes(size_t count, int nranks) {
  if (count == 0 || nranks < 2) return 0;
  const size_t chunkBytes = onebitPaddedCount(count, nranks) / (size_t)nranks / 8;
  return 2 * (size_t)(nranks - 1) * (chunkBytes + sizeof(float));
}

float OnebitSquares::scale(size_t n) const {
  if (n == 0) return 0.0f;
  double sum = 0;
  for (double l : lane) sum += l;
  return (float)(std::sqrt(sum) / std::sqrt((double)n));
}

float onebitScale(const float* x, size_t n) {
  OnebitSquares sq;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) sq.add8(x + i);
  for (; i < n; i++) sq.lane[i % 8] += (double)x[i] * (double)x[i];
  return sq.scale(n);
}

OnebitReference::OnebitReference(int nranks, size_t count, bool errorFeedback)
    : nranks_(nranks), count_(count), padded_(onebitPaddedCount(count, nranks)), feedback_(errorFeedback) {
  if (feedback_) {
    workerError_.assign(nranks_, std::vector<float>(padded_, 0.0f));
    serverError_.assign(padded_, 0.0f);
  }
}

void OnebitReference::step(const std::function<void(int, float*)>& input, float* out) {
  if (count_ == 0) return;
  std::vector<float> m(padded_), combined(padded_, 0.0f);
  // Every rank: its input plus its error, one scale for the whole tensor,
  // and each element's scaled sign over N added into the owner's sum, in
  // rank order (as each owner adds what it receives).
  for (int r = 0; r < nranks_; r++) {
    input(r, m.data());
    for (size_t i = 0; i < padded_; i++) {
      const float x = i < count_ ? m[i] : 0.0f;
      m[i] = x + (feedback_ ? workerError_[r][i] : 0.0f);
    }
    const float scale = onebitScale(m.data(), padded_);
    const float share = scale * (1.0f / (float)nranks_);
    for (size_t i = 0; i < padded_; i++) {
      const bool pos = onebitPositive(m[i]);
      if (feedback_) workerError_[r][i] = m[i] - (pos ? scale : -scale);
      combined[i] += pos ? share : -share;
    }
  }
  // Every chunk: its owner's error added, one scale for the chunk, the sign.
  const size_t chunk = padded_ / (size_t)nranks_;
  for (int j = 0; j < nranks_; j++) {
    float* c = combined.data() + (size_t)j * chunk;
    for (size_t k = 0; k < chunk; k++) c[k] += feedback_ ? serverError_[(size_t)j * chunk + k] : 0.0f;
    const float scale = onebitScale(c, chunk);
    for (size_t k = 0; k < chunk; k++) {
      const bool pos = onebitPositive(c[k]);
      const size_t i = (size_t)j * chunk + k;
      if (feedback_) serverError_[i] = c[k] - (pos ? scale : -scale);
      if (i < count_) out[i] = pos ? scale : -scale;
    }
  }
}

}  // namespace perf
}  // namespace signlion
