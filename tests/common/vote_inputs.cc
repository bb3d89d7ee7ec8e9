#include "common/vote_inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "bits/bits.h"
#include "bits/float16.h"
#include "bits/vote_reference.h"

namespace signlion {
namespace test {

void setElem(Bytes& buf, ncclDataType_t dt, size_t i, float v) {
  if (dt == ncclInt8) {
    int8_t x = std::isnan(v)  ? 0
               : v > 0        ? (int8_t)std::min(127.0f, std::ceil(v))
               : v < 0        ? (int8_t)std::max(-128.0f, std::floor(v))
                              : 0;
    buf[i] = (uint8_t)x;
  } else {
    bits::storeFloatAs(v, dt, buf.data(), i);
  }
}

std::vector<Bytes> randomVoteInputs(int nranks, size_t count, ncclDataType_t dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Bytes> in(nranks, Bytes(count * bits::typeSize(dt)));
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            1e-40f, -1e-40f, 6e-8f, -6e-8f, 1e-45f};
  for (int r = 0; r < nranks; r++) {
    for (size_t i = 0; i < count; i++) {
      uint32_t pick = rng() % 16;
      float v = pick < 10 ? specials[pick] : std::ldexp((float)(rng() % 2000) - 1000.0f, (int)(rng() % 40) - 30);
      if (dt == ncclInt8) v = (float)((int)(rng() % 256) - 128);
      setElem(in[r], dt, i, v);
    }
  }
  return in;
}

Bytes referenceOutput(const std::vector<Bytes>& inputs, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                      ncclSignZeroRule_t zero, ncclSignTieRule_t tie) {
  std::vector<const void*> ptrs;
  for (const Bytes& b : inputs) ptrs.push_back(b.data());
  Bytes out(count * bits::typeSize(dt));
  bits::referenceSignAllReduce(ptrs, count, dt, op, zero, tie, out.data());
  return out;
}

size_t firstMismatch(const Bytes& a, const Bytes& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); i++)
    if (a[i] != b[i]) return i;
  return a.size() == b.size() ? std::string::npos : std::min(a.size(), b.size());
}

}  // namespace test
}  // namespace signlion
