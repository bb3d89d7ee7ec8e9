#include "common/lion_reference.h"

#include <cstring>

#include "bits/float16.h"
#include "bits/vote_reference.h"

namespace signlion {
namespace test {

float plainSign(float c) {
  if (c > 0.0f) return 1.0f;
  if (c < 0.0f) return -1.0f;
  return 0.0f;
}

float elemAsFloat(const Bytes& buf, ncclDataType_t dt, size_t i) {
  if (dt == ncclFloat32) {
    float f;
    memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, buf.data() + 2 * i, 2);
  return dt == ncclFloat16 ? bits::halfToFloat(h) : bits::bf16ToFloat(h);
}

LionReference::LionReference(ncclDataType_t t, size_t count, float lr_, float wd, bool masterWeights_)
    : type(t), masterWeights(masterWeights_ && t != ncclFloat32), lr(lr_), weightDecay(wd), momentum(count, 0.0f) {
  if (masterWeights) master.assign(count, 0.0f);
}

std::vector<float> LionReference::interpolate(const Bytes& grads, float divisor) {
  const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
  std::vector<float> c(momentum.size());
  for (size_t i = 0; i < momentum.size(); i++) {
    float g = elemAsFloat(grads, type, i) / divisor;
    c[i] = beta1 * momentum[i] + omb1 * g;
    momentum[i] = beta2 * momentum[i] + omb2 * g;
  }
  return c;
}

void LionReference::apply(Bytes& params, const std::vector<float>& update) {
  for (size_t i = 0; i < update.size(); i++) {
    float p;
    if (masterWeights) {
      if (!masterReady) master[i] = elemAsFloat(params, type, i);
      p = master[i];
    } else {
      p = elemAsFloat(params, type, i);
    }
    float decayed = weightDecay * p;
    float step = lr * (update[i] + decayed);
    p = p - step;
    if (masterWeights) master[i] = p;
    bits::storeFloatAs(p, type, params.data(), i);
  }
  if (masterWeights) masterReady = true;
}

std::vector<float> referenceVoteOf(const std::vector<std::vector<float>>& cs, ncclSignOp_t op,
                                   ncclSignZeroRule_t zero, ncclSignTieRule_t tie) {
  std::vector<const void*> in;
  for (const auto& c : cs) in.push_back(c.data());
  std::vector<float> out(cs.at(0).size());
  bits::referenceSignAllReduce(in, out.size(), ncclFloat32, op, zero, tie, out.data());
  return out;
}

}  // namespace test
}  // namespace signlion
