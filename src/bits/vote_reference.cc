#include "bits/vote_reference.h"

#include <cstdint>
#include <cstring>

#include "bits/float16.h"

namespace signlion {
namespace bits {

namespace {

// The element as a float (exact for every vote type).
float loadAsFloat(const void* src, ncclDataType_t dt, size_t i) {
  const char* p = static_cast<const char*>(src);
  switch (dt) {
    case ncclFloat32: {
      float f;
      memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case ncclFloat16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return halfToFloat(h);
    }
    case ncclBfloat16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return bf16ToFloat(h);
    }
    case ncclInt8: return (float)(int8_t)p[i];
    default: return 0.0f;
  }
}

}  // namespace

int referenceVote(const void* src, ncclDataType_t dt, size_t index, ncclSignZeroRule_t zero) {
  float x = loadAsFloat(src, dt, index);
  if (x > 0) return 1;
  if (x < 0) return -1;
  // +0, -0 and NaN: no sign of their own.
  switch (zero) {
    case ncclSignZeroPositive: return 1;
    case ncclSignZeroNegative: return -1;
    default: return 0;
  }
}

void referenceResult(long long sum, int nranks, ncclSignOp_t op, ncclSignTieRule_t tie, ncclDataType_t dt, void* dst,
                     size_t index) {
  float v;
  if (op == ncclSignAverage) {
    v = (float)sum / (float)nranks;
  } else if (sum > 0) {
    v = 1.0f;
  } else if (sum < 0) {
    v = -1.0f;
  } else {
    v = tie == ncclSignTiePositive ? 1.0f : tie == ncclSignTieNegative ? -1.0f : 0.0f;
  }
  storeFloatAs(v, dt, dst, index);
}

void referenceSignAllReduce(const std::vector<const void*>& inputs, size_t count, ncclDataType_t dt, ncclSignOp_t op,
                            ncclSignZeroRule_t zero, ncclSignTieRule_t tie, void* out) {
  int nranks = (int)inputs.size();
  for (size_t i = 0; i < count; i++) {
    long long sum = 0;
    for (int r = 0; r < nranks; r++) sum += referenceVote(inputs[r], dt, i, zero);
    referenceResult(sum, nranks, op, tie, dt, out, i);
  }
}

}  // namespace bits
}  // namespace signlion
