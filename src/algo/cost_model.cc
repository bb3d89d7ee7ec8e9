#include "algo/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "algo/direct.h"
#include "algo/tree.h"
#include "common/checks.h"
#include "common/config.h"
#include "common/param.h"

SIGNLION_PARAM(CostAlphaNs, "COST_ALPHA_NS", 20000, 1, int64_t{1} << 40)
SIGNLION_PARAM(CostGammaPs, "COST_GAMMA_PS", 10, 1, int64_t{1} << 40)
SIGNLION_PARAM(CostIntraAlphaNs, "COST_INTRA_ALPHA_NS", 10000, 1, int64_t{1} << 40)
SIGNLION_PARAM(CostIntraBetaMBps, "COST_INTRA_BETA_MBPS", 8000, 1, int64_t{1} << 40)
SIGNLION_PARAM(CostPackPs, "COST_PACK_PS", 430, 1, int64_t{1} << 40)
SIGNLION_PARAM(CostDecidePs, "COST_DECIDE_PS", 575, 1, int64_t{1} << 40)

namespace signlion {
namespace algo {

namespace {
// A tunable that must be positive; anything else keeps the default.
double positiveParam(int64_t value, const char* prefix, const char* name, double deflt) {
  if (value > 0) return static_cast<double>(value);
  WARN("SIGNLION_%s_%s=%lld must be positive; using the default", prefix, name, (long long)value);
  return deflt;
}

// Auto leaves out an algorithm that a setting rules out. Every message size
// misses the schedule cache once and comes here, so the WARN is said once per
// distinct (algorithm, N, setting value), not once per call.
void warnLeftOut(ncclSignAlgo_t algo, int nranks, const SettingConflict& conflict) {
  static std::mutex mu;
  static auto* said = new std::set<std::string>;  // never destroyed: calls may run during exit
  std::string line = std::string(conflict.name) + "=" + std::to_string(conflict.value) + ": " + conflict.why +
                     "; auto leaves " + algoName(algo) + " out on " + std::to_string(nranks) + " ranks";
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said->insert(line).second) return;
  }
  WARN("%s", line.c_str());
}

// Blocks of the counter that each step i >= from touches first (a send reads
// them, a receive adds into them, a local reads or writes them): what the host
// executor's lazy pack (algo/chunk_order.h) packs just before step i's
// transfers need them. Direct's first step reads 1/N of the votes, the ring's
// 2/N, a tree's a pipeline chunk; halving-doubling's all of them.
std::vector<int64_t> firstCounterTouches(const Schedule& s, size_t from) {
  std::vector<int64_t> fresh(s.steps.size(), 0);
  std::map<int64_t, int64_t> covered;  // disjoint [begin, end) already touched
  auto touch = [&](size_t i, const Range& r) {
    if (r.empty()) return;
    int64_t b = r.begin, e = r.end, overlap = 0;
    auto it = covered.upper_bound(b);
    if (it != covered.begin() && std::prev(it)->second > b) --it;
    while (it != covered.end() && it->first < r.end) {
      overlap += std::min(it->second, r.end) - std::max(it->first, r.begin);
      b = std::min(b, it->first);
      e = std::max(e, it->second);
      it = covered.erase(it);
    }
    covered[b] = e;
    fresh[i] += r.size() - overlap;
  };
  for (size_t i = from; i < s.steps.size(); i++) {
    const Step& st = s.steps[i];
    for (const Local& l : st.locals)
      if (l.op != LocalOp::kPackVotes && (l.src == Buffer::kCounter || l.dst == Buffer::kCounter)) touch(i, l.range);
    for (const Recv& x : st.recvs)
      if (x.buf == Buffer::kCounter) touch(i, x.range);
    for (const Send& x : st.sends)
      if (x.buf == Buffer::kCounter) touch(i, x.range);
  }
  return fresh;
}

// Several nodes, one of them with several ranks: otherwise the hierarchical
// schedule is halving-doubling's, or keeps everything inside one node.
bool worthHierarchical(int nranks, const Topology* topo) {
  if (topo == nullptr || !topo->known() || topo->node.size() != (size_t)nranks) return false;
  const auto nodes = topo->members(nranks);
  return nodes.size() > 1 && nodes.size() < (size_t)nranks;
}
}  // namespace

CostParams costParamsFrom(const char* prefix, int64_t alphaNs, int64_t betaMBps, int64_t gammaPs,
                          const CostParams& defaults) {
  CostParams p = defaults;
  p.alphaUs = positiveParam(alphaNs, prefix, "ALPHA_NS", defaults.alphaUs * 1e3) * 1e-3;
  p.betaBytesPerUs = positiveParam(betaMBps, prefix, "BETA_MBPS", defaults.betaBytesPerUs);  // MB/s == B/us
  p.gammaUsPerPlane = positiveParam(gammaPs, prefix, "GAMMA_PS", defaults.gammaUsPerPlane * 1e6) * 1e-6;
  return p;
}

void intraCostParamsFrom(const char* prefix, int64_t alphaNs, int64_t betaMBps, CostParams* p) {
  p->intraAlphaUs = positiveParam(alphaNs, prefix, "INTRA_ALPHA_NS", p->intraAlphaUs * 1e3) * 1e-3;
  p->intraBetaBytesPerUs = positiveParam(betaMBps, prefix, "INTRA_BETA_MBPS", p->intraBetaBytesPerUs);
}

void cpuCostParamsFrom(const char* prefix, int64_t packPs, int64_t decidePs, CostParams* p) {
  p->packUsPerElement = positiveParam(packPs, prefix, "PACK_PS", p->packUsPerElement * 1e6) * 1e-6;
  p->decideUsPerElement = positiveParam(decidePs, prefix, "DECIDE_PS", p->decideUsPerElement * 1e6) * 1e-6;
}

CostModel::CostModel()
    : params_(costParamsFrom("COST", signlionParamCostAlphaNs(), signlionParamCostBetaMBps(),
                             signlionParamCostGammaPs(), CostParams())) {
  intraCostParamsFrom("COST", signlionParamCostIntraAlphaNs(), signlionParamCostIntraBetaMBps(), &params_);
  cpuCostParamsFrom("COST", signlionParamCostPackPs(), signlionParamCostDecidePs(), &params_);
}

ncclResult_t CostModel::setMeasured(double alphaUs, double betaBytesPerUs) {
  ARGCHECK(alphaUs >= 0 && std::isfinite(alphaUs), "CostModel::setMeasured", "alphaUs", "%g is not >= 0", alphaUs);
  ARGCHECK(betaBytesPerUs > 0 && std::isfinite(betaBytesPerUs), "CostModel::setMeasured", "betaBytesPerUs",
           "%g is not > 0", betaBytesPerUs);
  params_.alphaUs = alphaUs;
  params_.betaBytesPerUs = betaBytesPerUs;
  INFO(kSubsysAlgo, "cost model: measured alpha %.2f us, beta %.1f MB/s", alphaUs, betaBytesPerUs);
  return ncclSuccess;
}

double CostModel::predict(const Schedule& s, const Topology* topo) const {
  static const Topology kUnknown;
  if (topo == nullptr || (topo->known() && topo->node.size() != (size_t)s.nranks)) topo = &kUnknown;
  const bool oneCollective = params_.collectiveStepUs >= 0 && runsAsOneCollective(s.algo);
  const double stepUs = oneCollective ? params_.collectiveStepUs : params_.alphaUs;
  // s's node: s first, then the schedules of its node mates (they share the
  // node's network link with s).
  std::vector<Schedule> mates;
  if (topo->known()) {
    const std::vector<std::vector<int>> nodes = topo->members(s.nranks);
    for (int r : nodes[topo->nodeOf(s.rank)]) {
      if (r == s.rank) continue;
      mates.emplace_back();
      if (buildSchedule(s.algo, s.nranks, r, s.nblocks, s.spec, &mates.back(), topo) != ncclSuccess) mates.pop_back();
    }
  }
  const bool oneNode = topo->known() && topo->members(s.nranks).size() == 1;
  auto elems = [](int64_t blocks) { return static_cast<double>(blocks) * kBlockElems; };
  const double packUs = params_.packUsPerElement * s.counters, unpackUs = params_.decideUsPerElement;
  // The overlap (CostParams): what runs under which step, and what is exposed.
  const int64_t chunk = params_.overlapChunkBytes;
  const bool unpackEarly = chunk > 0 && resultWrittenOnceAfterPacks(s);
  double exposedPackUs = elems(s.nblocks) * packUs, trailingUnpackUs = unpackEarly ? 0 : elems(s.nblocks) * unpackUs;
  size_t packStep = s.steps.size();
  if (chunk > 0) {
    for (size_t i = 0; i < s.steps.size() && packStep == s.steps.size(); i++)
      if (deferrablePack(s, i) != nullptr) packStep = i;
    if (packStep < s.steps.size()) {
      const Step& st = s.steps[packStep];
      exposedPackUs = st.sends.empty()
                          ? 0
                          : elems(std::min(chunkBlocks(st.sends[0], chunk), st.sends[0].range.size())) * packUs;
    }
  }
  // The lazy pack runs each block just before its first use: under the step
  // that first touches it (the first chunk of the pack step exposed, above;
  // blocks no transfer touches, under the pack step).
  // (A pack into vote slots, the all-gather's, is not lazy: all of it there.)
  std::vector<int64_t> packedUnder;
  if (packStep < s.steps.size() && deferrablePack(s, packStep)->dst == Buffer::kCounter) {
    packedUnder = firstCounterTouches(s, packStep);
    int64_t touched = 0;
    for (int64_t b : packedUnder) touched += b;
    packedUnder[packStep] += std::max<int64_t>(0, s.nblocks - touched);
  }
  size_t lastMessageStep = 0;
  for (size_t i = 0; i < s.steps.size(); i++)
    if (s.steps[i].anyRankCommunicates) lastMessageStep = i;
  double us = 0, carriedUs = 0;
  bool any = false;
  for (size_t i = 0; i < s.steps.size(); i++) {
    const Step& step = s.steps[i];
    // Under this step's transfers (overlap), and after them.
    double underUs = 0, afterUs = 0;
    if (!packedUnder.empty()) {
      if (packedUnder[i] > 0)
        underUs += std::max(0.0, elems(packedUnder[i]) * packUs - (i == packStep ? exposedPackUs : 0.0));
    } else if (i == packStep) {
      underUs += elems(s.nblocks) * packUs - exposedPackUs;
    }
    if (unpackEarly) {
      int64_t written = 0, lastChunk = 0;
      forEachResultWrite(s, [&](size_t w, const Range& r) {
        if (w == i) written += r.size();
      });
      for (const Recv& r : step.recvs)
        if (r.op == RecvOp::kStore && r.buf == Buffer::kResult)
          lastChunk = std::max(lastChunk, std::min(chunkBlocks(r, chunk), r.range.size()));
      // Unpacking spills into later steps' transfers: only the last message
      // step's last chunk, and what steps after it decide, follow the wire.
      if (i > lastMessageStep) lastChunk = written;
      if (i < lastMessageStep) lastChunk = 0;
      underUs += elems(written - lastChunk) * unpackUs;
      afterUs += elems(lastChunk) * unpackUs;
    }
    if (chunk > 0) {
      int64_t lastRecv = 0;
      for (const Recv& r : step.recvs) lastRecv = std::max(lastRecv, std::min(chunk, r.bytes()));
      afterUs += params_.gammaUsPerPlane * 8.0 * static_cast<double>(lastRecv);
    }
    underUs += carriedUs;  // what steps without messages left to the next one's transfers
    carriedUs = 0;
    if (!step.anyRankCommunicates) {
      if (i < lastMessageStep) {
        carriedUs = underUs;
        underUs = 0;
      }
      us += underUs + afterUs;
      continue;
    }
    double intraUs = 0;
    int64_t egress = 0, ingress = 0;
    auto addRank = [&](const Schedule& x) {
      if (i >= x.steps.size()) return;
      const Step& st = x.steps[i];
      int64_t sent = 0, received = 0;
      for (const Send& m : st.sends) (topo->sameNode(x.rank, m.peer) ? sent : egress) += m.bytes();
      for (const Recv& m : st.recvs) (topo->sameNode(x.rank, m.peer) ? received : ingress) += m.bytes();
      if (sent > 0 || received > 0)
        intraUs = std::max(intraUs, params_.intraAlphaUs +
                                        static_cast<double>(std::max(sent, received)) / params_.intraBetaBytesPerUs);
    };
    addRank(s);
    for (const Schedule& x : mates) addRank(x);
    double interUs = egress > 0 || ingress > 0
                         ? stepUs + static_cast<double>(std::max(egress, ingress)) / params_.betaBytesPerUs
                         : 0;
    double idleUs = oneNode || topo->known() ? params_.intraAlphaUs : stepUs;  // waits for the others
    // Each received chunk is added while the next ones travel.
    double addUs = params_.gammaUsPerPlane * 8.0 * static_cast<double>(step.bytesReceived());
    us += std::max({intraUs, interUs, addUs + underUs, intraUs == 0 && interUs == 0 ? idleUs : 0.0}) + afterUs;
    any = true;
  }
  if (oneCollective && any) us += params_.alphaUs;
  return us + exposedPackUs + trailingUnpackUs;
}

ncclResult_t CostModel::predict(ncclSignAlgo_t algo, int nranks, uint64_t count, const OpSpec& spec, double* us,
                                const Topology* topo) const {
  ARGCHECK(us != nullptr, "CostModel::predict", "us", "must not be NULL");
  // Whole segments, then the rest (the host runs each as one schedule).
  const uint64_t segment = params_.segmentElements > 0 ? (uint64_t)params_.segmentElements : 0;
  auto one = [&](uint64_t n, double* out) {
    // The tree's rank 0 may be a leaf: its busiest rank sets the pace.
    const int rank = algo == ncclSignAlgoTree ? treeBusiestRank(nranks) : 0;
    Schedule s;
    NCCLCHECK(buildSchedule(algo, nranks, rank, blocksForCount(n), spec, &s, topo));
    *out = predict(s, topo);
    return ncclSuccess;
  };
  if (segment == 0 || count <= segment) return one(count, us);
  double whole = 0, rest = 0;
  NCCLCHECK(one(segment, &whole));
  if (count % segment != 0) NCCLCHECK(one(count % segment, &rest));
  *us = static_cast<double>(count / segment) * whole + rest;
  return ncclSuccess;
}

ncclResult_t chooseAlgorithm(int nranks, uint64_t count, const OpSpec& spec, unsigned available,
                             ncclSignAlgo_t requested, const CostModel& model, ncclSignAlgo_t* chosen,
                             const Topology* topo) {
  const char* fn = "chooseAlgorithm";
  ARGCHECK(chosen != nullptr, fn, "chosen", "must not be NULL");
  ARGCHECK(nranks >= 1, fn, "nranks", "%d < 1", nranks);
  ARGCHECK(requested >= ncclSignAlgoAuto && requested < ncclSignNumAlgos, fn, "requested",
           "%d is not an ncclSignAlgo_t", (int)requested);
  ARGCHECK((available & kAllAlgorithms) != 0, fn, "available", "0x%x names no algorithm", available);
  NCCLCHECK(checkOpSpec(spec, fn));
  if (requested != ncclSignAlgoAuto) {
    if (!(available & algoBit(requested))) {
      std::string names;
      for (int a = ncclSignAlgoRing; a < ncclSignNumAlgos; a++)
        if (available & algoBit((ncclSignAlgo_t)a))
          names += std::string(names.empty() ? "" : ", ") + algoName((ncclSignAlgo_t)a);
      WARN("%s: invalid argument 'requested': %s is forced (config->algorithm or SIGNLION_ALGO) but this communicator "
           "cannot run it (it can run: %s; the communicator's init said why)",
           fn, algoName(requested), names.c_str());
      return ncclInvalidArgument;
    }
    INFO(kSubsysAlgo, "nranks %d count %llu: %s (forced)", nranks, (unsigned long long)count, algoName(requested));
    *chosen = requested;
    return ncclSuccess;
  }
  if (!worthHierarchical(nranks, topo)) available &= ~algoBit(ncclSignAlgoHierarchical);
  ncclSignAlgo_t best = ncclSignAlgoAuto;
  double bestUs = 0, treeUs = 0;
  bool treeSeen = false;
  std::string all;
  // A rank's peers, and so its sockets and threads, stay bounded as N grows.
  if (!directAllowed(nranks) && (available & algoBit(ncclSignAlgoDirect))) {
    available &= ~algoBit(ncclSignAlgoDirect);
    all += " direct (over " + std::to_string(kMaxDirectRanks) + " ranks)";
  }
  for (int a = ncclSignAlgoAuto + 1; a < ncclSignNumAlgos; a++) {
    ncclSignAlgo_t algo = static_cast<ncclSignAlgo_t>(a);
    if (!(available & algoBit(algo))) continue;
    const SettingConflict conflict = settingsConflict(algo, nranks);
    if (conflict.name != nullptr) {
      warnLeftOut(algo, nranks, conflict);
      all += std::string(" ") + algoName(algo) + " (" + conflict.name + ")";
      continue;
    }
    double us;
    NCCLCHECK(model.predict(algo, nranks, count, spec, &us, topo));
    all += std::string(" ") + algoName(algo) + " " + std::to_string(us);
    if (algo == ncclSignAlgoTree) {  // weighed against the best of the others below
      treeUs = us;
      treeSeen = true;
      continue;
    }
    if (best == ncclSignAlgoAuto || us < bestUs) {
      best = algo;
      bestUs = us;
    }
  }
  // The tree's predicted wins rest on the model's CPU-overlap terms (its short
  // chunks expose the least pack and unpack), which runs of 16 to 64 ranks
  // did not show: there it was slower than halving-doubling. So auto takes it
  // only for a clear predicted win, kTreeMargin of the best other algorithm.
  if (treeSeen && (best == ncclSignAlgoAuto || treeUs < kTreeMargin * bestUs)) {
    best = ncclSignAlgoTree;
    bestUs = treeUs;
  }
  ARGCHECK(best != ncclSignAlgoAuto, fn, "available", "no algorithm of mask 0x%x can run with these settings:%s",
           available, all.c_str());
  INFO(kSubsysAlgo, "nranks %d count %llu: chose %s (predicted us:%s)", nranks, (unsigned long long)count,
       algoName(best), all.c_str());
  *chosen = best;
  return ncclSuccess;
}

}  // namespace algo
}  // namespace signlion
