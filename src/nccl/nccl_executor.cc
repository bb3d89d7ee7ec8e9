#include "nccl/nccl_executor.h"

#include <algorithm>

#include "common/checks.h"

namespace signlion {
namespace nccl {

using algo::Buffer;

namespace {

// One call: the schedule's buffers resolved to addresses in the scratch.
class Run {
 public:
  Run(const algo::Schedule& s, const Plan& plan, uint64_t* scratch, const void* send, void* recv, size_t count,
      ncclDataType_t dt, Backend& backend)
      : s_(s),
        plan_(plan),
        b_(backend),
        send_(static_cast<const char*>(send)),
        recv_(static_cast<char*>(recv)),
        count_(count),
        dt_(dt),
        esize_(bits::typeSize(dt)),
        nb_(s.nblocks),
        scratch_(scratch),
        result_(scratch + plan.layout.result),
        votes_(scratch + plan.layout.votes),
        fields_(scratch + plan.layout.fields),
        fieldPlanes_(scratch + plan.layout.fieldPlanes),
        stage_(scratch + plan.layout.stage) {}

  ncclResult_t run() {
    for (const StepPlan& sp : plan_.steps) {
      const algo::Step& st = s_.steps[sp.step];
      for (int l : sp.locals) NCCLCHECK(local(st.locals[l]));
      if (sp.exchange != Exchange::kSteps) {
        NCCLCHECK(exchange(sp.exchange));
      } else {
        NCCLCHECK(transfers(sp, st));
      }
    }
    return unpack();
  }

 private:
  uint64_t* plane(Buffer buf, int slot, int p, int payloadWidth) const {
    return plan_.layout.plane(scratch_, s_, buf, slot, p, payloadWidth);
  }
  // Counter c (0: P, 1: M) of the kCounter buffer, at block b.
  uint64_t* counter(int c, int64_t b) const { return plane(Buffer::kCounter, 0, c, 1) + b; }
  // A counter of `width` planes `stride` words apart at p; in ternary mode
  // its M counter starts mOffset words after p.
  bits::Counts counts(const uint64_t* p, int width, size_t stride, int64_t mOffset) const {
    bits::Counts c{p, width, stride};
    if (s_.counters == 2) {
      c.neg = p + mOffset;
      c.negWidth = width;
      c.negStride = stride;
    }
    return c;
  }
  // Elements that blocks [b, b + len) hold (the last block may be partial).
  size_t elems(int64_t b, int64_t len) const {
    size_t first = static_cast<size_t>(b) * bits::kBlockElems;
    return first < count_ ? std::min(count_ - first, static_cast<size_t>(len) * bits::kBlockElems) : 0;
  }
  const char* input(int64_t b) const { return send_ + static_cast<size_t>(b) * bits::kBlockElems * esize_; }
  char* output(int64_t b) const { return recv_ + static_cast<size_t>(b) * bits::kBlockElems * esize_; }

  ncclResult_t local(const algo::Local& l) {
    const int64_t b = l.range.begin, len = l.range.size();
    const size_t n = elems(b, len);
    const ncclSignZeroRule_t zero = s_.spec.zeroRule;
    if (n == 0) return ncclSuccess;  // an empty shard (fewer blocks than ranks)
    switch (l.op) {
      case algo::LocalOp::kPackVotes:
        if (l.dst == Buffer::kCounter)
          return b_.pack(input(b), dt_, n, zero, counter(0, b), static_cast<size_t>(s_.counterWidth * nb_));
        return b_.pack(input(b), dt_, n, zero, plane(Buffer::kVotes, l.slot, 0, 1) + b, static_cast<size_t>(nb_));
      case algo::LocalOp::kPackFields:
        return b_.packFields(send_, dt_, count_, zero, s_.fieldBits, fields_, static_cast<size_t>(s_.fieldWords));
      case algo::LocalOp::kSumVotes:
        for (int c = 0; c < s_.counters; c++)
          NCCLCHECK(b_.sumVotes(plane(Buffer::kVotes, 0, c, 1) + b, s_.voteSlots,
                                static_cast<size_t>(s_.counters * nb_), counter(c, b), l.width,
                                static_cast<size_t>(nb_), static_cast<size_t>(len)));
        return ncclSuccess;
      case algo::LocalOp::kDecide:
        return decide(l, n);
    }
    return ncclInternalError;
  }

  ncclResult_t decide(const algo::Local& l, size_t n) {
    const int64_t b = l.range.begin, len = l.range.size();
    const size_t snb = static_cast<size_t>(nb_);
    const bool average = s_.spec.op == ncclSignAverage;
    const uint64_t* planes;
    int w;
    if (l.src == Buffer::kCounter) {
      planes = counter(0, b);
      w = l.width;
      if (average) {  // the average needs the full count: the result planes are the counter's
        for (int c = 0; c < s_.counters; c++)
          NCCLCHECK(b_.copyPlanes(result_ + static_cast<int64_t>(c) * w * nb_ + b, snb, counter(c, b), snb, w,
                                  static_cast<size_t>(len)));
        return ncclSuccess;
      }
      return b_.decideBits(counts(planes, w, snb, counter(1, b) - planes), s_.nranks, s_.spec.tieRule, result_ + b, snb,
                           static_cast<size_t>(len));
    }
    // Field-sum: the counts in the fields become bit-sliced planes of the
    // width that holds N; for average those are the result planes.
    w = algo::counterWidth(s_.nranks);
    uint64_t* target = average ? result_ : fieldPlanes_;
    for (int c = 0; c < s_.counters; c++)
      NCCLCHECK(b_.fieldsToPlanes(plane(Buffer::kFields, 0, c, 0), s_.fieldBits,
                                  static_cast<size_t>(b) * bits::kBlockElems, n,
                                  target + static_cast<int64_t>(c) * w * nb_ + b, w, snb));
    if (average) return ncclSuccess;
    return b_.decideBits(counts(fieldPlanes_ + b, w, snb, static_cast<int64_t>(w) * nb_), s_.nranks, s_.spec.tieRule,
                         result_ + b, snb, static_cast<size_t>(len));
  }

  ncclResult_t exchange(Exchange e) {
    if (e == Exchange::kAllGather) {
      const int64_t words = static_cast<int64_t>(s_.counters) * nb_;  // one slot: kVotes is slot-major
      return b_.allGather(votes_ + s_.rank * words, votes_, static_cast<size_t>(words));
    }
    return b_.allReduceSum(fields_, static_cast<size_t>(s_.counters * s_.fieldWords));
  }

  ncclResult_t transfers(const StepPlan& sp, const algo::Step& st) {
    // Coded results are coded before the first group, on the main lane: the
    // sends that carry them are enqueued there after it.
    for (const ChunkGroup& g : sp.groups)
      for (const Chunk& c : g.sends)
        if (c.stage >= 0) {
          const algo::Send& x = st.sends[c.index];
          NCCLCHECK(b_.encodeTrits(plane(x.buf, x.slot, 0, x.width) + c.begin, plane(x.buf, x.slot, 1, x.width) + c.begin,
                                   static_cast<size_t>(c.len), stage_ + c.stage));
        }
    bool diverted = false;
    for (const ChunkGroup& g : sp.groups) {
      NCCLCHECK(b_.groupStart());
      ncclResult_t res = post(g, st);
      // A group once started is always ended, so NCCL is left out of it.
      ncclResult_t end = b_.groupEnd();
      NCCLCHECK(res);
      NCCLCHECK(end);
      if (!g.hasActions) continue;
      NCCLCHECK(b_.divert());
      diverted = true;
      for (const Chunk& c : g.recvs)
        if (c.stage >= 0) NCCLCHECK(action(sp, st.recvs[c.index], c));
    }
    // The next step's locals and sends read what the adds wrote.
    if (diverted) NCCLCHECK(b_.join());
    return ncclSuccess;
  }

  // One message per plane: no gather copy, and a store lands in place. A
  // coded result: one message from (into) the stage.
  ncclResult_t post(const ChunkGroup& g, const algo::Step& st) {
    for (const Chunk& c : g.sends) {
      const algo::Send& x = st.sends[c.index];
      if (x.coding == algo::Coding::kTrits) {
        NCCLCHECK(b_.send(stage_ + c.stage, static_cast<size_t>(x.wireBytes(c.len) / 8), x.peer));
        continue;
      }
      for (int q = 0; q < x.planes; q++)
        NCCLCHECK(b_.send(plane(x.buf, x.slot, q, x.width) + c.begin, static_cast<size_t>(c.len), x.peer));
    }
    for (const Chunk& c : g.recvs) {
      const algo::Recv& x = st.recvs[c.index];
      if (x.coding == algo::Coding::kTrits) {
        NCCLCHECK(b_.recv(stage_ + c.stage, static_cast<size_t>(x.wireBytes(c.len) / 8), x.peer));
        continue;
      }
      for (int q = 0; q < x.planes; q++) {
        uint64_t* dst = c.stage >= 0 ? stage_ + c.stage + q * c.len : plane(x.buf, x.slot, q, x.width) + c.begin;
        NCCLCHECK(b_.recv(dst, static_cast<size_t>(c.len), x.peer));
      }
    }
    return ncclSuccess;
  }

  // What an adding receive, or a coded result's, does once chunk c is here
  // (on the side lane).
  ncclResult_t action(const StepPlan& sp, const algo::Recv& r, const Chunk& c) {
    const uint64_t* data = stage_ + c.stage;
    if (r.coding == algo::Coding::kTrits)
      return b_.decodeTrits(data, static_cast<size_t>(c.len), plane(r.buf, r.slot, 0, r.width) + c.begin,
                            plane(r.buf, r.slot, 1, r.width) + c.begin, r.peer);
    const size_t snb = static_cast<size_t>(nb_), len = static_cast<size_t>(c.len);
    const int64_t mIn = static_cast<int64_t>(r.width) * c.len;  // payload: P planes, then M planes
    if (c.index == sp.fusedRecv) {
      const uint64_t* acc = counter(0, c.begin);
      return b_.addDecideUnpack(counts(acc, r.localWidth, snb, counter(1, c.begin) - acc),
                                counts(data, r.width, len, mIn), r.resultWidth, s_.nranks, s_.spec.op, s_.spec.zeroRule,
                                s_.spec.tieRule, plan_.fusedStoresPlanes ? result_ + c.begin : nullptr, snb,
                                elems(c.begin, c.len), dt_, output(c.begin));
    }
    for (int k = 0; k < s_.counters; k++) {
      uint64_t* acc = counter(k, c.begin);
      NCCLCHECK(b_.add(acc, r.localWidth, snb, data + k * mIn, r.width, len, acc, r.resultWidth, snb, len));
    }
    return ncclSuccess;
  }

  // Every block's result planes are final: write the output (the fused
  // receive already wrote its blocks).
  ncclResult_t unpack() {
    const size_t snb = static_cast<size_t>(nb_);
    for (const algo::Range& r : plan_.unpack) {
      const size_t n = elems(r.begin, r.size());
      if (n == 0) continue;
      if (s_.spec.op == ncclSignAverage) {
        const int w = s_.resultPlanes / s_.counters;
        NCCLCHECK(b_.average(counts(result_ + r.begin, w, snb, static_cast<int64_t>(w) * nb_), s_.nranks, n, dt_,
                             output(r.begin)));
      } else {
        NCCLCHECK(b_.unpack(result_ + r.begin, s_.resultPlanes, snb, n, dt_, output(r.begin)));
      }
    }
    return ncclSuccess;
  }

  const algo::Schedule& s_;
  const Plan& plan_;
  Backend& b_;
  const char* send_;
  char* recv_;
  size_t count_;
  ncclDataType_t dt_;
  size_t esize_;
  int64_t nb_;
  uint64_t* scratch_;
  uint64_t* result_;
  uint64_t* votes_;
  uint64_t* fields_;
  uint64_t* fieldPlanes_;
  uint64_t* stage_;
};

}  // namespace

ncclResult_t runSchedule(const algo::Schedule& s, const Plan& plan, uint64_t* scratch, const void* send, void* recv,
                         size_t count, ncclDataType_t dt, Backend& backend) {
  return Run(s, plan, scratch, send, recv, count, dt, backend).run();
}

}  // namespace nccl
}  // namespace signlion
