// A plain, per-element reference of Lion for the optimizer tests: no fused
// passes, no communicator, one element at a time in the order nccl_sign.h
// states. The vote of several ranks comes from src/bits/vote_reference.
#pragma once

#include <cstddef>
#include <vector>

#include "common/vote_inputs.h"
#include "nccl_sign.h"

namespace signlion {
namespace test {

// Lion's sign: +1, -1, and 0 for +-0 and NaN.
float plainSign(float c);

// One rank's Lion state and hyperparameters.
struct LionReference {
  ncclDataType_t type = ncclFloat32;
  bool masterWeights = false;  // used for fp16/bf16 only
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.99f, weightDecay = 0.0f;
  std::vector<float> momentum;
  std::vector<float> master;
  bool masterReady = false;

  LionReference(ncclDataType_t t, size_t count, float lr_, float wd, bool masterWeights_ = false);
  // c_i = beta1*m_i + (1-beta1)*(g_i/divisor), then m_i = beta2*m_i + (1-beta2)*(g_i/divisor); returns c.
  std::vector<float> interpolate(const Bytes& grads, float divisor = 1.0f);
  // p_i = p_i - lr*(u_i + weightDecay*p_i) (through the master copy when used).
  void apply(Bytes& params, const std::vector<float>& update);
};

// Element i of a fp32/fp16/bf16 buffer, widened to fp32.
float elemAsFloat(const Bytes& buf, ncclDataType_t dt, size_t i);

// The votes of all ranks' c combined by the reference sign all-reduce (fp32).
std::vector<float> referenceVoteOf(const std::vector<std::vector<float>>& cs, ncclSignOp_t op,
                                   ncclSignZeroRule_t zero, ncclSignTieRule_t tie);

}  // namespace test
}  // namespace signlion
