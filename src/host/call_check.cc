#include "host/call_check.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/checks.h"
#include "host/host_params.h"

namespace signlion {
namespace host {

namespace {
std::string num(uint64_t v) { return std::to_string(v); }
}  // namespace

ncclResult_t CallCheck::init(const Net& net, const Links& links, int rank, int nranks) {
  rank_ = rank;
  nranks_ = nranks;
  void* p = nullptr;
  SYSCHECKRET(posix_memalign(&p, 64, sizeof(CallHeader) * (nranks + 1)), "posix_memalign");
  buf_ = static_cast<char*>(p);
  for (int i = 0; i <= nranks; i++) new (slot(i)) CallHeader();
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
  slot(nranks_)->magic = CallHeader::kMagic;
  slot(nranks_)->sig = mine;
  slot(nranks_)->sig.rank = rank_;
  run_++;
}

void CallCheck::sendAlone(Transfers& t, void* comm) { t.send(comm, slot(nranks_), kHeaderBytes, mhandle(comm)); }

void CallCheck::recvAlone(Transfers& t, int peer, void* comm) {
  *slot(peer) = CallHeader();
  slot(peer)->magic = 0;
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

ncclResult_t CallCheck::verify(int peer, const void* msg, size_t size, size_t payloadBytes, const char* fn) const {
  CallHeader o;
  o.magic = 0;
  if (size >= kHeaderBytes) memcpy(&o, msg != nullptr ? msg : slot(peer), kHeaderBytes);
  if (o.magic != CallHeader::kMagic || o.sig.rank != peer) {
    WARN("%s: call %" PRIu64
         ": rank %d received a message from rank %d that does not start a call (%zu bytes): "
         "the ranks are not in the same call (a message of an earlier, failed call, or another collective)",
         fn, mine().seq, rank_, peer, size);
    return ncclInvalidUsage;
  }
  NCCLCHECK(compareSignatures(o.sig, mine(), fn));
  if (size != kHeaderBytes + payloadBytes) {
    WARN("%s: call %" PRIu64 ": rank %d sent rank %d %zu bytes where %zu were due, with the same signature", fn,
         mine().seq, peer, rank_, size - kHeaderBytes, payloadBytes);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
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

// The settings every rank must share, as one row of the init-time table.
struct Settings {
  int32_t algorithm, zeroRule, tieRule, pad;
  int64_t segment, chunkBytes;
  double costParams[kCompareCostParams];
  uint64_t hostHash;  // not compared: the rank's node
};

}  // namespace

ncclResult_t checkSettingsAgree(Bootstrap& bootstrap, const ResolvedConfig& config,
                                const double costParams[kCompareCostParams], algo::Topology* topology) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  std::vector<Settings> table(nranks);
  Settings& me = table[rank];
  memset(&me, 0, sizeof(me));
  me.algorithm = config.algorithm;
  me.zeroRule = config.zeroRule;
  me.tieRule = config.tieRule;
  me.segment = signlionParamHostSegment();
  me.chunkBytes = hostChunkBytes();
  for (int i = 0; i < kCompareCostParams; i++) me.costParams[i] = costParams[i];
  me.hostHash = algo::hostIdHash(config.hostId);
  NCCLCHECK(bootstrap.allGather(table.data(), sizeof(Settings)));
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
      a = algoName((ncclSignAlgo_t)o.algorithm);
      b = algoName((ncclSignAlgo_t)r0.algorithm);
    } else if (o.zeroRule != r0.zeroRule) {
      what = "zero rule (config->zeroRule)";
      a = zeroRuleName(o.zeroRule);
      b = zeroRuleName(r0.zeroRule);
    } else if (o.tieRule != r0.tieRule) {
      what = "tie rule (config->tieRule)";
      a = tieRuleName(o.tieRule);
      b = tieRuleName(r0.tieRule);
    } else if (o.segment != r0.segment) {
      what = "SIGNLION_HOST_SEGMENT";
      a = num((uint64_t)o.segment);
      b = num((uint64_t)r0.segment);
    } else if (o.chunkBytes != r0.chunkBytes) {
      what = "SIGNLION_HOST_CHUNK_BYTES";
      a = num((uint64_t)o.chunkBytes);
      b = num((uint64_t)r0.chunkBytes);
    } else if (memcmp(o.costParams, r0.costParams, sizeof(o.costParams)) != 0) {
      what =
          "cost model (SIGNLION_COST_ALPHA_NS, _BETA_MBPS, _GAMMA_PS, _INTRA_ALPHA_NS, _INTRA_BETA_MBPS, _PACK_PS, "
          "_DECIDE_PS)";
      for (int i = 0; i < kCompareCostParams; i++) {
        a += (i ? "/" : "") + std::to_string(o.costParams[i]);
        b += (i ? "/" : "") + std::to_string(r0.costParams[i]);
      }
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
