#include "common/call_signature.h"

#include <cinttypes>
#include <string>

#include "common/checks.h"
#include "common/config.h"
#include "common/type_name.h"

namespace signlion {

namespace {

const char* opName(int op) { return op == ncclSignMajority ? "majority" : op == ncclSignAverage ? "average" : "?"; }
const char* kindName(int k) {
  return k == (int)CallKind::kSignAllReduce  ? "ncclSignHostAllReduce"
         : k == (int)CallKind::kSumAllReduce ? "ncclSignHostSumAllReduce"
                                             : "?";
}

}  // namespace

const char* zeroRuleName(int z) {
  return z == ncclSignZeroPositive   ? "positive"
         : z == ncclSignZeroNegative ? "negative"
         : z == ncclSignZeroAbstain  ? "abstain"
                                     : "?";
}

const char* tieRuleName(int t) {
  return t == ncclSignTieZero       ? "zero"
         : t == ncclSignTiePositive ? "positive"
         : t == ncclSignTieNegative ? "negative"
                                    : "?";
}

ncclResult_t compareSignatures(const CallSignature& o, const CallSignature& m, const char* fn) {
  if (o.seq != m.seq) {
    WARN("%s: rank %d is at call %" PRIu64 ", rank %d at call %" PRIu64
         " of this communicator: a rank skipped a call, or went on after an error",
         fn, o.rank, o.seq, m.rank, m.seq);
    return ncclInvalidUsage;
  }
  if (o.kind == m.kind && o.count == m.count && o.datatype == m.datatype && o.op == m.op && o.zeroRule == m.zeroRule &&
      o.tieRule == m.tieRule && o.algorithm == m.algorithm && o.segment == m.segment && o.part == m.part)
    return ncclSuccess;  // the hot path: no formatting, no allocation
  // The first field that differs: its name, theirs, mine.
  const char* field = nullptr;
  std::string theirs, ours;
  auto differs = [&](const char* name, bool d, std::string t, std::string o2) {
    if (field != nullptr || !d) return;
    field = name;
    theirs = std::move(t);
    ours = std::move(o2);
  };
  auto num = [](uint64_t v) { return std::to_string(v); };
  differs("collective", o.kind != m.kind, kindName(o.kind), kindName(m.kind));
  differs("count", o.count != m.count, num(o.count), num(m.count));
  differs("datatype", o.datatype != m.datatype, typeName(o.datatype), typeName(m.datatype));
  differs("op", o.op != m.op, opName(o.op), opName(m.op));
  differs("zero rule", o.zeroRule != m.zeroRule, zeroRuleName(o.zeroRule), zeroRuleName(m.zeroRule));
  differs("tie rule", o.tieRule != m.tieRule, tieRuleName(o.tieRule), tieRuleName(m.tieRule));
  differs("algorithm", o.algorithm != m.algorithm, algoName(o.algorithm), algoName(m.algorithm));
  differs("segment size", o.segment != m.segment, num(o.segment), num(m.segment));
  differs("segment index", o.part != m.part, num(o.part), num(m.part));
  WARN("%s: call %" PRIu64 ": rank %d passed %s %s, rank %d passed %s: every rank must pass the same %s", fn, m.seq,
       o.rank, field, theirs.c_str(), m.rank, ours.c_str(), field);
  return ncclInvalidUsage;
}

}  // namespace signlion
