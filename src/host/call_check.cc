#include "host/call_check.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <string>

#include "algo/schedule.h"
#include "common/checks.h"
#include "host/host_params.h"

namespace signlion {
namespace host {

namespace {
std::string num(uint64_t v) { return std::to_string(v); }

// Field widths of CallHeader::packed, low bits first.
constexpr int kMagicBits = 8, kKindBits = 2, kTypeBits = 4, kOpBits = 2, kRuleBits = 2, kAlgoBits = 4, kSeqBits = 24,
              kPartBits = 16;
static_assert(kMagicBits + kKindBits + kTypeBits + kOpBits + 2 * kRuleBits + kAlgoBits + kSeqBits + kPartBits == 64,
              "CallHeader::packed is one word");
static_assert((int)CallKind::kSumAllReduce < (1 << kKindBits), "collectives fit");
static_assert(ncclBfloat16 < (1 << kTypeBits), "the datatypes host calls take (int8, fp16, fp32, bf16) fit");
static_assert(ncclSignNumOps <= (1 << kOpBits), "ops fit");
static_assert(ncclSignNumZeroRules <= (1 << kRuleBits) && ncclSignNumTieRules <= (1 << kRuleBits), "rules fit");
static_assert(ncclSignNumAlgos <= (1 << kAlgoBits), "algorithms fit");

// Writes (reads) the next `bits` of a packed word.
struct Packer {
  uint64_t word = 0;
  int at = 0;
  void put(uint64_t v, int bits) {
    word |= (v & ((uint64_t{1} << bits) - 1)) << at;
    at += bits;
  }
  uint64_t get(int bits) {
    uint64_t v = (word >> at) & ((uint64_t{1} << bits) - 1);
    at += bits;
    return v;
  }
};

// The value nearest to `mine` whose low `bits` bits are `low`.
uint64_t nearest(uint64_t mine, uint64_t low, int bits) {
  const uint64_t span = uint64_t{1} << bits, mask = span - 1;
  uint64_t up = (low - mine) & mask;  // steps from mine up to the next value with those bits
  return up < span / 2 ? mine + up : mine - (span - up);
}
}  // namespace

CallHeader CallHeader::encode(const CallSignature& sig) {
  Packer p;
  p.put(kMagic, kMagicBits);
  p.put(sig.kind, kKindBits);
  p.put(sig.datatype, kTypeBits);
  p.put(sig.op, kOpBits);
  p.put(sig.zeroRule, kRuleBits);
  p.put(sig.tieRule, kRuleBits);
  p.put(sig.algorithm, kAlgoBits);
  p.put(sig.seq, kSeqBits);
  p.put(sig.part, kPartBits);
  CallHeader h;
  h.count = sig.count;
  h.packed = p.word;
  return h;
}

bool CallHeader::decode(const CallSignature& mine, int rank, CallSignature* sig) const {
  Packer p{packed, 0};
  if (p.get(kMagicBits) != kMagic) return false;
  CallSignature s;
  s.count = count;
  s.kind = (uint8_t)p.get(kKindBits);
  s.datatype = (uint8_t)p.get(kTypeBits);
  s.op = (uint8_t)p.get(kOpBits);
  s.zeroRule = (uint8_t)p.get(kRuleBits);
  s.tieRule = (uint8_t)p.get(kRuleBits);
  s.algorithm = (uint8_t)p.get(kAlgoBits);
  s.seq = nearest(mine.seq, p.get(kSeqBits), kSeqBits);
  s.part = (uint32_t)nearest(mine.part, p.get(kPartBits), kPartBits);
  s.segment = mine.segment;
  s.rank = rank;
  *sig = s;
  return true;
}

ncclResult_t CallCheck::init(const Net& net, const Links& links, int rank, int nranks) {
  rank_ = rank;
  nranks_ = nranks;
  void* p = nullptr;
  SYSCHECKRET(posix_memalign(&p, 64, sizeof(CallHeader) * (nranks + 1)), "posix_memalign");
  buf_ = static_cast<char*>(p);
  for (int i = 0; i <= nranks; i++) new (slot(i)) CallHeader();
  mine_ = CallSignature();
  sentIn_.assign(nranks, 0);
  recvIn_.assign(nranks, 0);
  return regs_.add(net, links, buf_, sizeof(CallHeader) * (nranks + 1));
}

void CallCheck::release(const Net& net) {
  regs_.release(net);
  forget();
}

void CallCheck::forget() {
  regs_.forget();
  free(buf_);
  buf_ = nullptr;
}

void CallCheck::begin(const CallSignature& mine) {
  mine_ = mine;
  mine_.rank = rank_;
  *slot(nranks_) = CallHeader::encode(mine_);
  run_++;
}

void CallCheck::sendAlone(Transfers& t, void* comm) { t.send(comm, slot(nranks_), kHeaderBytes, mhandle(comm)); }

void CallCheck::recvAlone(Transfers& t, int peer, void* comm) {
  *slot(peer) = CallHeader();  // no magic: what a short message leaves is no header
  t.recv(comm, slot(peer), kHeaderBytes, mhandle(comm), kHeaderCookie | (size_t)peer, /*exactSize=*/false);
}

bool CallCheck::firstSend(int peer) {
  if (sentIn_[peer] == run_) return false;
  sentIn_[peer] = run_;
  return true;
}

bool CallCheck::firstRecv(int peer) {
  if (recvIn_[peer] == run_) return false;
  recvIn_[peer] = run_;
  return true;
}

void CallCheck::writeHeader(void* msg) const { memcpy(msg, slot(nranks_), kHeaderBytes); }

ncclResult_t verifyCallHeader(const CallSignature& mine, int rank, int peer, const void* header, size_t size,
                              size_t payloadBytes, const char* fn) {
  CallHeader o;  // no magic
  if (header != nullptr && size >= kHeaderBytes) memcpy(&o, header, kHeaderBytes);
  CallSignature theirs;
  if (!o.decode(mine, peer, &theirs)) {
    WARN("%s: call %" PRIu64
         ": rank %d received a message from rank %d that does not start a call (%zu bytes): "
         "the ranks are not in the same call (a message of an earlier, failed call, or another collective)",
         fn, mine.seq, rank, peer, size);
    return ncclInvalidUsage;
  }
  NCCLCHECK(compareSignatures(theirs, mine, fn));
  if (size != kHeaderBytes + payloadBytes) {
    WARN("%s: call %" PRIu64 ": rank %d sent rank %d %zu bytes where %zu were due, with the same signature", fn,
         mine.seq, peer, rank, size - kHeaderBytes, payloadBytes);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

ncclResult_t CallCheck::verify(int peer, const void* msg, size_t size, size_t payloadBytes, const char* fn) const {
  return verifyCallHeader(mine(), rank_, peer, msg != nullptr ? msg : slot(peer), size, payloadBytes, fn);
}

ncclResult_t CallCheck::checkRing(Transfers& t, const Links& links, const CallSignature& mine, const char* fn) {
  if (nranks_ < 2) return ncclSuccess;
  const int next = (rank_ + 1) % nranks_, prev = (rank_ + nranks_ - 1) % nranks_;
  CallSignature h = mine;
  for (int step = 0; step < nranks_ - 1; step++) {
    h.part = (uint32_t)step;
    begin(h);
    t.clear();
    sendAlone(t, links.peer(next).sendComm);
    recvAlone(t, prev, links.peer(prev).recvComm);
    NCCLCHECK(t.run(
        [&](size_t cookie, size_t size) { return verify((int)(cookie & ~kHeaderCookie), nullptr, size, 0, fn); }));
  }
  return ncclSuccess;
}

namespace {

// The compared cost parameters, each named by its variable and shown in its
// units (the model keeps microseconds).
struct CostParamName {
  double algo::CostParams::*field;
  const char* env;
  double scale;  // variable's units per model unit
};
constexpr CostParamName kCostParamNames[] = {
    {&algo::CostParams::alphaUs, "SIGNLION_COST_ALPHA_NS", 1e3},
    {&algo::CostParams::betaBytesPerUs, "SIGNLION_COST_BETA_MBPS", 1},
    {&algo::CostParams::gammaUsPerPlane, "SIGNLION_COST_GAMMA_PS", 1e6},
    {&algo::CostParams::intraAlphaUs, "SIGNLION_COST_INTRA_ALPHA_NS", 1e3},
    {&algo::CostParams::intraBetaBytesPerUs, "SIGNLION_COST_INTRA_BETA_MBPS", 1},
    {&algo::CostParams::packUsPerElement, "SIGNLION_COST_PACK_PS", 1e6},
    {&algo::CostParams::decideUsPerElement, "SIGNLION_COST_DECIDE_PS", 1e6}};
constexpr int kCompareCostParams = (int)(sizeof(kCostParamNames) / sizeof(kCostParamNames[0]));

int firstCostDifference(const double* a, const double* b) {
  for (int i = 0; i < kCompareCostParams; i++)
    if (a[i] != b[i]) return i;
  return -1;
}

std::string costParamText(double modelValue, double scale) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.10g", modelValue * scale);
  return buf;
}

// SIGNLION_FIELD_BITS as a rank set it and what it gives: "4 (4-bit fields)",
// "0 (2-bit fields)", "1 (no field width for these ranks)".
std::string fieldBitsText(int64_t setting, int64_t bits) {
  std::string s = std::to_string(setting);
  return bits > 0 ? s + " (" + std::to_string(bits) + "-bit fields)" : s + " (no field width for these ranks)";
}

// The settings every rank must share, as one row of the init-time table.
struct Settings {
  int32_t algorithm, zeroRule, tieRule, resultCoding;
  int64_t segment, chunkBytes;
  // SIGNLION_FIELD_BITS as set, and the field width it gives field-sum on
  // these ranks (fieldBitsFor; 0: none, which also leaves field-sum out of
  // auto's choice). The width is compared: it sets the words on the wire.
  int64_t fieldBitsSetting, fieldBits;
  double costParams[kCompareCostParams];
  uint64_t hostHash;  // not compared: the rank's node
};

}  // namespace

size_t settingsRowBytes() { return sizeof(Settings); }

ncclResult_t checkSettingsAgree(Bootstrap& bootstrap, const ResolvedConfig& config, const algo::CostParams& cost,
                                algo::Topology* topology) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  std::vector<Settings> table(nranks);
  Settings& me = table[rank];
  memset(&me, 0, sizeof(me));
  me.algorithm = config.algorithm;
  me.zeroRule = config.zeroRule;
  me.tieRule = config.tieRule;
  me.resultCoding = algo::resultCodingEnabled() ? 1 : 0;
  me.segment = (int64_t)hostSegmentElements();
  me.chunkBytes = hostChunkBytes();
  me.fieldBitsSetting = algo::fieldBitsSetting();
  me.fieldBits = algo::fieldBitsFor(me.fieldBitsSetting, nranks);
  for (int i = 0; i < kCompareCostParams; i++) me.costParams[i] = cost.*kCostParamNames[i].field;
  me.hostHash = algo::hostIdHash(config.hostId);
  NCCLCHECK(bootstrap.allGather(table.data(), sizeof(Settings)));
  return compareSettingsRows(table.data(), nranks, rank, topology);
}

ncclResult_t compareSettingsRows(const void* rows, int nranks, int rank, algo::Topology* topology) {
  // The rows came from the peers as bytes: copied out, never read in place.
  std::vector<Settings> table(nranks);
  if (nranks > 0) memcpy(table.data(), rows, nranks * sizeof(Settings));
  std::vector<uint64_t> hashes;
  for (const Settings& s : table) hashes.push_back(s.hostHash);
  *topology = algo::topologyFromHostHashes(hashes);
  // Every rank reads the same table: every rank fails, each naming the first
  // rank that differs from rank 0.
  static const char* kFn = "ncclSignCommInitRank";
  const Settings& r0 = table[0];
  for (int r = 1; r < nranks; r++) {
    const Settings& o = table[r];
    const char* what = nullptr;
    std::string a, b;
    if (o.algorithm != r0.algorithm) {
      what = "algorithm (config->algorithm or SIGNLION_ALGO)";
      a = algoName(o.algorithm);
      b = algoName(r0.algorithm);
    } else if (o.zeroRule != r0.zeroRule) {
      what = "zero rule (config->zeroRule)";
      a = zeroRuleName(o.zeroRule);
      b = zeroRuleName(r0.zeroRule);
    } else if (o.tieRule != r0.tieRule) {
      what = "tie rule (config->tieRule)";
      a = tieRuleName(o.tieRule);
      b = tieRuleName(r0.tieRule);
    } else if (o.resultCoding != r0.resultCoding) {
      what = "SIGNLION_RESULT_CODING";
      a = num((uint64_t)o.resultCoding);
      b = num((uint64_t)r0.resultCoding);
    } else if (o.fieldBits != r0.fieldBits) {
      // Both widths, or one rank with none, would cut the votes into other
      // words than its peers add: wrong sums, or other byte counts.
      what = "SIGNLION_FIELD_BITS";
      a = fieldBitsText(o.fieldBitsSetting, o.fieldBits);
      b = fieldBitsText(r0.fieldBitsSetting, r0.fieldBits);
    } else if (o.segment != r0.segment) {
      what = "SIGNLION_HOST_SEGMENT (elements, in whole blocks of 64)";
      a = num((uint64_t)o.segment);
      b = num((uint64_t)r0.segment);
    } else if (int i = firstCostDifference(o.costParams, r0.costParams); i >= 0) {
      // Before the chunk, which follows SIGNLION_COST_BETA_MBPS when unset.
      what = kCostParamNames[i].env;
      a = costParamText(o.costParams[i], kCostParamNames[i].scale);
      b = costParamText(r0.costParams[i], kCostParamNames[i].scale);
    } else if (o.chunkBytes != r0.chunkBytes) {
      what = "SIGNLION_HOST_CHUNK_BYTES (or, where it is unset, the chunk SIGNLION_COST_BETA_MBPS gives)";
      a = num((uint64_t)o.chunkBytes);
      b = num((uint64_t)r0.chunkBytes);
    }
    if (what != nullptr) {
      WARN("%s: rank %d set %s %s, rank 0 set %s: every rank must set the same (seen by rank %d)", kFn, r, what,
           a.c_str(), b.c_str(), rank);
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
