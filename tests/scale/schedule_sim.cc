#include "scale/schedule_sim.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "algo/scratch_layout.h"
#include "bits/bits.h"
#include "bits/fields.h"

namespace signlion {
namespace test {
namespace {

using algo::Buffer;

// One rank: its schedule without steps (the header: widths, planes, field
// shape), the steps that do something with their indices, and its scratch.
struct SimRank {
  algo::Schedule header;
  std::vector<uint32_t> stepIndex;
  std::vector<algo::Step> steps;
  size_t cursor = 0;  // the next entry of steps to run
  algo::ScratchLayout layout;
  std::unique_ptr<uint64_t[]> base;
  const uint8_t* input = nullptr;
  uint64_t sent = 0;      // bytes this rank's sends put on the in-memory links
  uint64_t declared = 0;  // what its schedule says it sends (Schedule::bytesSent)

  uint64_t* plane(Buffer buf, int slot, int p, int payloadWidth) {
    return layout.plane(base.get(), header, buf, slot, p, payloadWidth);
  }
  const algo::Step* at(size_t i) const {
    return cursor < steps.size() && stepIndex[cursor] == i ? &steps[cursor] : nullptr;
  }
};

struct Message {
  int from, to;
  size_t offset, words;  // into the step's payload pool
};

class Simulation {
 public:
  Simulation(const SimCase& c, const std::vector<const void*>& inputs) : c_(c), inputs_(inputs) {}

  bool build(SimOutcome* out) {
    ranks_.resize((size_t)c_.nranks);
    int64_t total = 0;  // non-empty steps of all ranks
    for (int r = 0; r < c_.nranks; r++) {
      SimRank& rk = ranks_[(size_t)r];
      algo::Schedule s;
      if (!buildRank(r, &s, out)) return false;
      rk.declared = (uint64_t)s.bytesSent();
      const int64_t kept = keep(rk, &s, 0, s.steps.size());
      total += kept;
      if (total > kMaxKeptSteps) windowed_ = true;
      if (windowed_) rk.steps.clear(), rk.stepIndex.clear();
      rk.header = std::move(s);
      rk.layout = algo::layoutScratch(rk.header, 0, 1);
      rk.base.reset(new uint64_t[(size_t)std::max<int64_t>(1, rk.layout.words)]());
      rk.input = static_cast<const uint8_t*>(inputs_[(size_t)r]);
      out->scratchBytes += (size_t)rk.layout.bytes();
    }
    if (windowed_) {
      for (SimRank& rk : ranks_) rk.steps.clear(), rk.stepIndex.clear();
      // Steps run a window at a time, each window's built again for it:
      // about kMaxKeptSteps non-empty steps held at once.
      window_ = (int)std::max<int64_t>(1, (int64_t)out->steps * kMaxKeptSteps / std::max<int64_t>(1, total));
    } else {
      window_ = std::max(1, out->steps);
    }
    return true;
  }

  bool run(SimOutcome* out) {
    k_ = &bits::kernels();
    for (int i = 0; i < out->steps; i++) {
      if (windowed_ && i % window_ == 0 && !load(i, std::min(out->steps, i + window_), out)) return false;
      for (SimRank& rk : ranks_)
        if (const algo::Step* st = rk.at((size_t)i))
          for (const algo::Local& l : st->locals) runLocal(rk, l);
      pool_.clear();
      msgs_.clear();
      for (int r = 0; r < c_.nranks; r++)
        if (const algo::Step* st = ranks_[(size_t)r].at((size_t)i))
          for (const algo::Send& x : st->sends) post(r, x);
      // Each receiver takes its peer's messages in the order they were sent.
      std::stable_sort(msgs_.begin(), msgs_.end(),
                       [](const Message& a, const Message& b) { return a.to != b.to ? a.to < b.to : a.from < b.from; });
      next_.clear();
      for (size_t m = msgs_.size(); m-- > 0;) next_[key(msgs_[m].to, msgs_[m].from)] = m;
      size_t taken = 0;
      for (int r = 0; r < c_.nranks; r++) {
        SimRank& rk = ranks_[(size_t)r];
        const algo::Step* st = rk.at((size_t)i);
        if (st == nullptr) continue;
        for (const algo::Recv& x : st->recvs) {
          auto it = next_.find(key(r, x.peer));
          if (it == next_.end() || it->second >= msgs_.size() || msgs_[it->second].from != x.peer ||
              msgs_[it->second].to != r)
            return fail(out, where(i, r) + ": a receive from rank " + std::to_string(x.peer) + " that it never sent");
          const Message& m = msgs_[it->second++];
          if ((int64_t)m.words * 8 != x.bytes())
            return fail(out, where(i, r) + ": " + std::to_string(m.words * 8) + " bytes from rank " +
                                 std::to_string(x.peer) + " for a receive of " + std::to_string(x.bytes()));
          apply(rk, x, pool_.data() + m.offset);
          out->messages++;
          out->bytesMoved += m.words * 8;
          taken++;
        }
        rk.cursor++;
      }
      if (taken != msgs_.size())
        return fail(out, "step " + std::to_string(i) + ": " + std::to_string(msgs_.size() - taken) +
                             " messages that no receive took");
    }
    for (size_t r = 0; r < ranks_.size(); r++) {
      SimRank& rk = ranks_[r];
      out->maxRankSent = std::max(out->maxRankSent, rk.sent);
      if (rk.sent != rk.declared)
        return fail(out, "rank " + std::to_string(r) + " sent " + std::to_string(rk.sent) +
                             " bytes, its schedule declares " + std::to_string(rk.declared));
    }
    return true;
  }

  void unpack(int r, void* dst) {
    SimRank& rk = ranks_[(size_t)r];
    const algo::Schedule& s = rk.header;
    const size_t nb = (size_t)s.nblocks;
    const uint64_t* result = rk.base.get() + rk.layout.result;
    if (c_.count == 0) return;
    if (s.spec.op == ncclSignAverage) {
      const int w = s.resultPlanes / s.counters;
      bits::Counts cnt{result, w, nb};
      if (s.counters == 2) cnt = bits::Counts{result, w, nb, result + (size_t)w * nb, w, nb};
      k_->average(cnt, s.nranks, c_.count, c_.dt, dst);
    } else {
      k_->unpack(result, s.resultPlanes, nb, c_.count, c_.dt, dst);
    }
  }

 private:
  // Non-empty steps the simulation holds at once (a Step with its transfers
  // is about 250 bytes): past this, it runs window by window.
  static constexpr int64_t kMaxKeptSteps = int64_t{1} << 21;

  // Rank r's schedule, checked to have as many steps as rank 0's.
  bool buildRank(int r, algo::Schedule* s, SimOutcome* out) {
    const algo::Topology* topo = c_.topo.known() ? &c_.topo : nullptr;
    if (algo::buildSchedule(c_.algo, c_.nranks, r, algo::blocksForCount(c_.count), c_.spec, s, topo) != ncclSuccess)
      return fail(out, "rank " + std::to_string(r) + ": buildSchedule failed");
    if (r == 0) out->steps = (int)s->steps.size();
    if ((int)s->steps.size() != out->steps)
      return fail(out, "rank " + std::to_string(r) + " has " + std::to_string(s->steps.size()) + " steps, rank 0 " +
                           std::to_string(out->steps));
    return true;
  }

  // Moves the non-empty steps of s with index in [lo, hi) into rk (from its
  // first), leaving s without steps; returns how many there were.
  static int64_t keep(SimRank& rk, algo::Schedule* s, size_t lo, size_t hi) {
    std::vector<algo::Step> all = std::move(s->steps);
    s->steps.clear();
    rk.steps.clear();
    rk.stepIndex.clear();
    rk.cursor = 0;
    for (size_t i = lo; i < hi && i < all.size(); i++) {
      if (all[i].locals.empty() && all[i].sends.empty() && all[i].recvs.empty()) continue;
      rk.stepIndex.push_back((uint32_t)i);
      rk.steps.push_back(std::move(all[i]));
    }
    return (int64_t)rk.steps.size();
  }

  // Every rank's steps [lo, hi), its schedule built again.
  bool load(int lo, int hi, SimOutcome* out) {
    for (int r = 0; r < c_.nranks; r++) {
      algo::Schedule s;
      if (!buildRank(r, &s, out)) return false;
      keep(ranks_[(size_t)r], &s, (size_t)lo, (size_t)hi);
    }
    return true;
  }

  static uint64_t key(int to, int from) { return (uint64_t)(uint32_t)to << 32 | (uint32_t)from; }
  static std::string where(int step, int rank) {
    return "step " + std::to_string(step) + ", rank " + std::to_string(rank);
  }
  static bool fail(SimOutcome* out, const std::string& why) {
    out->ok = false;
    out->error = why;
    return false;
  }

  // Elements [first, first + n) of the message that blocks [b, b + len) cover.
  void elems(int64_t b, int64_t len, size_t* first, size_t* n) const {
    *first = (size_t)b * bits::kBlockElems;
    *n = *first < c_.count ? std::min(c_.count - *first, (size_t)len * bits::kBlockElems) : 0;
  }

  void decide(SimRank& rk, const uint64_t* counter, int64_t mStride, int width, int64_t b, int64_t len) {
    const algo::Schedule& s = rk.header;
    const int64_t nb = s.nblocks;
    uint64_t* result = rk.base.get() + rk.layout.result;
    if (s.spec.op == ncclSignAverage) {  // the result planes are the full count
      for (int c = 0; c < s.counters; c++)
        for (int q = 0; q < width; q++)
          memcpy(result + ((int64_t)c * width + q) * nb + b, counter + c * mStride + (int64_t)q * nb + b,
                 (size_t)len * 8);
      return;
    }
    bits::Counts cnt{counter + b, width, (size_t)nb};
    if (s.counters == 2) cnt = bits::Counts{counter + b, width, (size_t)nb, counter + mStride + b, width, (size_t)nb};
    k_->decideBits(cnt, s.nranks, s.spec.tieRule, result + b, (size_t)nb, (size_t)len);
  }

  void runLocal(SimRank& rk, const algo::Local& l) {
    const algo::Schedule& s = rk.header;
    const int64_t nb = s.nblocks, b = l.range.begin, len = l.range.size();
    uint64_t* counter = rk.base.get() + rk.layout.counter;
    size_t first, n;
    elems(b, len, &first, &n);
    switch (l.op) {
      case algo::LocalOp::kPackVotes:
        if (n == 0) return;
        if (l.dst == Buffer::kCounter)
          k_->pack(rk.input + first * bits::typeSize(c_.dt), c_.dt, n, s.spec.zeroRule, counter + b,
                   (size_t)s.counterWidth * nb);
        else
          k_->pack(rk.input + first * bits::typeSize(c_.dt), c_.dt, n, s.spec.zeroRule,
                   rk.plane(Buffer::kVotes, l.slot, 0, 1) + b, (size_t)nb);
        return;
      case algo::LocalOp::kSumVotes:
        if (len <= 0) return;
        for (int c = 0; c < s.counters; c++) {
          uint64_t* acc = counter + (int64_t)c * s.counterWidth * nb + b;
          for (int v = 0; v < s.voteSlots; v++)
            k_->add(acc, v == 0 ? 0 : bits::widthFor((uint64_t)v), (size_t)nb, rk.plane(Buffer::kVotes, v, c, 1) + b, 1,
                    (size_t)nb, acc, bits::widthFor((uint64_t)v + 1), (size_t)nb, (size_t)len);
        }
        return;
      case algo::LocalOp::kPackFields:
        bits::packFields(*k_, rk.input, c_.dt, c_.count, s.spec.zeroRule, s.fieldBits, rk.base.get() + rk.layout.fields,
                         (size_t)s.fieldWords);
        return;
      case algo::LocalOp::kDecide: {
        if (len <= 0) return;
        if (l.src == Buffer::kCounter) {
          decide(rk, counter, (int64_t)s.counterWidth * nb, l.width, b, len);
          return;
        }
        const int w = bits::widthFor((uint64_t)s.nranks);
        const bool average = s.spec.op == ncclSignAverage;
        uint64_t* planes = rk.base.get() + (average ? rk.layout.result : rk.layout.fieldPlanes);
        for (int c = 0; c < s.counters; c++)
          bits::fieldsToPlanes(rk.base.get() + rk.layout.fields + (int64_t)c * s.fieldWords, s.fieldBits, first, n,
                               planes + (int64_t)c * w * nb + b, w, (size_t)nb);
        if (!average) decide(rk, planes, (int64_t)w * nb, w, b, len);
        return;
      }
    }
  }

  void post(int r, const algo::Send& x) {
    SimRank& rk = ranks_[(size_t)r];
    const int64_t len = x.range.size();
    const size_t offset = pool_.size();
    if (x.coding == algo::Coding::kTrits) {  // a decided result, 5 elements per byte
      pool_.resize(offset + (size_t)x.bytes() / 8);
      k_->encodeTrits(rk.plane(x.buf, x.slot, 0, x.width) + x.range.begin,
                      rk.plane(x.buf, x.slot, 1, x.width) + x.range.begin, (size_t)len,
                      reinterpret_cast<uint8_t*>(pool_.data() + offset));
    } else {
      for (int q = 0; q < x.planes; q++) {
        const uint64_t* src = rk.plane(x.buf, x.slot, q, x.width) + x.range.begin;
        pool_.insert(pool_.end(), src, src + len);
      }
    }
    msgs_.push_back(Message{r, x.peer, offset, (size_t)x.bytes() / 8});
    rk.sent += (uint64_t)x.bytes();
  }

  void apply(SimRank& rk, const algo::Recv& x, const uint64_t* data) {
    const algo::Schedule& s = rk.header;
    const int64_t nb = s.nblocks, len = x.range.size();
    switch (x.op) {
      case algo::RecvOp::kSumWords:
        for (int c = 0; c < x.planes; c++) {
          uint64_t* dst = rk.plane(x.buf, x.slot, c, x.width) + x.range.begin;
          for (int64_t i = 0; i < len; i++) dst[i] += data[c * len + i];
        }
        return;
      case algo::RecvOp::kAdd:
        for (int c = 0; c < s.counters; c++) {
          uint64_t* acc = rk.base.get() + rk.layout.counter + (int64_t)c * s.counterWidth * nb + x.range.begin;
          k_->add(acc, x.localWidth, (size_t)nb, data + (int64_t)c * x.width * len, x.width, (size_t)len, acc,
                  x.resultWidth, (size_t)nb, (size_t)len);
        }
        return;
      case algo::RecvOp::kStore:
        if (x.coding == algo::Coding::kTrits) {
          // The simulation's own coder wrote it: a refusal is a simulator bug.
          if (!k_->decodeTrits(reinterpret_cast<const uint8_t*>(data), (size_t)len,
                               rk.plane(x.buf, x.slot, 0, x.width) + x.range.begin,
                               rk.plane(x.buf, x.slot, 1, x.width) + x.range.begin))
            abort();
          return;
        }
        for (int q = 0; q < x.planes; q++)
          memcpy(rk.plane(x.buf, x.slot, q, x.width) + x.range.begin, data + q * len, (size_t)len * 8);
        return;
    }
  }

  const SimCase& c_;
  const std::vector<const void*>& inputs_;
  const bits::Kernels* k_ = nullptr;
  std::vector<SimRank> ranks_;
  std::vector<uint64_t> pool_;
  std::vector<Message> msgs_;
  std::unordered_map<uint64_t, size_t> next_;
  bool windowed_ = false;
  int window_ = 1;  // steps per window
};

}  // namespace

SimOutcome simulateSchedules(const SimCase& c, const std::vector<const void*>& inputs,
                             const std::vector<void*>& outputs) {
  const auto t0 = std::chrono::steady_clock::now();
  SimOutcome out;
  if ((int)inputs.size() != c.nranks || (int)outputs.size() != c.nranks) {
    out.error = "inputs and outputs must hold one buffer per rank";
    return out;
  }
  Simulation sim(c, inputs);
  if (sim.build(&out) && sim.run(&out)) {
    for (int r = 0; r < c.nranks; r++) sim.unpack(r, outputs[(size_t)r]);
    out.ok = true;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

bool scheduleBytesSent(const SimCase& c, int64_t nblocks, std::vector<uint64_t>* perRank, std::string* error) {
  perRank->assign((size_t)c.nranks, 0);
  const algo::Topology* topo = c.topo.known() ? &c.topo : nullptr;
  for (int r = 0; r < c.nranks; r++) {
    algo::Schedule s;
    if (algo::buildSchedule(c.algo, c.nranks, r, nblocks, c.spec, &s, topo) != ncclSuccess) {
      *error = "rank " + std::to_string(r) + ": buildSchedule failed";
      return false;
    }
    (*perRank)[(size_t)r] = (uint64_t)s.bytesSent();
  }
  return true;
}

void addSchedulePeers(const algo::Schedule& s, std::set<int>* peers) {
  for (const algo::Step& st : s.steps) {
    for (const algo::Send& x : st.sends) peers->insert(x.peer);
    for (const algo::Recv& x : st.recvs) peers->insert(x.peer);
  }
}

}  // namespace test
}  // namespace signlion
