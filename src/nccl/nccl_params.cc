#include "nccl/nccl_params.h"

#include <algorithm>
#include <atomic>

#include "common/debug.h"
#include "common/param.h"

namespace {
// The cost model's defaults for NCCL links (docs/NCCL.md, "Choosing").
constexpr int64_t kAlphaNs = 5000;           // one grouped ncclSend/ncclRecv step: launch and handshake
constexpr int64_t kBetaMBps = 100000;        // between two ranks: NVLink-class, 100 GB/s
constexpr int64_t kGammaPs = 1;              // GPU compute per element-plane
constexpr int64_t kCollectiveStepNs = 1000;  // one ring step inside an NCCL collective
constexpr int64_t kNetAlphaNs = 10000;       // a step between nodes: NIC, switch, proxy thread
constexpr int64_t kNetBetaMBps = 25000;      // a node's network link: one 200 Gb/s NIC
}  // namespace

// Each chunk is one NCCL group launch (a few microseconds), so a chunk must
// move long enough to hide it at NVLink rates; the add kernels are an order
// of magnitude faster than the transfer, so a few chunks per step suffice.
SIGNLION_PARAM(NcclChunkBytes, "NCCL_CHUNK_BYTES", 4 << 20, 64, int64_t{1} << 30)
SIGNLION_PARAM(NcclSegment, "NCCL_SEGMENT", 64 << 20, 64, int64_t{1} << 40)
SIGNLION_PARAM(NcclCostAlphaNs, "NCCL_COST_ALPHA_NS", kAlphaNs, 1, int64_t{1} << 40)
SIGNLION_PARAM(NcclCostBetaMBps, "NCCL_COST_BETA_MBPS", kBetaMBps, 1, int64_t{1} << 40)
SIGNLION_PARAM(NcclCostGammaPs, "NCCL_COST_GAMMA_PS", kGammaPs, 1, int64_t{1} << 40)
SIGNLION_PARAM(NcclCostCollectiveStepNs, "NCCL_COST_COLLECTIVE_STEP_NS", kCollectiveStepNs, 1,
               int64_t{1} << 40)
SIGNLION_PARAM(NcclCostNetAlphaNs, "NCCL_COST_NET_ALPHA_NS", kNetAlphaNs, 1, int64_t{1} << 40)
SIGNLION_PARAM(NcclCostNetBetaMBps, "NCCL_COST_NET_BETA_MBPS", kNetBetaMBps, 1, int64_t{1} << 40)

namespace signlion {
namespace nccl {

int64_t chunkBytes() {
  return signlionParamNcclChunkBytes();  // within [64 B, 1 GiB], else the read kept the default
}

uint64_t segmentElements() {
  return static_cast<uint64_t>(signlionParamNcclSegment()) / 64 * 64;  // at least 64: the declared range
}

algo::CostParams costParams() {
  algo::CostParams defaults;
  defaults.alphaUs = kAlphaNs * 1e-3;
  defaults.betaBytesPerUs = kBetaMBps;
  defaults.gammaUsPerPlane = kGammaPs * 1e-6;
  // The kernels pack and decide at memory speed on the GPU: the same per
  // element for every algorithm, so only their order of magnitude matters.
  defaults.packUsPerElement = kGammaPs * 1e-6;
  defaults.decideUsPerElement = kGammaPs * 1e-6;
  algo::CostParams p = algo::costParamsFrom("NCCL_COST", signlionParamNcclCostAlphaNs(),
                                            signlionParamNcclCostBetaMBps(), signlionParamNcclCostGammaPs(), defaults);
  // 0 is a valid collective step cost (all of it in alpha); negative is not.
  int64_t step = signlionParamNcclCostCollectiveStepNs();
  if (step < 0) {
    WARN("SIGNLION_NCCL_COST_COLLECTIVE_STEP_NS=%lld must not be negative; using the default", (long long)step);
    step = kCollectiveStepNs;
  }
  p.collectiveStepUs = static_cast<double>(step) * 1e-3;
  return p;
}

algo::CostParams nodeCostParams() {
  algo::CostParams p = costParams();
  // Inside a node: the links the flat model prices (NVLink-class).
  p.intraAlphaUs = p.alphaUs;
  p.intraBetaBytesPerUs = p.betaBytesPerUs;
  // Between nodes: the network. costParamsFrom reads its three values under
  // one prefix; only alpha and beta differ here, gamma stays the kernels'.
  algo::CostParams net = p;
  net.alphaUs = kNetAlphaNs * 1e-3;
  net.betaBytesPerUs = kNetBetaMBps;
  net = algo::costParamsFrom("NCCL_COST_NET", signlionParamNcclCostNetAlphaNs(), signlionParamNcclCostNetBetaMBps(),
                             static_cast<int64_t>(p.gammaUsPerPlane * 1e6 + 0.5), net);
  p.alphaUs = net.alphaUs;
  p.betaBytesPerUs = net.betaBytesPerUs;
  return p;
}

}  // namespace nccl
}  // namespace signlion
