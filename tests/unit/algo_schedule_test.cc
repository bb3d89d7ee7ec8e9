// algo/: every schedule, run by a simulated executor over N simulated ranks
// that hold plain integer counts, must leave the reference result on every
// rank; sends and receives must pair up; the wire cost must match DESIGN.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "algo/schedule.h"
#include "algo/tree.h"
#include "bits/trits.h"
#include "common/config.h"
#include "common/node_layouts.h"
#include "common/param.h"

namespace signlion {
namespace algo {
namespace {

// The decided result's planes as the wire formulas below count them, written
// out rather than taken from resultPlanes(): width(N) per counter for
// average; 2 for exact ties at even N or in ternary mode; 1 with a tie rule
// or at odd N.
int formulaResultPlanes(const OpSpec& spec, int n) {
  const int counters = spec.zeroRule == ncclSignZeroAbstain ? 2 : 1;
  if (spec.op == ncclSignAverage) return counters * (int)std::floor(std::log2(n) + 1);
  const bool tieRule = spec.tieRule != ncclSignTieZero;
  return !tieRule && (counters == 2 || n % 2 == 0) ? 2 : 1;
}

// Whether the result travels coded (bits/trits.h: two majority planes as
// 1.6 bits per element).
bool formulaResultCoded(const OpSpec& spec, int n) {
  return spec.op == ncclSignMajority && formulaResultPlanes(spec, n) == 2;
}

// f(spec, n, what) for every op, zero and tie rule at N = 2..16.
template <typename F>
void forEveryRuleUpTo16Ranks(F&& f) {
  for (int op = 0; op < ncclSignNumOps; op++)
    for (int zr = 0; zr < ncclSignNumZeroRules; zr++)
      for (int tr = 0; tr < ncclSignNumTieRules; tr++)
        for (int n = 2; n <= 16; n++) {
          const OpSpec spec{static_cast<ncclSignOp_t>(op), static_cast<ncclSignZeroRule_t>(zr),
                            static_cast<ncclSignTieRule_t>(tr)};
          f(spec, n,
            "N=" + std::to_string(n) + " op " + std::to_string(op) + " zero " + std::to_string(zr) + " tie " +
                std::to_string(tr));
        }
}

// Hierarchical with an unknown topology (every rank its own node) here; over
// real node layouts in the AlgoHierarchical tests.
constexpr ncclSignAlgo_t kAlgos[] = {ncclSignAlgoRing,     ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                                     ncclSignAlgoFieldSum, ncclSignAlgoHierarchical,    ncclSignAlgoDirect,
                                     ncclSignAlgoTree};

std::vector<Schedule> buildAll(ncclSignAlgo_t algo, int n, int64_t nblocks, const OpSpec& spec,
                               const Topology* topo = nullptr) {
  std::vector<Schedule> all(n);
  for (int r = 0; r < n; r++) EXPECT_EQ(buildSchedule(algo, n, r, nblocks, spec, &all[r], topo), ncclSuccess);
  return all;
}

// The reference: sign or sum of the true votes, per element.
int64_t referenceResult(const OpSpec& spec, int64_t sum) {
  if (spec.op == ncclSignAverage) return sum;
  if (sum > 0) return 1;
  if (sum < 0) return -1;
  return spec.tieRule == ncclSignTiePositive ? 1 : spec.tieRule == ncclSignTieNegative ? -1 : 0;
}

// Runs schedules step by step. Ranks hold per-element integers; the field
// buffer holds real uint64 words so a carry between fields would show. Every
// value that travels is checked against, and truncated to, its declared
// width, so an under-declared width fails twice: here and in the result.
class Simulator {
 public:
  Simulator(const std::vector<Schedule>& sch, const std::vector<std::vector<int>>& votes, int64_t count)
      : sch_(sch), votes_(votes), count_(count) {
    const Schedule& s0 = sch[0];
    n_ = s0.nranks;
    spec_ = s0.spec;
    elems_ = s0.nblocks * kBlockElems;
    ternary_ = s0.counters == 2;
    ranks_.resize(n_);
    for (RankState& st : ranks_) {
      st.cP.assign(elems_, -1);
      st.cM.assign(elems_, -1);
      st.res.assign(elems_, 0);
      st.hasRes.assign(elems_, 0);
      st.vP.assign(s0.voteSlots, std::vector<int8_t>(elems_, -1));
      st.vM = st.vP;
      st.fields.assign(s0.fieldWords * s0.counters, 0);
    }
  }

  // Returns false (with gtest failures) on any inconsistency.
  void run() {
    size_t nsteps = sch_[0].steps.size();
    for (const Schedule& s : sch_) ASSERT_EQ(s.steps.size(), nsteps) << "ranks disagree on the step count";
    for (size_t i = 0; i < nsteps; i++) {
      for (int r = 0; r < n_; r++)
        for (const Local& l : sch_[r].steps[i].locals) runLocal(r, l);
      checkHazards(i);
      bool any = false;
      for (int r = 0; r < n_; r++) any = any || !sch_[r].steps[i].sends.empty();
      for (int r = 0; r < n_; r++)
        ASSERT_EQ(sch_[r].steps[i].anyRankCommunicates, any) << "step " << i << " rank " << r;
      // Every send reads the state after the locals; then all receives apply.
      struct Delivery {
        int to;
        size_t recv;
        Payload data;
      };
      std::vector<Delivery> deliveries;
      std::vector<std::vector<int>> used(n_);
      for (int r = 0; r < n_; r++) used[r].assign(sch_[r].steps[i].recvs.size(), 0);
      for (int r = 0; r < n_; r++) {
        for (const Send& snd : sch_[r].steps[i].sends) {
          ASSERT_TRUE(snd.peer >= 0 && snd.peer < n_ && snd.peer != r) << "step " << i << " rank " << r;
          ASSERT_GT(snd.bytes(), 0) << "zero-byte send, step " << i << " rank " << r;
          const auto& recvs = sch_[snd.peer].steps[i].recvs;
          size_t j = 0;
          for (; j < recvs.size(); j++) {
            const Recv& rc = recvs[j];
            if (!used[snd.peer][j] && rc.peer == r && rc.buf == snd.buf && rc.slot == snd.slot &&
                rc.range == snd.range && rc.planes == snd.planes && rc.bytes() == snd.bytes())
              break;
          }
          ASSERT_LT(j, recvs.size()) << "send of rank " << r << " to " << snd.peer << " in step " << i
                                     << " has no matching receive";
          used[snd.peer][j] = 1;
          deliveries.push_back({snd.peer, j, read(r, snd)});
        }
      }
      for (int r = 0; r < n_; r++)
        for (size_t j = 0; j < used[r].size(); j++)
          ASSERT_TRUE(used[r][j]) << "receive " << j << " of rank " << r << " in step " << i << " has no send";
      for (const Delivery& d : deliveries) apply(d.to, sch_[d.to].steps[i].recvs[d.recv], d.data);
    }
  }

  void checkResults() const {
    std::vector<int64_t> want(static_cast<size_t>(count_), 0);  // once, not per rank: N up to 4096
    for (int q = 0; q < n_; q++)
      for (int64_t e = 0; e < count_; e++) want[e] += votes_[q][e];
    for (int64_t& w : want) w = referenceResult(spec_, w);
    for (int r = 0; r < n_; r++) {
      int64_t bad = 0, first = -1;
      for (int64_t e = 0; e < count_; e++) {
        bool ok = ranks_[r].hasRes[e] && decode(ranks_[r].res[e]) == want[e];
        if (!ok && bad++ == 0) first = e;
      }
      EXPECT_EQ(bad, 0) << "rank " << r << ": " << bad << " wrong results, first at element " << first;
    }
  }

 private:
  struct RankState {
    std::vector<int64_t> cP, cM;  // counter; -1 = never written
    std::vector<uint64_t> res;    // result code, resultPlanes bits
    std::vector<char> hasRes;
    std::vector<std::vector<int8_t>> vP, vM;  // vote slots; -1 = never written
    std::vector<uint64_t> fields;             // counters planes of fieldWords words
  };
  struct Payload {
    std::vector<int64_t> a, b;  // counters, votes: P and M per element
    std::vector<uint64_t> codes, words;
  };

  int64_t elemBegin(const Range& r) const { return std::min(r.begin * kBlockElems, elems_); }
  int64_t elemEnd(const Range& r) const { return std::min(r.end * kBlockElems, elems_); }

  // Checks 0 <= v <= maxCount and v < 2^width, then truncates to width bits.
  int64_t fit(int64_t v, int64_t maxCount, int width, const char* what) const {
    if (__builtin_expect(v >= 0 && v <= maxCount && v < (int64_t{1} << width), 1)) return v;
    return misfit(v, maxCount, width, what);
  }
  __attribute__((noinline)) int64_t misfit(int64_t v, int64_t maxCount, int width, const char* what) const {
    EXPECT_GE(v, 0) << what << ": value never written";
    EXPECT_LE(v, maxCount) << what << ": count above the declared maximum";
    EXPECT_LT(v, int64_t{1} << width) << what << ": count does not fit the declared width " << width;
    return v & ((int64_t{1} << width) - 1);
  }

  int64_t packedP(int r, int64_t e) const { return e < count_ && votes_[r][e] > 0 ? 1 : 0; }
  int64_t packedM(int r, int64_t e) const { return ternary_ && e < count_ && votes_[r][e] < 0 ? 1 : 0; }

  uint64_t field(const RankState& st, int c, int64_t e) const {
    const Schedule& s = sch_[0];
    uint64_t w = st.fields[c * s.fieldWords + e / s.fieldsPerWord];
    return (w >> ((e % s.fieldsPerWord) * s.fieldBits)) & ((uint64_t{1} << s.fieldBits) - 1);
  }

  uint64_t encode(int64_t p, int64_t m) const {
    const Schedule& s = sch_[0];
    if (spec_.op == ncclSignAverage) return ternary_ ? uint64_t(p) | uint64_t(m) << counterWidth(n_) : uint64_t(p);
    int64_t sum = ternary_ ? p - m : 2 * p - n_;
    int64_t d = referenceResult(spec_, sum);
    if (s.resultPlanes == 1) {
      EXPECT_NE(d, 0) << "a tie needs a second result plane, but resultPlanes is 1";
      return d > 0 ? 1 : 0;
    }
    return (d > 0 ? 1 : 0) | (d < 0 ? 2 : 0);
  }

  int64_t decode(uint64_t code) const {
    if (spec_.op == ncclSignAverage) {
      if (!ternary_) return 2 * int64_t(code) - n_;
      int w = counterWidth(n_);
      return int64_t(code & ((uint64_t{1} << w) - 1)) - int64_t(code >> w);
    }
    if (sch_[0].resultPlanes == 1) return code & 1 ? 1 : -1;
    return (code & 1) ? 1 : (code & 2) ? -1 : 0;
  }

  void runLocal(int r, const Local& l) {
    RankState& st = ranks_[r];
    const Schedule& s = sch_[r];
    ASSERT_TRUE(l.range.begin >= 0 && l.range.end <= s.nblocks) << "local range outside the message";
    if (l.op == LocalOp::kSumVotes) {
      sumVotes(st, s, l);
      return;
    }
    for (int64_t e = elemBegin(l.range); e < elemEnd(l.range); e++) {
      switch (l.op) {
        case LocalOp::kPackVotes:
          if (l.dst == Buffer::kVotes) {
            st.vP[l.slot][e] = static_cast<int8_t>(packedP(r, e));
            st.vM[l.slot][e] = static_cast<int8_t>(packedM(r, e));
          } else {
            st.cP[e] = packedP(r, e);
            st.cM[e] = packedM(r, e);
          }
          break;
        case LocalOp::kPackFields:
          for (int c = 0; c < s.counters; c++) {
            uint64_t v = c == 0 ? packedP(r, e) : packedM(r, e);
            st.fields[c * s.fieldWords + e / s.fieldsPerWord] |= v << ((e % s.fieldsPerWord) * s.fieldBits);
          }
          break;
        case LocalOp::kSumVotes:
          break;  // below, slot by slot
        case LocalOp::kDecide: {
          int64_t p, m = 0;
          if (l.src == Buffer::kFields) {
            p = fit(int64_t(field(st, 0, e)), l.maxCount, l.width, "decided field P");
            if (ternary_) m = fit(int64_t(field(st, 1, e)), l.maxCount, l.width, "decided field M");
          } else {
            p = fit(st.cP[e], l.maxCount, l.width, "decided counter P");
            if (ternary_) m = fit(st.cM[e], l.maxCount, l.width, "decided counter M");
          }
          uint64_t code = encode(p, m);
          EXPECT_LT(code, uint64_t{1} << s.resultPlanes) << "result does not fit resultPlanes";
          st.res[e] = code;
          st.hasRes[e] = 1;
          break;
        }
      }
    }
  }

  // Slot by slot, so the loops stay tight: this is N^2 work per element.
  void sumVotes(RankState& st, const Schedule& s, const Local& l) {
    const int64_t b = elemBegin(l.range), e = elemEnd(l.range);
    std::vector<int64_t> p(e - b, 0), m(e - b, 0);
    for (int q = 0; q < s.voteSlots; q++) {
      int8_t lo = 1, hi = 0;
      for (int64_t i = b; i < e; i++) {
        int8_t vp = st.vP[q][i], vm = st.vM[q][i];
        lo = std::min({lo, vp, vm});
        hi = std::max({hi, vp, vm});
        p[i - b] += vp;
        m[i - b] += vm;
      }
      EXPECT_TRUE(b == e || (lo >= 0 && hi <= 1)) << "vote slot " << q << " incomplete or wider than 1 bit";
    }
    for (int64_t i = b; i < e; i++) {
      st.cP[i] = fit(p[i - b], l.maxCount, l.width, "summed votes P");
      st.cM[i] = ternary_ ? fit(m[i - b], l.maxCount, l.width, "summed votes M") : 0;
    }
  }

  Payload read(int r, const Send& snd) {
    const RankState& st = ranks_[r];
    const Schedule& s = sch_[r];
    Payload p;
    if (snd.buf == Buffer::kFields) {
      EXPECT_TRUE(snd.range.begin >= 0 && snd.range.end <= s.fieldWords) << "field range outside the message";
      EXPECT_EQ(snd.planes, s.counters);
      for (int c = 0; c < s.counters; c++)
        for (int64_t w = snd.range.begin; w < snd.range.end; w++) {
          for (int f = 0; f < s.fieldsPerWord; f++) {
            int64_t e = w * s.fieldsPerWord + f;
            if (e < elems_) fit(int64_t(field(st, c, e)), snd.maxCount, s.fieldBits, "sent field");
          }
          p.words.push_back(st.fields[c * s.fieldWords + w]);
        }
      return p;
    }
    EXPECT_TRUE(snd.range.begin >= 0 && snd.range.end <= s.nblocks) << "block range outside the message";
    if (snd.buf == Buffer::kResult) {
      EXPECT_EQ(snd.planes, s.resultPlanes);
    } else {
      EXPECT_EQ(snd.planes, s.counters * snd.width);
    }
    const size_t len = static_cast<size_t>(elemEnd(snd.range) - elemBegin(snd.range));
    p.a.reserve(len);
    p.b.reserve(len);
    p.codes.reserve(len);
    for (int64_t e = elemBegin(snd.range); e < elemEnd(snd.range); e++) {
      switch (snd.buf) {
        case Buffer::kCounter:
        case Buffer::kVotes: {
          const bool v = snd.buf == Buffer::kVotes;
          int64_t P = v ? st.vP[snd.slot][e] : st.cP[e], M = v ? st.vM[snd.slot][e] : st.cM[e];
          p.a.push_back(fit(P, snd.maxCount, snd.width, "sent P"));
          p.b.push_back(ternary_ ? fit(M, snd.maxCount, snd.width, "sent M") : 0);
          break;
        }
        case Buffer::kResult:
          if (!st.hasRes[e]) ADD_FAILURE() << "rank " << r << " sends a result it does not have";
          p.codes.push_back(st.res[e] & ((uint64_t{1} << snd.planes) - 1));
          break;
        case Buffer::kFields:
          break;
      }
    }
    return p;
  }

  void apply(int r, const Recv& rc, const Payload& p) {
    RankState& st = ranks_[r];
    const Schedule& s = sch_[r];
    if (rc.buf == Buffer::kFields) {
      size_t i = 0;
      for (int c = 0; c < s.counters; c++)
        for (int64_t w = rc.range.begin; w < rc.range.end; w++, i++) {
          uint64_t& dst = st.fields[c * s.fieldWords + w];
          dst = rc.op == RecvOp::kSumWords ? dst + p.words[i] : p.words[i];
        }
      EXPECT_TRUE(rc.op == RecvOp::kSumWords || rc.op == RecvOp::kStore);
      return;
    }
    EXPECT_EQ(rc.op, rc.buf == Buffer::kCounter ? RecvOp::kAdd : RecvOp::kStore);
    if (rc.buf == Buffer::kCounter) {
      EXPECT_LE(rc.resultWidth, s.counterWidth) << "counter scratch too narrow";
      EXPECT_LE(rc.resultMax, s.counterMax);
    }
    size_t i = 0;
    for (int64_t e = elemBegin(rc.range); e < elemEnd(rc.range); e++, i++) {
      if (rc.buf == Buffer::kResult) {
        st.res[e] = p.codes[i];
        st.hasRes[e] = 1;
      } else if (rc.buf == Buffer::kVotes) {
        st.vP[rc.slot][e] = static_cast<int8_t>(p.a[i]);
        st.vM[rc.slot][e] = static_cast<int8_t>(p.b[i]);
      } else {
        int64_t p0 = fit(st.cP[e], rc.localMax, rc.localWidth, "counter P before add");
        st.cP[e] = fit(p0 + p.a[i], rc.resultMax, rc.resultWidth, "counter P after add");
        if (ternary_) {
          int64_t m0 = fit(st.cM[e], rc.localMax, rc.localWidth, "counter M before add");
          st.cM[e] = fit(m0 + p.b[i], rc.resultMax, rc.resultWidth, "counter M after add");
        }
      }
    }
  }

  // Within a step no rank may write a range it also sends, nor receive into
  // one range twice (two adds in one step would have no order).
  void checkHazards(size_t i) const {
    for (int r = 0; r < n_; r++) {
      const Step& st = sch_[r].steps[i];
      for (size_t a = 0; a < st.recvs.size(); a++)
        for (size_t b = a + 1; b < st.recvs.size(); b++)
          if (st.recvs[a].buf == st.recvs[b].buf && st.recvs[a].slot == st.recvs[b].slot) {
            EXPECT_TRUE(st.recvs[a].range.end <= st.recvs[b].range.begin ||
                        st.recvs[b].range.end <= st.recvs[a].range.begin)
                << "rank " << r << " step " << i << " receives into the same range twice";
          }
      for (const Send& snd : st.sends)
        for (const Recv& rc : st.recvs)
          if (snd.buf == rc.buf && snd.slot == rc.slot) {
            EXPECT_TRUE(snd.range.end <= rc.range.begin || rc.range.end <= snd.range.begin)
                << "rank " << r << " step " << i << " sends and overwrites the same range";
          }
    }
  }

  const std::vector<Schedule>& sch_;
  const std::vector<std::vector<int>>& votes_;
  int64_t count_;
  int n_ = 0;
  OpSpec spec_;
  int64_t elems_ = 0;
  bool ternary_ = false;
  std::vector<RankState> ranks_;
};

// Random input in {-1, 0, +1}; zeros are mapped by the zero rule as the pack
// kernel maps them (they stay 0 only in ternary mode).
std::vector<std::vector<int>> randomVotes(int n, int64_t count, const OpSpec& spec, std::mt19937_64& rng) {
  std::vector<std::vector<int>> v(n, std::vector<int>(count));
  for (auto& rank : v)
    for (int& x : rank) {
      x = static_cast<int>(rng() % 3) - 1;
      if (x == 0 && spec.zeroRule == ncclSignZeroPositive) x = 1;
      if (x == 0 && spec.zeroRule == ncclSignZeroNegative) x = -1;
    }
  return v;
}

class AlgoSimulation : public ::testing::TestWithParam<ncclSignAlgo_t> {};

TEST_P(AlgoSimulation, EveryRankGetsTheReferenceResult) {
  const ncclSignAlgo_t algo = GetParam();
  std::mt19937_64 rng(1234 + algo);
  for (int n = 1; n <= 16; n++) {
    for (int64_t nblocks : {0, 1, 2, 3, 7, 16, 17, 100}) {
      for (int op = 0; op < ncclSignNumOps; op++) {
        for (int zr = 0; zr < ncclSignNumZeroRules; zr++) {
          for (int tr = 0; tr < ncclSignNumTieRules; tr++) {
            OpSpec spec{static_cast<ncclSignOp_t>(op), static_cast<ncclSignZeroRule_t>(zr),
                        static_cast<ncclSignTieRule_t>(tr)};
            // A partial last block: its unused bits are zero on every rank.
            int64_t count = nblocks == 0 ? 0 : (nblocks - 1) * kBlockElems + 1 + int64_t(rng() % kBlockElems);
            SCOPED_TRACE(std::string(algoName(algo)) + " N=" + std::to_string(n) + " nblocks=" +
                         std::to_string(nblocks) + " count=" + std::to_string(count) + " op=" + std::to_string(op) +
                         " zeroRule=" + std::to_string(zr) + " tieRule=" + std::to_string(tr));
            std::vector<Schedule> sch = buildAll(algo, n, nblocks, spec);
            auto votes = randomVotes(n, count, spec, rng);
            Simulator sim(sch, votes, count);
            sim.run();
            if (HasFatalFailure() || HasFailure()) return;
            sim.checkResults();
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, AlgoSimulation, ::testing::ValuesIn(kAlgos),
                         [](const ::testing::TestParamInfo<ncclSignAlgo_t>& info) {
                           return std::string(algoName(info.param));
                         });

// Sends and receives pair up step by step with equal bytes, over more rank
// counts than the simulation covers; bytes sent equal bytes received overall.
TEST(AlgoSchedule, SendsAndReceivesMatchAcrossRanks) {
  OpSpec spec;
  for (ncclSignAlgo_t algo : kAlgos)
    for (int n : {1, 2, 3, 5, 6, 7, 9, 12, 13, 24, 31, 32, 33}) {
      for (int64_t nblocks : {int64_t{0}, int64_t{5}, int64_t{1000}}) {
        SCOPED_TRACE(std::string(algoName(algo)) + " N=" + std::to_string(n) + " nblocks=" + std::to_string(nblocks));
        std::vector<Schedule> sch = buildAll(algo, n, nblocks, spec);
        int64_t sent = 0, received = 0;
        for (size_t i = 0; i < sch[0].steps.size(); i++) {
          struct Msg {
            int from, to, buf, slot;
            int64_t begin, end, bytes;
            bool operator<(const Msg& o) const {
              return std::tie(from, to, buf, slot, begin, end, bytes) <
                     std::tie(o.from, o.to, o.buf, o.slot, o.begin, o.end, o.bytes);
            }
            bool operator==(const Msg& o) const { return !(*this < o) && !(o < *this); }
          };
          std::vector<Msg> sends, recvs;
          for (int r = 0; r < n; r++) {
            ASSERT_EQ(sch[r].steps.size(), sch[0].steps.size());
            for (const Send& s : sch[r].steps[i].sends)
              sends.push_back({r, s.peer, int(s.buf), s.slot, s.range.begin, s.range.end, s.bytes()});
            for (const Recv& s : sch[r].steps[i].recvs)
              recvs.push_back({s.peer, r, int(s.buf), s.slot, s.range.begin, s.range.end, s.bytes()});
            sent += sch[r].steps[i].bytesSent();
            received += sch[r].steps[i].bytesReceived();
          }
          std::sort(sends.begin(), sends.end());
          std::sort(recvs.begin(), recvs.end());
          EXPECT_TRUE(sends == recvs) << "step " << i;
        }
        EXPECT_EQ(sent, received);
        if (n == 1 || nblocks == 0) {
          EXPECT_EQ(sent, 0);
        }
      }
    }
}

// Bits per element sent by each rank for a large message, against the table
// in DESIGN.md (majority, exact ties, N = 4, 8, 16), to the table's rounding.
TEST(AlgoSchedule, WireCostMatchesDesignTable) {
  struct Row {
    int n;
    double ring, hd, allgather, fieldsumIdeal, fp32, direct, directTieRule;
  };
  // The result travels coded, 1.6 bits per element (bits/trits.h), where it can be -1/0/+1.
  const Row table[] = {{4, 2.45, 2.20, 3, 4.5, 48, 1.95, 1.50},
                       {8, 3.525, 2.775, 7, 7.0, 56, 2.275, 1.75},
                       {16, 4.5625, 3.125, 15, 9.4, 60, 2.44, 1.88}};
  // Half a unit in the table's last digit (a few entries have fewer digits).
  auto near = [](double got, double table, double halfUlp) { return std::fabs(got - table) <= halfUlp + 1e-9; };
  const int64_t nblocks = int64_t{1} << 16;
  auto bitsPerElem = [&](ncclSignAlgo_t algo, int n, const OpSpec& sp = OpSpec()) {
    double worst = 0;
    for (int r = 0; r < n; r++) {
      Schedule s;
      EXPECT_EQ(buildSchedule(algo, n, r, nblocks, sp, &s), ncclSuccess);
      worst = std::max(worst, 8.0 * s.bytesSent() / double(nblocks * kBlockElems));
    }
    return worst;
  };
  for (const Row& row : table) {
    SCOPED_TRACE("N=" + std::to_string(row.n));
    const int n = row.n;
    EXPECT_PRED3(near, bitsPerElem(ncclSignAlgoRing, n), row.ring, 0.005);
    EXPECT_PRED3(near, bitsPerElem(ncclSignAlgoHalvingDoubling, n), row.hd, 0.005);
    EXPECT_PRED3(near, bitsPerElem(ncclSignAlgoAllGather, n), row.allgather, 0.005);
    // The table's field-sum column is the ideal 2(N-1)/N * width(N). Fields do
    // not straddle words, so the schedule sends 64/floor(64/width(N)) bits per
    // field instead: equal for N = 8, a little more for N = 4 and 16.
    double ring = 2.0 * (n - 1) / n;
    EXPECT_PRED3(near, ring * counterWidth(n), row.fieldsumIdeal, 0.05);
    EXPECT_NEAR(bitsPerElem(ncclSignAlgoFieldSum, n), ring * 64.0 / (64 / counterWidth(n)), 1e-3);
    EXPECT_PRED3(near, ring * 32, row.fp32, 0.005);  // fp32 ring all-reduce
    EXPECT_PRED3(near, bitsPerElem(ncclSignAlgoDirect, n), row.direct, 0.005);
    OpSpec tieRule;
    tieRule.tieRule = ncclSignTiePositive;
    EXPECT_PRED3(near, bitsPerElem(ncclSignAlgoDirect, n, tieRule), row.directTieRule, 0.005);
  }
}

// Result planes and widths, the two rules everything else is built on.
TEST(AlgoSchedule, WidthAndResultPlaneRules) {
  // counterWidth is bits::widthFor (tested with the bit algebra) over int64.
  EXPECT_EQ(counterWidth(-1), 1);
  EXPECT_EQ(counterWidth(int64_t{1} << 40), 41);
  const auto M = ncclSignMajority, A = ncclSignAverage;
  const auto zp = ncclSignZeroPositive, za = ncclSignZeroAbstain;
  EXPECT_EQ(resultPlanes(M, zp, ncclSignTieZero, 4), 2);
  EXPECT_EQ(resultPlanes(M, zp, ncclSignTieZero, 5), 1);
  EXPECT_EQ(resultPlanes(M, za, ncclSignTieZero, 5), 2);
  EXPECT_EQ(resultPlanes(M, za, ncclSignTiePositive, 4), 1);
  EXPECT_EQ(resultPlanes(M, ncclSignZeroNegative, ncclSignTieNegative, 8), 1);
  EXPECT_EQ(resultPlanes(A, zp, ncclSignTieZero, 8), 4);
  EXPECT_EQ(resultPlanes(A, za, ncclSignTieZero, 8), 8);
  EXPECT_EQ(resultPlanes(A, zp, ncclSignTiePositive, 1), 1);
  EXPECT_EQ(blocksForCount(0), 0);
  EXPECT_EQ(blocksForCount(1), 1);
  EXPECT_EQ(blocksForCount(64), 1);
  EXPECT_EQ(blocksForCount(65), 2);
  // Shards cover the range in order, balanced, empty when there are too few.
  for (int64_t count : {0, 3, 10, 1000})
    for (int parts : {1, 3, 7, 16}) {
      int64_t at = 0;
      for (int i = 0; i < parts; i++) {
        Range r = shardRange(count, parts, i);
        EXPECT_EQ(r.begin, at);
        EXPECT_LE(r.size(), count / parts + 1);
        EXPECT_GE(r.size(), count / parts);
        at = r.end;
      }
      EXPECT_EQ(at, count);
    }
}

// Widths grow as the ring accumulates; halving-doubling's fold sizes scratch.
TEST(AlgoSchedule, WidthsGrowAndScratchIsDeclared) {
  OpSpec spec;
  Schedule s;
  ASSERT_EQ(buildSchedule(ncclSignAlgoRing, 8, 3, 800, spec, &s), ncclSuccess);
  std::vector<int> widths;
  for (const Step& st : s.steps)
    for (const Send& snd : st.sends)
      if (snd.buf == Buffer::kCounter) widths.push_back(snd.width);
  EXPECT_EQ(widths, (std::vector<int>{1, 2, 2, 3, 3, 3, 3}));
  EXPECT_EQ(s.counterMax, 8);
  EXPECT_EQ(s.counterWidth, 4);
  EXPECT_EQ(s.counterBytes(), 8 * 800 * 4);
  EXPECT_EQ(s.messageSteps(), 14);

  OpSpec ternary;
  ternary.zeroRule = ncclSignZeroAbstain;
  Schedule t;
  ASSERT_EQ(buildSchedule(ncclSignAlgoRing, 8, 3, 800, ternary, &t), ncclSuccess);
  EXPECT_EQ(t.counters, 2);
  EXPECT_EQ(t.steps[0].sends[0].planes, 2);  // both counters travel

  // N = 6: core of 4, ranks 4 and 5 fold into 0 and 1.
  Schedule extra, partner;
  ASSERT_EQ(buildSchedule(ncclSignAlgoHalvingDoubling, 6, 5, 64, spec, &extra), ncclSuccess);
  ASSERT_EQ(buildSchedule(ncclSignAlgoHalvingDoubling, 6, 1, 64, spec, &partner), ncclSuccess);
  EXPECT_EQ(extra.messageSteps(), 2);  // fold, unfold
  EXPECT_EQ(extra.steps.front().sends.at(0).peer, 1);
  EXPECT_EQ(extra.steps.back().recvs.at(0).peer, 1);
  EXPECT_EQ(partner.steps.front().recvs.at(0).resultMax, 2);
  EXPECT_EQ(partner.counterMax, 6);
  EXPECT_EQ(partner.messageSteps(), 6);  // fold, 2 halving, 2 doubling, unfold
}

// The direct schedule, step by step: in step k of each phase rank r sends to
// r+k and receives from r-k (so every rank receives from one peer per step),
// its own shard's counter holds exactly k+1 votes after the k-th add (the
// widths declared are the narrowest that hold them), every vote travels at
// one bit, and the owner decides its shard once, in the step that opens the
// all-gather, which sends that shard (and only it) to every other rank.
TEST(AlgoDirect, PairwiseStepsAndExactWidths) {
  for (int zr : {ncclSignZeroPositive, ncclSignZeroAbstain}) {
    OpSpec spec;
    spec.zeroRule = static_cast<ncclSignZeroRule_t>(zr);
    const int counters = countersPerValue(spec.zeroRule);
    for (int n = 1; n <= 16; n++) {
      const int64_t nblocks = 3 * n + 1;
      std::vector<Schedule> sch = buildAll(ncclSignAlgoDirect, n, nblocks, spec);
      for (int r = 0; r < n; r++) {
        const Schedule& s = sch[r];
        SCOPED_TRACE("N=" + std::to_string(n) + " rank " + std::to_string(r) + " zero=" + std::to_string(zr));
        auto shard = [&](int i) { return shardRange(nblocks, n, ((i % n) + n) % n); };
        ASSERT_EQ(s.steps.size(), n == 1 ? 2u : size_t(2 * (n - 1)));
        EXPECT_EQ(s.messageSteps(), 2 * (n - 1));
        EXPECT_EQ(s.counterMax, n);
        EXPECT_EQ(s.counterWidth, counterWidth(n));
        ASSERT_EQ(s.steps[0].locals.size(), 1u);
        EXPECT_EQ(s.steps[0].locals[0].op, LocalOp::kPackVotes);
        const size_t gather = n == 1 ? 1 : size_t(n - 1);  // the step that decides
        ASSERT_EQ(s.steps[gather].locals.size(), 1u);
        const Local& d = s.steps[gather].locals[0];
        EXPECT_EQ(d.op, LocalOp::kDecide);
        EXPECT_TRUE(d.range == shard(r));
        EXPECT_EQ(d.maxCount, n);
        EXPECT_EQ(d.width, counterWidth(n));
        for (int k = 1; k < n; k++) {
          const Step& rs = s.steps[k - 1];
          ASSERT_EQ(rs.sends.size(), 1u);
          ASSERT_EQ(rs.recvs.size(), 1u);
          const Send& snd = rs.sends[0];
          const Recv& rcv = rs.recvs[0];
          EXPECT_EQ(snd.peer, (r + k) % n);
          EXPECT_EQ(snd.buf, Buffer::kCounter);
          EXPECT_TRUE(snd.range == shard(r + k));
          EXPECT_EQ(snd.maxCount, 1);
          EXPECT_EQ(snd.width, 1);
          EXPECT_EQ(snd.planes, counters);
          EXPECT_EQ(rcv.peer, (r - k + n) % n);
          EXPECT_EQ(rcv.op, RecvOp::kAdd);
          EXPECT_TRUE(rcv.range == shard(r));
          EXPECT_EQ(rcv.maxCount, 1);
          EXPECT_EQ(rcv.localMax, k);
          EXPECT_EQ(rcv.localWidth, counterWidth(k));
          EXPECT_EQ(rcv.resultMax, k + 1);
          EXPECT_EQ(rcv.resultWidth, counterWidth(k + 1));
          const Step& ag = s.steps[n - 1 + k - 1];
          ASSERT_EQ(ag.sends.size(), 1u);
          ASSERT_EQ(ag.recvs.size(), 1u);
          EXPECT_EQ(ag.sends[0].peer, (r + k) % n);
          EXPECT_EQ(ag.sends[0].buf, Buffer::kResult);
          EXPECT_TRUE(ag.sends[0].range == shard(r));
          EXPECT_EQ(ag.sends[0].planes, s.resultPlanes);
          EXPECT_EQ(ag.recvs[0].peer, (r - k + n) % n);
          EXPECT_EQ(ag.recvs[0].op, RecvOp::kStore);
          EXPECT_TRUE(ag.recvs[0].range == shard(r - k));
        }
      }
    }
  }
}

// Bits per element per rank of the direct schedule (its bytesSent, and its
// bytesReceived) against the formula (N-1)/N * (counters + result), result
// 1.6 where 2 majority planes travel coded, else resultPlanes,
// counters the vote planes (1, 2 in ternary mode) and resultPlanes the
// decided result's planes (written out here, not taken from resultPlanes():
// 1 with a tie rule or for odd N, 2 for exact ties at even N or ternary,
// width(N) per counter for average): exactly where the shards are equal
// (the coded bytes counted exactly: nblocks a multiple of every N here),
// within 1 % of the formula on a prime block count too,
// for every op, zero and tie rule at N = 2..16.
TEST(AlgoDirect, WireBitsPerElementAreTheFormula) {
  forEveryRuleUpTo16Ranks([](const OpSpec& spec, int n, const std::string& rule) {
    const int counters = spec.zeroRule == ncclSignZeroAbstain ? 2 : 1;
    const int planes = formulaResultPlanes(spec, n);
    // A coded result travels as exactly tritBytes(blocks) bytes.
    const bool coded = formulaResultCoded(spec, n);
    const double formula = (n - 1.0) / n * (counters + (coded ? 1.6 : planes));
    for (int64_t nblocks : {int64_t{720720}, int64_t{10007}}) {  // lcm(1..16); a prime
      const bool equalShards = nblocks % n == 0;
      // Equal shards of S blocks: N-1 vote shards out, N-1 copies of the own result shard out.
      const int64_t shard = nblocks / n;
      const double resultBytes = coded ? double(bits::tritBytes(size_t(shard))) : 8.0 * planes * shard;
      const double exact = 8.0 * (n - 1) * (8.0 * counters * shard + resultBytes) / (double(nblocks) * kBlockElems);
      for (int r = 0; r < n; r++) {
        Schedule s;
        ASSERT_EQ(buildSchedule(ncclSignAlgoDirect, n, r, nblocks, spec, &s), ncclSuccess);
        const double elems = double(nblocks) * kBlockElems;
        const double sent = 8.0 * s.bytesSent() / elems, received = 8.0 * s.bytesReceived() / elems;
        const std::string what = rule + " rank " + std::to_string(r) + " nblocks " + std::to_string(nblocks);
        if (equalShards) {
          EXPECT_DOUBLE_EQ(sent, exact) << what;
          EXPECT_DOUBLE_EQ(received, exact) << what;
        }
        EXPECT_NEAR(sent, formula, 0.01 * formula) << what;
        EXPECT_NEAR(received, formula, 0.01 * formula) << what;
      }
    }
  });
}

// SIGNLION_FIELD_BITS: 0 is the narrowest width that holds N votes; a set
// width must hold N and be at most 32; anything else is no width (0).
// The shape the host executor's overlap relies on: every schedule that packs
// votes packs them as its first step's only local (deferrablePack), and the
// result of ring, halving-doubling, all-gather and field-sum (and of the
// hierarchy below) is written once per block, after the packs, on every rank
// of every N but 1 (pack and decide in one step there). Flipped in a copy: a
// second write of a block, or a write in the pack step, is refused.
TEST(AlgoSchedule, ResultWrittenOnceAfterPacks) {
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoFieldSum,
                           ncclSignAlgoDirect, ncclSignAlgoTree})
    for (int n = 1; n <= 16; n++)
      for (int64_t nb : {0, 1, 5, 1000}) {
        for (int r = 0; r < n; r++) {
          Schedule s;
          ASSERT_EQ(buildSchedule(a, n, r, nb, OpSpec(), &s), ncclSuccess);
          const std::string what = std::string(algoName(a)) + " N=" + std::to_string(n) + " rank " + std::to_string(r) +
                                   " nblocks " + std::to_string(nb);
          if (a != ncclSignAlgoFieldSum && n > 1 && nb >= n) {
            EXPECT_TRUE(deferrablePack(s, 0) != nullptr || deferrablePack(s, 1) != nullptr) << what;
          }
          if (n == 1 || nb == 0) continue;
          EXPECT_TRUE(resultWrittenOnceAfterPacks(s)) << what;
          Schedule twice = s;
          twice.steps.back().locals.push_back(detail::decide(Buffer::kCounter, Range{0, 1}, n, counterWidth(n)));
          EXPECT_FALSE(resultWrittenOnceAfterPacks(twice)) << what;
        }
      }
  // Every write comes after the step whose transfers run the pack; a decide
  // moved into the step that holds the pack (the writes still tile) would
  // write the output before the pack is done.
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    Schedule s;
    ASSERT_EQ(buildSchedule(a, 4, 0, 1000, OpSpec(), &s), ncclSuccess);
    const size_t packStep = deferrablePack(s, 0) != nullptr ? 0 : 1;
    ASSERT_NE(deferrablePack(s, packStep), nullptr) << algoName(a);
    forEachResultWrite(s, [&](size_t i, const Range&) { EXPECT_GT(i, packStep) << algoName(a); });
    for (size_t i = 0; i < s.steps.size(); i++) {
      std::vector<Local>& ls = s.steps[i].locals;
      if (ls.empty() || ls.back().op != LocalOp::kDecide) continue;
      Schedule early = s;  // into the step that holds the pack (halving-doubling: the fold step)
      early.steps[s.steps[packStep].locals.empty() ? packStep - 1 : packStep].locals.push_back(ls.back());
      early.steps[i].locals.pop_back();
      EXPECT_FALSE(resultWrittenOnceAfterPacks(early)) << algoName(a);
    }
  }
}

TEST(AlgoSchedule, FieldWidthRule) {
  EXPECT_EQ(fieldBitsFor(0, 1), 1);
  EXPECT_EQ(fieldBitsFor(0, 4), 3);
  EXPECT_EQ(fieldBitsFor(0, 16), 5);
  EXPECT_EQ(fieldBitsFor(4, 15), 4);
  EXPECT_EQ(fieldBitsFor(4, 16), 0);
  EXPECT_EQ(fieldBitsFor(8, 16), 8);
  EXPECT_EQ(fieldBitsFor(32, 2), 32);
  EXPECT_EQ(fieldBitsFor(33, 2), 0);
  EXPECT_EQ(fieldBitsFor(-4, 2), 0);
  // Only field-sum has a setting that can rule it out, and only for N it cannot hold.
  setenv("SIGNLION_FIELD_BITS", "4", 1);
  paramResetCache();
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather})
    EXPECT_EQ(settingsConflict(a, 16).name, nullptr) << a;
  EXPECT_EQ(settingsConflict(ncclSignAlgoFieldSum, 15).name, nullptr);
  SettingConflict c = settingsConflict(ncclSignAlgoFieldSum, 16);
  ASSERT_NE(c.name, nullptr);
  EXPECT_STREQ(c.name, "SIGNLION_FIELD_BITS");
  EXPECT_EQ(c.value, 4);
  unsetenv("SIGNLION_FIELD_BITS");
  paramResetCache();
  EXPECT_EQ(settingsConflict(ncclSignAlgoFieldSum, 16).name, nullptr);
}

TEST(AlgoSchedule, RejectsBadArguments) {
  OpSpec spec;
  Schedule s;
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 0, 0, 1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 4, 1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, -1, 1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, -1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignAlgoAuto, 4, 0, 1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignNumAlgos, 4, 0, 1, spec, &s), ncclInvalidArgument);
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, 1, spec, nullptr), ncclInvalidArgument);
  OpSpec bad;
  bad.op = ncclSignNumOps;
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, 1, bad, &s), ncclInvalidArgument);
  bad = OpSpec();  // out-of-range values stay inside the enums' value ranges (no UB)
  bad.zeroRule = ncclSignNumZeroRules;
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, 1, bad, &s), ncclInvalidArgument);
  bad = OpSpec();
  bad.tieRule = ncclSignNumTieRules;
  EXPECT_EQ(buildSchedule(ncclSignAlgoRing, 4, 0, 1, bad, &s), ncclInvalidArgument);
}

using test::layoutName;

// The hierarchical schedule over every layout, every op and rule and a range
// of sizes, simulated: every rank gets the reference result, messages pair
// up, declared widths hold every count.
TEST(AlgoHierarchical, EveryRankGetsTheReferenceResult) {
  std::mt19937_64 rng(77);
  for (const Topology& topo : test::nodeLayouts()) {
    const int n = (int)topo.node.size();
    for (int64_t nblocks : {0, 1, 2, 3, 7, 17, 100}) {
      for (int op = 0; op < ncclSignNumOps; op++) {
        for (int zr = 0; zr < ncclSignNumZeroRules; zr++) {
          for (int tr = 0; tr < ncclSignNumTieRules; tr++) {
            OpSpec spec{static_cast<ncclSignOp_t>(op), static_cast<ncclSignZeroRule_t>(zr),
                        static_cast<ncclSignTieRule_t>(tr)};
            int64_t count = nblocks == 0 ? 0 : (nblocks - 1) * kBlockElems + 1 + int64_t(rng() % kBlockElems);
            SCOPED_TRACE("nodes " + layoutName(topo) + " nblocks=" + std::to_string(nblocks) + " op=" +
                         std::to_string(op) + " zeroRule=" + std::to_string(zr) + " tieRule=" + std::to_string(tr));
            std::vector<Schedule> sch = buildAll(ncclSignAlgoHierarchical, n, nblocks, spec, &topo);
            auto votes = randomVotes(n, count, spec, rng);
            Simulator sim(sch, votes, count);
            sim.run();
            if (HasFatalFailure() || HasFailure()) return;
            sim.checkResults();
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Bits per element that one node sends to other nodes, summed over its
// ranks (node 0; every node sends the same in these layouts).
double interNodeBitsPerElement(ncclSignAlgo_t algo, const Topology& topo, int64_t nblocks) {
  const int n = (int)topo.node.size();
  OpSpec spec;  // majority, exact ties
  int64_t bytes = 0;
  for (int r = 0; r < n; r++) {
    if (topo.node[r] != 0) continue;
    Schedule s;
    EXPECT_EQ(buildSchedule(algo, n, r, nblocks, spec, &s, &topo), ncclSuccess);
    for (const Step& st : s.steps)
      for (const Send& m : st.sends)
        if (!topo.sameNode(r, m.peer)) bytes += m.bytes();
  }
  return 8.0 * bytes / double(nblocks * kBlockElems);
}

// What the hierarchy buys between nodes: for G ranks per node, each node
// sends its counters and result planes once, as halving-doubling over the
// nodes would with G-fold counts; the flat algorithms send per rank. Printed
// for docs/PERFORMANCE.md.
TEST(AlgoHierarchical, InterNodeBitsPerElementPerNode) {
  const int64_t nblocks = int64_t{1} << 14;
  for (int nodes : {2, 4})
    for (int per : {4, 8}) {
      Topology topo;
      for (int i = 0; i < nodes; i++) topo.node.insert(topo.node.end(), per, i);
      double hier = interNodeBitsPerElement(ncclSignAlgoHierarchical, topo, nblocks);
      double hd = interNodeBitsPerElement(ncclSignAlgoHalvingDoubling, topo, nblocks);
      double ring = interNodeBitsPerElement(ncclSignAlgoRing, topo, nblocks);
      printf("[ inter-node ] %d nodes x %d ranks: hier %.3f, hd %.3f, ring %.3f bits/element/node (%.2fx best flat)\n",
             nodes, per, hier, hd, ring, hier / std::min(hd, ring));
      // Two nodes: the target. More nodes: the flat ring's node sends
      // one stream whatever the node size, so the margin is smaller.
      EXPECT_LE(hier, (nodes == 2 ? 0.7 : 1.0) * std::min(hd, ring)) << nodes << " x " << per;
    }
  // 2 nodes x 8 ranks, majority with exact ties: counters of width(8) = 4 bits
  // over half the message, then the result coded at 1.6 bits over half: 2.8.
  Topology two8;
  two8.node.assign(8, 0);
  two8.node.insert(two8.node.end(), 8, 1);
  EXPECT_NEAR(interNodeBitsPerElement(ncclSignAlgoHierarchical, two8, nblocks), 2.8, 1e-3);
}

// One node: no inter-node traffic at all; one rank per node: the schedule is
// halving-doubling's, message for message.
TEST(AlgoHierarchical, DegenerateLayouts) {
  OpSpec spec;
  Topology one;
  one.node.assign(6, 0);
  EXPECT_EQ(interNodeBitsPerElement(ncclSignAlgoHierarchical, one, 64), 0.0);
  Topology singles;
  for (int r = 0; r < 6; r++) singles.node.push_back(r);
  for (int r = 0; r < 6; r++) {
    Schedule h, hd;
    ASSERT_EQ(buildSchedule(ncclSignAlgoHierarchical, 6, r, 100, spec, &h, &singles), ncclSuccess);
    ASSERT_EQ(buildSchedule(ncclSignAlgoHalvingDoubling, 6, r, 100, spec, &hd), ncclSuccess);
    ASSERT_EQ(h.steps.size(), hd.steps.size());
    EXPECT_EQ(h.bytesSent(), hd.bytesSent());
    EXPECT_EQ(h.bytesReceived(), hd.bytesReceived());
  }
  // A topology of the wrong size is an argument error.
  Topology wrong;
  wrong.node.assign(3, 0);
  Schedule s;
  EXPECT_EQ(buildSchedule(ncclSignAlgoHierarchical, 4, 0, 1, spec, &s, &wrong), ncclInvalidArgument);
}

TEST(AlgoTopology, NodesFromHostHashes) {
  Topology t = topologyFromHostHashes({7, 9, 7, 3, 9});
  EXPECT_EQ(t.node, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(t.members(5), (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  EXPECT_EQ(t.describe(5), "3 nodes of 1..2 ranks");
  EXPECT_NE(hostIdHash("node-a"), hostIdHash("node-b"));
  EXPECT_FALSE(defaultHostId().empty());
}

// NCCL's host rule: NCCL_HOSTID when set (SIGNLION_HOSTID, read once per
// process, would win over it; CTest runs without it), else hostname + boot id.
TEST(AlgoTopology, DefaultHostIdFollowsNcclHostId) {
  if (getenv("SIGNLION_HOSTID") != nullptr) GTEST_SKIP() << "SIGNLION_HOSTID is set and wins";
  const char* had = getenv("NCCL_HOSTID");
  const std::string saved = had ? had : "";
  unsetenv("NCCL_HOSTID");
  const std::string machine = defaultHostId();
  setenv("NCCL_HOSTID", "signlion-test-host", 1);
  EXPECT_EQ(defaultHostId(), "signlion-test-host");
  setenv("NCCL_HOSTID", "", 1);  // empty: unset, as NCCL reads it
  EXPECT_EQ(defaultHostId(), machine);
  if (had)
    setenv("NCCL_HOSTID", saved.c_str(), 1);
  else
    unsetenv("NCCL_HOSTID");
}

// SIGNLION_RESULT_CODING=0, the A/B switch: every algorithm's result
// transfers travel as their 2 planes (Coding::kPlanes, 16 bytes per block),
// so direct sends (N-1)/N * (1 + 2) bits per element instead of 1 + 1.6;
// unset (or 1), they are coded. Read once: paramResetCache re-reads it.
TEST(AlgoSchedule, ResultCodingSwitch) {
  const int64_t nblocks = 720720;
  auto directBits = [&](int n) {
    Schedule s;
    EXPECT_EQ(buildSchedule(ncclSignAlgoDirect, n, 0, nblocks, OpSpec(), &s), ncclSuccess);
    return 8.0 * s.bytesSent() / double(nblocks * kBlockElems);
  };
  auto codings = [&](ncclSignAlgo_t a, int n, std::vector<Coding>* out) {
    Schedule s;
    ASSERT_EQ(buildSchedule(a, n, 1, 1000, OpSpec(), &s), ncclSuccess);
    for (const Step& st : s.steps)
      for (const Send& x : st.sends)
        if (x.buf == Buffer::kResult) out->push_back(x.coding);
  };
  EXPECT_TRUE(resultCodingEnabled());
  EXPECT_NEAR(directBits(4), 0.75 * 2.6, 1e-9);
  setenv("SIGNLION_RESULT_CODING", "0", 1);
  paramResetCache();
  EXPECT_FALSE(resultCodingEnabled());
  EXPECT_NEAR(directBits(4), 0.75 * 3.0, 1e-9);
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    std::vector<Coding> c;
    codings(a, 4, &c);
    ASSERT_FALSE(c.empty()) << algoName(a);
    for (Coding x : c) EXPECT_EQ(x, Coding::kPlanes) << algoName(a);
  }
  unsetenv("SIGNLION_RESULT_CODING");
  paramResetCache();
  std::vector<Coding> c;
  codings(ncclSignAlgoTree, 4, &c);
  for (Coding x : c) EXPECT_EQ(x, Coding::kTrits);
}

// The double binary tree's shape (algo/tree.h) for every N up to 600 and
// around the powers of two up to 4096: each
// tree is one tree over all ranks (every rank but the root has a parent that
// names it as a child, subtree sizes add up, heights grow towards the root),
// every rank is an inner node of at most one of the two trees, siblings have
// different slots below their parent's (no two adds into one range in one
// step), and the depth stays within log2 N + 1.
TEST(AlgoTree, ShapeUpTo4096Ranks) {
  std::vector<int> ns;
  for (int n = 1; n <= 600; n++) ns.push_back(n);
  for (int n : {1000, 1023, 1024, 1025, 2047, 2048, 2049, 3000, 4095, 4096}) ns.push_back(n);
  for (int n : ns) {
    const int lg = (int)std::floor(std::log2(n));
    std::vector<int> inner(n, 0);
    for (int t = 0; t < kTreeCount; t++) {
      std::vector<int> seen(n + 1, 0);
      int roots = 0;
      for (int r = 0; r < n; r++) {
        const int p = treePosition(n, t, r);
        ASSERT_TRUE(p >= 1 && p <= n) << "N=" << n;
        ASSERT_EQ(treeRank(n, t, p), r) << "N=" << n;
        ASSERT_EQ(seen[p]++, 0) << "N=" << n << ": position " << p << " twice";
        const TreeNode me = treeNode(n, t, r);
        int sizes = 1;
        for (int i = 0; i < me.nchildren; i++) {
          const TreeNode kid = treeNode(n, t, me.children[i]);
          ASSERT_EQ(kid.parent, r) << "N=" << n << " tree " << t << " rank " << r;
          ASSERT_LT(kid.height, me.height);
          ASSERT_LT(treeSlot(kid), me.parent < 0 ? 2 * me.height : treeSlot(me));
          sizes += kid.size;
        }
        if (me.nchildren == 2) {
          ASSERT_NE(treeSlot(treeNode(n, t, me.children[0])), treeSlot(treeNode(n, t, me.children[1])));
        }
        ASSERT_EQ(me.size, sizes) << "N=" << n << " tree " << t << " rank " << r;
        inner[r] += me.nchildren > 0;
        if (me.parent < 0) {
          roots++;
          ASSERT_EQ(me.size, n);
        }
        int depth = 0;
        for (int q = me.parent; q >= 0; q = treeNode(n, t, q).parent) ASSERT_LE(++depth, lg + 1) << "N=" << n;
      }
      ASSERT_EQ(roots, 1) << "N=" << n;
    }
    for (int r = 0; r < n; r++) ASSERT_LE(inner[r], 1) << "N=" << n << ": rank " << r << " is inner in both trees";
  }
}

// The tree's schedules over many ranks, simulated: counters widen with the
// subtree (the simulator checks every width), results come back down, chunks
// and halves empty or partial where there are few blocks. Majority with
// exact ties (binary and ternary, coded results) and the average, up to 4096
// ranks.
TEST(AlgoTree, SimulationUpTo4096Ranks) {
  std::mt19937_64 rng(4096);
  const OpSpec specs[] = {OpSpec{}, OpSpec{ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero},
                          OpSpec{ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero}};
  for (int n : {17, 24, 31, 33, 63, 64, 65, 100, 127, 128, 255, 257, 511, 1000, 1024, 2047, 4095, 4096}) {
    const std::vector<int64_t> sizes = n < 1000 ? std::vector<int64_t>{1, 3, 13, 41} : std::vector<int64_t>{1, 13};
    for (int64_t nblocks : sizes)
      for (const OpSpec& spec : specs) {
        if (n >= 1000 && spec.op == ncclSignAverage) continue;  // the same widths as the majority's
        const int64_t count = (nblocks - 1) * kBlockElems + 1 + int64_t(rng() % kBlockElems);
        SCOPED_TRACE("N=" + std::to_string(n) + " nblocks=" + std::to_string(nblocks) + " op=" +
                     std::to_string(spec.op) + " zeroRule=" + std::to_string(spec.zeroRule));
        std::vector<Schedule> sch = buildAll(ncclSignAlgoTree, n, nblocks, spec);
        auto votes = randomVotes(n, count, spec, rng);
        Simulator sim(sch, votes, count);
        sim.run();
        if (HasFatalFailure() || HasFailure()) return;
        sim.checkResults();
        if (HasFailure()) return;
      }
  }
}

// The pipeline: a long message is cut into several chunks per half (the
// more, the longer the message, up to kMaxTreeChunks), a few blocks into one;
// a call takes K + (a fill of about 3 log2 N) steps, and every rank both
// sends and receives in most of them.
TEST(AlgoTree, ChunksArePipelined) {
  EXPECT_EQ(treePipelineChunks(16, 4, 1), 1);
  EXPECT_EQ(treePipelineChunks(1, 1 << 20, 1), 1);
  int last = 1;
  for (int64_t nb : {int64_t{1} << 10, int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 24}) {
    const int k = treePipelineChunks(16, nb, 1);
    EXPECT_GE(k, last) << nb;
    EXPECT_LE(k, kMaxTreeChunks);
    last = k;
  }
  EXPECT_GT(last, 8);
  Schedule s;
  const int64_t nb = int64_t{1} << 16;
  ASSERT_EQ(buildSchedule(ncclSignAlgoTree, 16, 5, nb, OpSpec(), &s), ncclSuccess);
  const int k = treePipelineChunks(16, nb, 1);
  EXPECT_GT(k, 1);
  EXPECT_LE(s.steps.size(), size_t(k + 3 * 4 + 1));
  EXPECT_GT(s.messageSteps(), k);
}

// Bits per element per rank of the tree (bytesSent and bytesReceived of every
// rank) against the formula, for every op, zero and tie rule at N = 2..16:
// each tree carries half the message; in it a rank sends its counter to its
// parent at counters * width(subtree ranks) bits (none at the root) and the
// decided result to each child at q bits, q = 1.6 where two majority planes
// travel coded, else the result planes; it receives the counters of its
// children and the result from its parent. Within 1 % (only each half's last
// chunk carries a partial trit group).
TEST(AlgoTree, WireBitsPerElementAreTheFormula) {
  forEveryRuleUpTo16Ranks([](const OpSpec& spec, int n, const std::string& rule) {
    const int counters = spec.zeroRule == ncclSignZeroAbstain ? 2 : 1;
    const double q = formulaResultCoded(spec, n) ? 1.6 : formulaResultPlanes(spec, n);
    auto width = [](int count) { return std::floor(std::log2(count) + 1); };
    for (int r = 0; r < n; r++) {
      double sendFormula = 0, recvFormula = 0;
      for (int t = 0; t < kTreeCount; t++) {
        const TreeNode me = treeNode(n, t, r);
        if (me.parent >= 0) {
          sendFormula += 0.5 * counters * width(me.size);
          recvFormula += 0.5 * q;
        }
        sendFormula += 0.5 * q * me.nchildren;
        for (int i = 0; i < me.nchildren; i++)
          recvFormula += 0.5 * counters * width(treeNode(n, t, me.children[i]).size);
      }
      const int64_t nblocks = 720720;
      Schedule s;
      ASSERT_EQ(buildSchedule(ncclSignAlgoTree, n, r, nblocks, spec, &s), ncclSuccess);
      const double elems = double(nblocks) * kBlockElems;
      const std::string what = rule + " rank " + std::to_string(r);
      EXPECT_NEAR(8.0 * s.bytesSent() / elems, sendFormula, 0.01 * sendFormula) << what;
      EXPECT_NEAR(8.0 * s.bytesReceived() / elems, recvFormula, 0.01 * recvFormula) << what;
    }
  });
}

}  // namespace
}  // namespace algo
}  // namespace signlion
