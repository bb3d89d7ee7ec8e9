#include "algo/schedule.h"

#include <algorithm>

#include "common/checks.h"
#include "common/config.h"
#include "common/param.h"

// 0: decided results travel as their planes even where they could be coded
// (an A/B switch for measuring what the coding saves); every rank must agree.
SIGNLION_PARAM(ResultCoding, "RESULT_CODING", 1, 0, 1)

namespace signlion {
namespace algo {

// The width and plane rules are the wire format's (src/bits/bits.h); the
// schedules only apply them.
int counterWidth(int64_t maxCount) { return bits::widthFor(maxCount > 0 ? static_cast<uint64_t>(maxCount) : 0); }

int countersPerValue(ncclSignZeroRule_t zeroRule) { return bits::votePlanes(zeroRule); }

int resultPlanes(ncclSignOp_t op, ncclSignZeroRule_t zeroRule, ncclSignTieRule_t tieRule, int nranks) {
  if (op == ncclSignAverage) return countersPerValue(zeroRule) * counterWidth(nranks);
  return bits::majorityPlanes(nranks, zeroRule, tieRule);
}

bool resultCodingEnabled() { return signlionParamResultCoding() != 0; }

bool resultsTravelAsTrits(const OpSpec& spec, int resultPlanes) {
  return spec.op == ncclSignMajority && resultPlanes == 2 && resultCodingEnabled();
}

Range shardRange(int64_t count, int parts, int i) {
  int64_t q = count / parts, r = count % parts;
  Range out;
  out.begin = q * i + std::min<int64_t>(i, r);
  out.end = out.begin + q + (i < r ? 1 : 0);
  return out;
}

namespace {
template <class Items, class Fn>
int64_t sumOf(const Items& items, Fn fn) {
  int64_t total = 0;
  for (const auto& item : items) total += fn(item);
  return total;
}
}  // namespace

int64_t Step::bytesSent() const {
  return sumOf(sends, [](const Send& m) { return m.bytes(); });
}
int64_t Step::bytesReceived() const {
  return sumOf(recvs, [](const Recv& m) { return m.bytes(); });
}
int64_t Schedule::bytesSent() const {
  return sumOf(steps, [](const Step& s) { return s.bytesSent(); });
}
int64_t Schedule::bytesReceived() const {
  return sumOf(steps, [](const Step& s) { return s.bytesReceived(); });
}

int Schedule::messageSteps() const {
  int n = 0;
  for (const Step& s : steps) n += s.communicates() ? 1 : 0;
  return n;
}

int64_t Schedule::maxRecvBytesPerStep() const {
  int64_t m = 0;
  for (const Step& s : steps) m = std::max(m, s.bytesReceived());
  return m;
}

const Local* deferrablePack(const Schedule& s, size_t i) {
  auto onlyPack = [&](const Step& st) -> const Local* {
    if (st.locals.size() != 1) return nullptr;
    const Local& l = st.locals[0];
    return l.op == LocalOp::kPackVotes && l.range.begin == 0 && l.range.end == s.nblocks ? &l : nullptr;
  };
  if (i >= s.steps.size() || !s.steps[i].communicates()) return nullptr;
  if (const Local* l = onlyPack(s.steps[i])) return l;
  if (i == 0 || !s.steps[i].locals.empty() || s.steps[i - 1].communicates()) return nullptr;
  return onlyPack(s.steps[i - 1]);
}

bool resultWrittenOnceAfterPacks(const Schedule& s) {
  size_t lastPack = 0;
  bool anyPack = false;
  for (size_t i = 0; i < s.steps.size(); i++)
    for (const Local& l : s.steps[i].locals)
      if (l.op == LocalOp::kPackVotes || l.op == LocalOp::kPackFields) {
        // A pack may run inside the next step's transfers (deferrablePack).
        lastPack = deferrablePack(s, i + 1) == &l ? i + 1 : i;
        anyPack = true;
      }
  // A few dozen writes at most: pairwise overlap checks, nothing allocated.
  bool ok = true;
  int64_t total = 0;
  forEachResultWrite(s, [&](size_t i, const Range& a) {
    ok &= !anyPack || i > lastPack;
    total += a.size();
    int overlapping = 0;  // a itself included
    forEachResultWrite(s, [&](size_t, const Range& b) { overlapping += a.begin < b.end && b.begin < a.end; });
    ok &= overlapping == 1;
  });
  return ok && total == s.nblocks;
}

int64_t Schedule::planeOffset(Buffer buf, int slot, int plane, int payloadWidth) const {
  switch (buf) {
    case Buffer::kCounter:
      return (static_cast<int64_t>(plane / payloadWidth) * counterWidth + plane % payloadWidth) * nblocks;
    case Buffer::kResult:
      return static_cast<int64_t>(plane) * nblocks;
    case Buffer::kVotes:
      return (static_cast<int64_t>(slot) * counters + plane) * nblocks;
    case Buffer::kFields:
      return static_cast<int64_t>(plane) * fieldWords;
  }
  return 0;
}

ncclResult_t checkOpSpec(const OpSpec& spec, const char* caller) {
  ARGCHECK(spec.op >= 0 && spec.op < ncclSignNumOps, caller, "op", "%d is not an ncclSignOp_t", (int)spec.op);
  ARGCHECK(spec.zeroRule >= 0 && spec.zeroRule < ncclSignNumZeroRules, caller, "zeroRule",
           "%d is not an ncclSignZeroRule_t", (int)spec.zeroRule);
  ARGCHECK(spec.tieRule >= 0 && spec.tieRule < ncclSignNumTieRules, caller, "tieRule", "%d is not an ncclSignTieRule_t",
           (int)spec.tieRule);
  return ncclSuccess;
}

SettingConflict settingsConflict(ncclSignAlgo_t algo, int nranks) {
  SettingConflict conflict;
  if (algo == ncclSignAlgoFieldSum) detail::fieldSumBits(nranks, &conflict);
  return conflict;
}

ncclResult_t buildSchedule(ncclSignAlgo_t algo, int nranks, int rank, int64_t nblocks, const OpSpec& spec,
                           Schedule* out, const Topology* topo) {
  const char* fn = "buildSchedule";
  ARGCHECK(out != nullptr, fn, "out", "must not be NULL");
  ARGCHECK(nranks >= 1, fn, "nranks", "%d < 1", nranks);
  ARGCHECK(rank >= 0 && rank < nranks, fn, "rank", "%d is outside [0, %d)", rank, nranks);
  ARGCHECK(nblocks >= 0, fn, "nblocks", "%lld is negative", (long long)nblocks);
  ARGCHECK(algo > ncclSignAlgoAuto && algo < ncclSignNumAlgos, fn, "algo",
           "%d is not a concrete algorithm (auto must be resolved first)", (int)algo);
  NCCLCHECK(checkOpSpec(spec, fn));
  static const Topology kUnknown;
  if (topo == nullptr) topo = &kUnknown;
  ARGCHECK(!topo->known() || topo->node.size() == (size_t)nranks, fn, "topo", "names %zu ranks, not %d",
           topo->node.size(), nranks);

  Schedule s;
  s.algo = algo;
  s.nranks = nranks;
  s.rank = rank;
  s.nblocks = nblocks;
  s.spec = spec;
  s.counters = countersPerValue(spec.zeroRule);
  s.resultPlanes = resultPlanes(spec.op, spec.zeroRule, spec.tieRule, nranks);
  switch (algo) {
    case ncclSignAlgoRing:
      detail::buildRing(&s);
      break;
    case ncclSignAlgoHalvingDoubling:
      detail::buildHalvingDoubling(&s);
      break;
    case ncclSignAlgoAllGather:
      detail::buildAllGather(&s);
      break;
    case ncclSignAlgoHierarchical:
      detail::buildHierarchical(&s, *topo);
      break;
    case ncclSignAlgoDirect:
      detail::buildDirect(&s);
      break;
    case ncclSignAlgoTree:
      detail::buildTree(&s);
      break;
    case ncclSignAlgoFieldSum: {
      // Fields as narrow as N allows, or fixed ones (Lion Cub: 4 or 8 bits).
      SettingConflict conflict;
      s.fieldBits = detail::fieldSumBits(nranks, &conflict);
      ARGCHECK(s.fieldBits != 0, fn, conflict.name, "%s", conflict.why.c_str());
      detail::buildFieldSum(&s);
      break;
    }
    default:
      return ncclInternalError;  // excluded by the ARGCHECK above
  }
  // Every builder's result transfers (makeResultSend, makeStoreRecv into
  // kResult) get the result's wire coding here, in one place.
  if (resultsTravelAsTrits(s.spec, s.resultPlanes))
    for (Step& st : s.steps) {
      for (Send& x : st.sends)
        if (x.buf == Buffer::kResult) x.coding = Coding::kTrits;
      for (Recv& x : st.recvs)
        if (x.buf == Buffer::kResult) x.coding = Coding::kTrits;
    }
  TRACE(kSubsysAlgo, "schedule %s nranks %d rank %d nblocks %lld: %zu steps, %lld bytes sent", algoName(algo), nranks,
        rank, (long long)nblocks, s.steps.size(), (long long)s.bytesSent());
  *out = std::move(s);
  return ncclSuccess;
}

namespace detail {

Send makeSend(int peer, Buffer buf, Range range, int counters, int64_t maxCount) {
  Send s;
  s.peer = peer;
  s.buf = buf;
  s.range = range;
  s.maxCount = maxCount;
  s.width = counterWidth(maxCount);
  s.planes = counters * s.width;
  return s;
}

Recv makeAddRecv(int peer, Range range, int counters, int64_t incomingMax, int64_t localMax) {
  Recv r;
  static_cast<Transfer&>(r) = makeSend(peer, Buffer::kCounter, range, counters, incomingMax);
  r.op = RecvOp::kAdd;
  r.localMax = localMax;
  r.localWidth = counterWidth(localMax);
  r.resultMax = localMax + incomingMax;
  r.resultWidth = counterWidth(r.resultMax);
  return r;
}

Transfer planesTransfer(int peer, Buffer buf, Range range, int planes) {
  Transfer t;
  t.peer = peer;
  t.buf = buf;
  t.range = range;
  t.planes = planes;
  t.width = planes;
  return t;
}

Recv makeStoreRecv(int peer, Buffer buf, Range range, int planes) {
  Recv r;
  static_cast<Transfer&>(r) = planesTransfer(peer, buf, range, planes);
  r.op = RecvOp::kStore;
  return r;
}

Send makeResultSend(int peer, Range range, int resultPlanes) {
  Send s;
  static_cast<Transfer&>(s) = planesTransfer(peer, Buffer::kResult, range, resultPlanes);
  return s;
}

Local packVotes(Buffer dst, int slot, int64_t nblocks) {
  Local l;
  l.op = LocalOp::kPackVotes;
  l.dst = dst;
  l.slot = slot;
  l.range = Range{0, nblocks};
  l.maxCount = 1;
  l.width = 1;
  return l;
}

Local decide(Buffer src, Range range, int64_t maxCount, int width) {
  Local l;
  l.op = LocalOp::kDecide;
  l.src = src;
  l.dst = Buffer::kResult;
  l.range = range;
  l.maxCount = maxCount;
  l.width = width;
  return l;
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
