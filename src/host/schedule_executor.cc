#include "host/schedule_executor.h"

#include <algorithm>
#include <cstring>

#include "bits/fields.h"

#include "host/host_params.h"

namespace signlion {
namespace host {

using algo::Buffer;

namespace {

// Words of the first chunk of a transfer: the one that carries the call's
// header (call_check.h), staged with it even when the rest travels in place
// (unless it starts its plane: headerInHeadroom).
int64_t firstChunkWords(int planes, const algo::Range& r, int64_t chunkBytes) {
  return planes * std::min(algo::chunkBlocks(planes, chunkBytes), r.size());
}

// Receives other than a single plane stored where it belongs go through the stage.
bool stagedRecv(const algo::Recv& x) { return x.planes > 1 || x.op != algo::RecvOp::kStore; }

// A single plane's chunk that starts its plane has the layout's headroom in
// front of it (hostScratchLayout): its header travels from (lands in) there,
// and the chunk itself in place, with no copy. Plane 0 of every buffer and
// vote slot starts a region or a slot, so block 0 is all it takes.
bool headerInHeadroom(int planes, int64_t b) { return planes == 1 && b == 0; }

// Blocks per unit of the overlapped CPU work (pack, unpack): 256K elements, a
// tenth of a millisecond or so, so the transfers are looked at often; never
// more than a one-plane chunk's blocks, so work and messages interleave at
// the same grain whatever SIGNLION_HOST_CHUNK_BYTES is.
int64_t overlapBlocks(int64_t chunkBytes) { return std::min<int64_t>(4096, algo::chunkBlocks(1, chunkBytes)); }

}  // namespace

algo::ScratchLayout hostScratchLayout(const algo::Schedule& s) {
  const int64_t chunkBytes = hostChunkBytes();
  int64_t stageWords = 0;
  for (const algo::Step& st : s.steps) {
    // Every transfer may be a peer's first of the call: room for a header in
    // front of its first chunk (and for that chunk, if it would not be staged).
    int64_t w = 0;
    for (const algo::Send& x : st.sends)
      w += (int64_t)kHeaderWords + (x.planes > 1 ? x.bytes() / 8 : firstChunkWords(x.planes, x.range, chunkBytes));
    for (const algo::Recv& x : st.recvs)
      w += (int64_t)kHeaderWords + (stagedRecv(x) ? x.bytes() / 8 : firstChunkWords(x.planes, x.range, chunkBytes));
    stageWords = std::max(stageWords, w);
  }
  return algo::layoutScratch(s, stageWords, 1, (int64_t)kHeaderWords);
}

ncclResult_t ScheduleExecutor::runLocal(const algo::Local& l) {
  const int64_t nb = s_->nblocks, b = l.range.begin, len = l.range.size();
  if (len <= 0) return ncclSuccess;  // an empty shard (fewer blocks than ranks, or count 0)
  switch (l.op) {
    case algo::LocalOp::kPackVotes: {
      size_t first = (size_t)b * bits::kBlockElems;
      if (first >= count_) return ncclSuccess;
      size_t n = std::min(count_ - first, (size_t)len * bits::kBlockElems);
      const char* src = static_cast<const char*>(send_) + first * bits::typeSize(dt_);
      if (l.dst == Buffer::kCounter) {
        k_->pack(src, dt_, n, s_->spec.zeroRule, counter_ + b, (size_t)s_->counterWidth * nb);
      } else {
        k_->pack(src, dt_, n, s_->spec.zeroRule, plane(Buffer::kVotes, l.slot, 0, 1) + b, (size_t)nb);
      }
      return ncclSuccess;
    }
    case algo::LocalOp::kSumVotes: {
      for (int c = 0; c < s_->counters; c++) {
        uint64_t* acc = counter_ + (int64_t)c * s_->counterWidth * nb + b;
        for (int r = 0; r < s_->voteSlots; r++) {
          // Vote r makes the count at most r + 1: the ripple only spans that.
          int wa = r == 0 ? 0 : bits::widthFor((uint64_t)r), wo = bits::widthFor((uint64_t)r + 1);
          k_->add(acc, wa, (size_t)nb, plane(Buffer::kVotes, r, c, 1) + b, 1, (size_t)nb, acc, wo, (size_t)nb,
                  (size_t)len);
        }
      }
      return ncclSuccess;
    }
    case algo::LocalOp::kPackFields:
      bits::packFields(*k_, send_, dt_, count_, s_->spec.zeroRule, s_->fieldBits, fields_, (size_t)s_->fieldWords);
      return ncclSuccess;
    case algo::LocalOp::kDecide: {
      if (l.src == Buffer::kCounter) {
        decide(counter_, (int64_t)s_->counterWidth * nb, l.width, b, len);
        return ncclSuccess;
      }
      // Field-sum: the counts in the fields (however wide) become bit-sliced
      // planes of the width that holds N, then decide as a counter. An
      // average's result planes are those counts: they go straight there.
      const int w = bits::widthFor((uint64_t)s_->nranks);
      const bool average = s_->spec.op == ncclSignAverage;
      uint64_t* planes = average ? result_ : fieldPlanes_;
      size_t first = (size_t)b * bits::kBlockElems;
      size_t n = first < count_ ? std::min(count_ - first, (size_t)len * bits::kBlockElems) : 0;
      for (int c = 0; c < s_->counters; c++)
        bits::fieldsToPlanes(fields_ + (int64_t)c * s_->fieldWords, s_->fieldBits, first, n,
                             planes + (int64_t)c * w * nb + b, w, (size_t)nb);
      if (!average) decide(fieldPlanes_, (int64_t)w * nb, w, b, len);
      return ncclSuccess;
    }
  }
  return ncclInternalError;
}

void ScheduleExecutor::decide(const uint64_t* counter, int64_t mStride, int width, int64_t b, int64_t len) {
  const int64_t nb = s_->nblocks;
  if (s_->spec.op == ncclSignAverage) {
    // The average needs the full count: the result planes are the counter's.
    for (int c = 0; c < s_->counters; c++)
      for (int q = 0; q < width; q++)
        memcpy(result_ + ((int64_t)c * width + q) * nb + b, counter + c * mStride + (int64_t)q * nb + b,
               (size_t)len * 8);
    return;
  }
  bits::Counts cnt{counter + b, width, (size_t)nb};
  if (s_->counters == 2) cnt = bits::Counts{counter + b, width, (size_t)nb, counter + mStride + b, width, (size_t)nb};
  k_->decideBits(cnt, s_->nranks, s_->spec.tieRule, result_ + b, (size_t)nb, (size_t)len);
}

ncclResult_t ScheduleExecutor::onRecv(size_t cookie, size_t bytes) {
  static const char* kFn = "ncclSignHostAllReduce";
  if (cookie & kHeaderCookie) return check_.verify((int)(cookie & ~kHeaderCookie), nullptr, bytes, 0, kFn);
  const Pending& p = pending_[cookie];
  const algo::Recv& r = *p.recv;
  const int64_t nb = s_->nblocks;
  if (p.first)  // the header in front of the payload, before the payload is used
    NCCLCHECK(check_.verify(r.peer, p.data - kHeaderWords, bytes, (size_t)(r.planes * p.len * 8), kFn));
  if (r.op == algo::RecvOp::kAdd) ensurePacked(p.begin, p.begin + p.len);  // adds to this rank's own votes
  if (r.op == algo::RecvOp::kSumWords) {
    // Integer sums of field words: no carry crosses a field (the schedule
    // sized the fields for the largest count).
    for (int c = 0; c < r.planes; c++) {
      uint64_t* dst = plane(r.buf, r.slot, c, r.width) + p.begin;
      const uint64_t* src = p.data + (int64_t)c * p.len;
      for (int64_t i = 0; i < p.len; i++) dst[i] += src[i];
    }
  } else if (r.op == algo::RecvOp::kAdd) {
    for (int c = 0; c < s_->counters; c++) {
      uint64_t* acc = counter_ + (int64_t)c * s_->counterWidth * nb + p.begin;
      k_->add(acc, r.localWidth, (size_t)nb, p.data + (int64_t)c * r.width * p.len, r.width, (size_t)p.len, acc,
              r.resultWidth, (size_t)nb, (size_t)p.len);
    }
  } else if (p.data != plane(r.buf, r.slot, 0, r.width) + p.begin) {
    // kStore through the stage (several planes, or a first message); a
    // single plane otherwise landed in place.
    for (int q = 0; q < r.planes; q++)
      memcpy(plane(r.buf, r.slot, q, r.width) + p.begin, p.data + (int64_t)q * p.len, (size_t)p.len * 8);
  }
  if (unpackEarly_ && r.op == algo::RecvOp::kStore && r.buf == Buffer::kResult)
    unpackQueue_.push_back(algo::Range{p.begin, p.begin + p.len});  // final: unpacked between passes
  return ncclSuccess;
}

void ScheduleExecutor::ensurePacked(int64_t b, int64_t e) {
  if (deferredPack_ == nullptr) return;
  for (int64_t u = b / unit_; u * unit_ < e; u++) {
    if (packed_[(size_t)u]) continue;
    algo::Local unit = *deferredPack_;
    unit.range = algo::Range{u * unit_, std::min(s_->nblocks, (u + 1) * unit_)};
    runLocal(unit);  // a pack cannot fail
    packed_[(size_t)u] = 1;
  }
}

void ScheduleExecutor::unpackRange(int64_t b, int64_t len) {
  const size_t first = (size_t)b * bits::kBlockElems;
  if (len <= 0 || first >= count_) return;
  const size_t n = std::min(count_ - first, (size_t)len * bits::kBlockElems);
  const int64_t nb = s_->nblocks;
  void* out = static_cast<char*>(recv_) + first * bits::typeSize(dt_);
  if (s_->spec.op == ncclSignAverage) {
    const int w = s_->resultPlanes / s_->counters;
    bits::Counts c{result_ + b, w, (size_t)nb};
    if (s_->counters == 2) c = bits::Counts{result_ + b, w, (size_t)nb, result_ + (int64_t)w * nb + b, w, (size_t)nb};
    k_->average(c, s_->nranks, n, dt_, out);
  } else {
    k_->unpack(result_ + b, s_->resultPlanes, (size_t)nb, n, dt_, out);
  }
}

void ScheduleExecutor::addRecvs(const algo::Step& st) {
  const int64_t chunkBytes = hostChunkBytes();
  for (const algo::Recv& x : st.recvs) {
    void* comm = links_.peer(x.peer).recvComm;
    bool first = check_.firstRecv(x.peer);
    if (first && x.range.size() <= 0) check_.recvAlone(transfers_, x.peer, comm);
    int64_t step = algo::chunkBlocks(x.planes, chunkBytes);
    for (int64_t b = x.range.begin; b < x.range.end; b += step) {
      int64_t len = std::min(step, x.range.end - b);
      size_t bytes = (size_t)(x.planes * len * 8);
      uint64_t* data;
      uint64_t* msg;
      if (!stagedRecv(x) && first && headerInHeadroom(x.planes, b)) {
        data = plane(x.buf, x.slot, 0, x.width) + b;  // in place, the header in the headroom in front
        msg = data - kHeaderWords;
      } else if (stagedRecv(x) || first) {
        msg = stageNext_;
        if (first) stageNext_ += kHeaderWords;  // the header lands in front of the payload
        data = stageNext_;
        stageNext_ += x.planes * len;
      } else {
        data = msg = plane(x.buf, x.slot, 0, x.width) + b;  // a single plane lands where it belongs
      }
      // A first message is judged by its header before its size.
      transfers_.recv(comm, msg, bytes + (first ? kHeaderBytes : 0), arena_.mhandle(comm), pending_.size(), !first);
      pending_.push_back({&x, b, len, data, first});
      first = false;
    }
  }
}

bool ScheduleExecutor::addNextSend() {
  const int64_t chunkBytes = hostChunkBytes();
  while (sendIdx_ < step_->sends.size()) {
    const algo::Send& x = step_->sends[sendIdx_];
    void* comm = links_.peer(x.peer).sendComm;
    if (!sendStarted_) {
      // The first message to each peer carries the call's header; to a peer
      // whose first transfer is empty, the header goes alone.
      sendStarted_ = true;
      sendB_ = x.range.begin;
      sendFirst_ = check_.firstSend(x.peer);
      if (sendFirst_ && x.range.size() <= 0) check_.sendAlone(transfers_, comm);
    }
    if (sendB_ >= x.range.end) {
      sendIdx_++;
      sendStarted_ = false;
      continue;
    }
    const int64_t b = sendB_, len = std::min(algo::chunkBlocks(x.planes, chunkBytes), x.range.end - b);
    sendB_ += len;
    ensurePacked(b, b + len);
    uint64_t* data = plane(x.buf, x.slot, 0, x.width) + b;
    size_t bytes = (size_t)(x.planes * len * 8);
    if (sendFirst_ && headerInHeadroom(x.planes, b)) {
      // Other sends of this step may carry the same plane (and header)
      // to other peers: write only what is not there yet.
      uint64_t* msg = data - kHeaderWords;
      CallHeader h;
      check_.writeHeader(&h);
      if (memcmp(msg, &h, kHeaderBytes) != 0) memcpy(msg, &h, kHeaderBytes);
      data = msg;
      bytes += kHeaderBytes;
    } else if (x.planes > 1 || sendFirst_) {  // gather the planes of this chunk (after the header) into one message
      uint64_t* msg = stageNext_;
      if (sendFirst_) {
        check_.writeHeader(stageNext_);
        stageNext_ += kHeaderWords;
        bytes += kHeaderBytes;
      }
      for (int q = 0; q < x.planes; q++)
        memcpy(stageNext_ + q * len, plane(x.buf, x.slot, q, x.width) + b, (size_t)len * 8);
      stageNext_ += x.planes * len;
      data = msg;
    }
    sendFirst_ = false;
    transfers_.send(comm, data, bytes, arena_.mhandle(comm));
    return true;
  }
  return false;
}

void ScheduleExecutor::unpackPiece() {
  algo::Range& r = unpackQueue_[unpackHead_];
  const int64_t len = std::min(unit_, r.size());
  unpackRange(r.begin, len);
  r.begin += len;
  if (r.empty()) unpackHead_++;
}

ncclResult_t ScheduleExecutor::work(bool* more) {
  *more = true;
  if (addNextSend()) return ncclSuccess;
  if (deferredPack_ != nullptr) {
    while (packRest_ < packed_.size() && packed_[packRest_]) packRest_++;
    if (packRest_ < packed_.size()) {
      ensurePacked((int64_t)packRest_ * unit_, (int64_t)(packRest_ + 1) * unit_);
      return ncclSuccess;
    }
  }
  // Unpacking never holds a step up: what is left when its transfers are
  // done waits for the next step's transfers (or the end of the call).
  if (unpackHead_ < unpackQueue_.size() && !transfers_.allDone()) {
    unpackPiece();
    return ncclSuccess;
  }
  *more = false;
  return ncclSuccess;
}

ncclResult_t ScheduleExecutor::run(const algo::Schedule& s, const algo::ScratchLayout& layout, const void* send,
                                   void* recv, size_t count, ncclDataType_t dt) {
  s_ = &s;
  layout_ = &layout;
  send_ = send;
  recv_ = recv;
  count_ = count;
  dt_ = dt;
  k_ = &bits::kernels();
  const int64_t nb = s.nblocks;

  NCCLCHECK(arena_.reserve(static_cast<size_t>(layout.bytes()), net_, links_));
  base_ = reinterpret_cast<uint64_t*>(arena_.base());
  counter_ = base_ + layout.counter;
  result_ = base_ + layout.result;
  votes_ = base_ + layout.votes;
  fields_ = base_ + layout.fields;
  fieldPlanes_ = base_ + layout.fieldPlanes;
  stage_ = base_ + layout.stage;
  unpackEarly_ = algo::resultWrittenOnceAfterPacks(s);
  unit_ = overlapBlocks(hostChunkBytes());
  unpackQueue_.clear();
  unpackHead_ = 0;

  for (size_t i = 0; i < s.steps.size(); i++) {
    const algo::Step& st = s.steps[i];
    deferredPack_ = algo::deferrablePack(s, i);
    const algo::Local* packNext = algo::deferrablePack(s, i + 1);  // runs in the next step's transfers
    for (const algo::Local& l : st.locals) {
      if (&l == deferredPack_ || &l == packNext) continue;
      NCCLCHECK(runLocal(l));
      if (unpackEarly_ && l.op == algo::LocalOp::kDecide && !l.range.empty()) unpackQueue_.push_back(l.range);
    }
    if (!st.communicates()) continue;
    transfers_.clear();
    pending_.clear();
    step_ = &st;
    sendIdx_ = 0;
    sendStarted_ = false;
    stageNext_ = stage_;
    if (deferredPack_ != nullptr) {
      // capacity kept across calls: a warm communicator does not allocate
      packed_.assign((size_t)((nb + unit_ - 1) / unit_), 0);
      packRest_ = 0;
    }
    addRecvs(st);
    // Without a deferred pack every send is ready: all go out at once.
    while (deferredPack_ == nullptr && addNextSend()) {
    }
    NCCLCHECK(transfers_.run([this](size_t cookie, size_t bytes) { return onRecv(cookie, bytes); },
                             [this](bool* more) { return work(more); }));
    deferredPack_ = nullptr;
  }

  // The result planes of every block are here: write the output (what is left of it).
  if (!unpackEarly_) {
    unpackRange(0, nb);
    return ncclSuccess;
  }
  while (unpackHead_ < unpackQueue_.size()) unpackPiece();
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
