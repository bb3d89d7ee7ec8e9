#include "host/schedule_executor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <functional>

#include "bits/fields.h"
#include "common/config.h"

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

namespace {

algo::ScratchLayout hostScratchLayout(const algo::Schedule& s, int64_t chunkBytes) {
  // Steps overlap, and every staged message keeps its space until it is
  // done: the stage holds every step's staged messages at once.
  int64_t stageWords = 0;
  for (const algo::Step& st : s.steps) {
    // Every transfer may be a peer's first of the call: room for a header in
    // front of its first chunk (and for that chunk, if it would not be staged).
    for (const algo::Send& x : st.sends)
      stageWords +=
          (int64_t)kHeaderWords + (x.planes > 1 ? x.bytes() / 8 : firstChunkWords(x.planes, x.range, chunkBytes));
    for (const algo::Recv& x : st.recvs)
      stageWords +=
          (int64_t)kHeaderWords + (stagedRecv(x) ? x.bytes() / 8 : firstChunkWords(x.planes, x.range, chunkBytes));
  }
  return algo::layoutScratch(s, stageWords, 1, (int64_t)kHeaderWords);
}

}  // namespace

void makeHostPlan(const algo::Schedule& s, HostPlan* plan, int64_t chunkBytes) {
  plan->layout = hostScratchLayout(s, chunkBytes);
  algo::buildChunkGraph(s, chunkBytes, overlapBlocks(chunkBytes), &plan->graph);
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

void ScheduleExecutor::ensurePacked(int64_t b, int64_t e) {
  if (lazyPack_ == nullptr) return;
  for (int64_t u = b / unit_; u * unit_ < e; u++) {
    if (packed_[(size_t)u]) continue;
    algo::Local unit = *lazyPack_;
    unit.range = algo::Range{u * unit_, std::min(s_->nblocks, (u + 1) * unit_)};
    if (aheadUsable_ && (size_t)u < ahead_.units) {
      // Packed ahead by the previous segment's run: the same bits, copied.
      const int64_t nb = s_->nblocks, len = unit.range.size();
      for (int c = 0; c < s_->counters; c++)
        memcpy(counter_ + (int64_t)c * s_->counterWidth * nb + unit.range.begin,
               ahead_.words.get() + (int64_t)c * nb + unit.range.begin, (size_t)len * 8);
      unitsCopiedFromAhead_++;
    } else {
      runLocal(unit);  // a pack cannot fail
    }
    packed_[(size_t)u] = 1;
  }
}

bool ScheduleExecutor::aheadMatches(const Segments* seg) const {
  return seg != nullptr && ahead_.valid && ahead_.id == seg->self && ahead_.send == send_ && ahead_.count == count_ &&
         ahead_.dt == dt_ && ahead_.zeroRule == s_->spec.zeroRule && ahead_.planes == s_->counters &&
         ahead_.nblocks == s_->nblocks &&
         ahead_.unit == unit_ && lazyPack_ != nullptr && lazyPack_->dst == Buffer::kCounter;
}

void ScheduleExecutor::beginAhead() {
  aheadUsable_ = false;
  ahead_.valid = false;
  // Only for a schedule that packs into its counter lazily (ring, hd, hier,
  // direct, tree; not allgather's votes or field-sum's fields):
  // the next segment's is then the same kind, and copies what is packed.
  if (signlionParamHostPackAhead() == 0 || segs_.nextSend == nullptr || lazyPack_ == nullptr ||
      lazyPack_->dst != Buffer::kCounter)
    return;
  const int64_t nb = std::max<int64_t>(1, algo::blocksForCount(segs_.nextCount));
  const int planes = bits::votePlanes(s_->spec.zeroRule);  // what the pack writes
  const size_t words = (size_t)(planes * nb);
  if (words > ahead_.capacity) {
    // Optional: without the memory, segments pack their own votes.
    ahead_.words.reset(new (std::nothrow) uint64_t[words]);
    ahead_.capacity = ahead_.words ? words : 0;
    if (!ahead_.words) return;
  }
  SegmentId id = segs_.self;
  id.part++;
  ahead_.id = id;
  ahead_.send = segs_.nextSend;
  ahead_.count = segs_.nextCount;
  ahead_.dt = dt_;
  ahead_.zeroRule = s_->spec.zeroRule;
  ahead_.planes = planes;
  ahead_.nblocks = nb;
  ahead_.unit = unit_;
  ahead_.units = 0;
  ahead_.valid = true;
}

void ScheduleExecutor::packAheadUnit() {
  const int64_t b = (int64_t)ahead_.units * ahead_.unit, nb = ahead_.nblocks;
  const size_t first = (size_t)b * bits::kBlockElems;
  if (first < ahead_.count) {
    const size_t n = std::min(ahead_.count - first, (size_t)std::min(ahead_.unit, nb - b) * bits::kBlockElems);
    k_->pack(static_cast<const char*>(ahead_.send) + first * bits::typeSize(ahead_.dt), ahead_.dt, n,
             ahead_.zeroRule, ahead_.words.get() + b, (size_t)nb);
  }
  ahead_.units++;
  unitsPackedAhead_++;
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

void ScheduleExecutor::unpackPiece() {
  algo::Range& r = unpackQueue_[unpackHead_];
  const int64_t len = std::min(unit_, r.size());
  unpackRange(r.begin, len);
  r.begin += len;
  if (r.empty()) unpackHead_++;
}

ncclResult_t ScheduleExecutor::buildItems() {
  const algo::Schedule& s = *s_;
  const algo::ChunkGraph& g = *graph_;
  const std::vector<algo::Chunk>& chunks_ = g.chunks;
  lazyPack_ = g.lazyPackStep < 0 ? nullptr : &s.steps[(size_t)g.lazyPackStep].locals[(size_t)g.lazyPackIndex];
  items_.clear();
  packPending_ = 0;
  uint64_t* stageNext = stage_;
  size_t k = 0;  // the next chunk: they come in the order walked here
  auto chunkOf = [&](algo::Chunk::Kind kind, size_t i, size_t j) {
    return k < chunks_.size() && chunks_[k].kind == kind && chunks_[k].step == i && chunks_[k].index == j;
  };
  for (size_t i = 0; i < s.steps.size(); i++) {
    const algo::Step& st = s.steps[i];
    for (size_t j = 0; j < st.locals.size(); j++)
      for (; chunkOf(algo::Chunk::Kind::kLocal, i, j); k++) {
        items_.push_back({chunks_[k], State::kWaiting, false, false, nullptr, 0});
        const algo::LocalOp op = st.locals[j].op;
        if (op == algo::LocalOp::kPackVotes || op == algo::LocalOp::kPackFields) packPending_++;
      }
    for (size_t j = 0; j < st.recvs.size(); j++) {
      const algo::Recv& x = st.recvs[j];
      bool first = check_.firstRecv(x.peer);
      if (first && x.range.size() <= 0) check_.recvAlone(transfers_, x.peer, links_.peer(x.peer).recvComm);
      for (; chunkOf(algo::Chunk::Kind::kRecv, i, j); k++) {
        const int64_t b = chunks_[k].range.begin, len = chunks_[k].range.size();
        Item it{chunks_[k], State::kWaiting, first, false, nullptr, 0};
        if (!stagedRecv(x) && first && headerInHeadroom(x.planes, b)) {
          it.data = plane(x.buf, x.slot, 0, x.width) + b;  // in place, the header in the headroom in front
        } else if (stagedRecv(x) || first) {
          if (first) stageNext += kHeaderWords;  // the header lands in front of the payload
          it.data = stageNext;
          it.staged = true;
          stageNext += x.wireBytes(len) / 8;
        } else {
          it.data = plane(x.buf, x.slot, 0, x.width) + b;  // a single plane lands where it belongs
        }
        items_.push_back(it);
        first = false;
      }
    }
    for (size_t j = 0; j < st.sends.size(); j++) {
      const algo::Send& x = st.sends[j];
      bool first = check_.firstSend(x.peer);
      // To a peer whose first transfer is empty, the header goes alone.
      if (first && x.range.size() <= 0) check_.sendAlone(transfers_, links_.peer(x.peer).sendComm);
      for (; chunkOf(algo::Chunk::Kind::kSend, i, j); k++) {
        const int64_t b = chunks_[k].range.begin, len = chunks_[k].range.size();
        Item it{chunks_[k], State::kWaiting, first, false, nullptr, 0};
        // Gathered into one message (after the header): several planes, or
        // a first chunk whose header has no headroom in front of it.
        if (!(first && headerInHeadroom(x.planes, b)) && (x.planes > 1 || first)) {
          it.staged = true;
          it.data = stageNext;
          stageNext += (first ? kHeaderWords : 0) + x.wireBytes(len) / 8;
        }
        items_.push_back(it);
        first = false;
      }
    }
  }
  // hostScratchLayout sized the stage for exactly this walk.
  if (stageNext > base_ + layout_->words) {
    WARN("host executor: the %s schedule stages %lld words more than its layout holds", algoName(s.algo),
         (long long)(stageNext - (base_ + layout_->words)));
    return ncclInternalError;
  }
  if (items_.size() != chunks_.size()) return ncclInternalError;  // every chunk is an item, in order
  waiting_.assign(g.waits.begin(), g.waits.end());
  doneItems_ = 0;
  runnable_.clear();
  // Each item is queued at most once, and each send notifies at most once:
  // room for all, so the timing of a call never makes a warm one allocate.
  runnable_.reserve(items_.size());
  transfers_.reserveSent(items_.size());
  for (size_t k = 0; k < items_.size(); k++)
    if (items_[k].c.kind == algo::Chunk::Kind::kLocal && ready(k)) runnable(k);
  // Each peer's receives and sends in schedule order (a counting sort).
  const size_t n = (size_t)s.nranks;
  peerBegin_.assign(2 * n + 1, 0);
  auto slotOf = [&](const Item& x) {
    return x.c.kind == algo::Chunk::Kind::kRecv ? 2 * (size_t)recvOf(x).peer : 2 * (size_t)sendOf(x).peer + 1;
  };
  for (const Item& x : items_)
    if (x.c.kind != algo::Chunk::Kind::kLocal) peerBegin_[slotOf(x) + 1]++;
  for (size_t q = 0; q < 2 * n; q++) peerBegin_[q + 1] += peerBegin_[q];
  next_.assign(peerBegin_.begin(), peerBegin_.end() - 1);
  byPeer_.resize(peerBegin_[2 * n]);
  for (size_t k = 0; k < items_.size(); k++)
    if (items_[k].c.kind != algo::Chunk::Kind::kLocal) byPeer_[next_[slotOf(items_[k])]++] = (uint32_t)k;
  next_.assign(peerBegin_.begin(), peerBegin_.end() - 1);
  if (lazyPack_ != nullptr) {
    packed_.assign((size_t)((s.nblocks + unit_ - 1) / unit_), 0);
    packRest_ = 0;
  }
  return ncclSuccess;
}

void ScheduleExecutor::runnable(size_t k) {
  runnable_.push_back((uint32_t)k);
  std::push_heap(runnable_.begin(), runnable_.end(), std::greater<uint32_t>());
}

void ScheduleExecutor::markDone(Item& x) {
  x.state = State::kDone;
  doneItems_++;
  const size_t k = (size_t)(&x - items_.data());
  for (uint32_t i = graph_->succBegin[k]; i < graph_->succBegin[k + 1]; i++) {
    const uint32_t y = graph_->succ[i];
    if (--waiting_[y] != 0) continue;
    const Item& z = items_[y];
    // A send or a receive not posted yet is looked at by work's posting.
    if ((z.c.kind == algo::Chunk::Kind::kLocal && z.state == State::kWaiting) ||
        (z.c.kind == algo::Chunk::Kind::kRecv && z.state == State::kArrived && consumable(y)))
      runnable(y);
  }
}

void ScheduleExecutor::verified(int peer) {
  peerVerified_[(size_t)peer] = 1;
  for (size_t i = peerBegin_[2 * (size_t)peer]; i < peerBegin_[2 * (size_t)peer + 1]; i++)
    if (items_[byPeer_[i]].state == State::kArrived && ready(byPeer_[i])) runnable(byPeer_[i]);
}

void ScheduleExecutor::postRecv(Item& x, size_t index) {
  const algo::Recv& r = recvOf(x);
  void* comm = links_.peer(r.peer).recvComm;
  const size_t bytes = (size_t)r.wireBytes(x.c.range.size()) + (x.first ? kHeaderBytes : 0);
  uint64_t* msg = x.first ? x.data - kHeaderWords : x.data;
  x.op = transfers_.size();
  // A first message is judged by its header before its size.
  transfers_.recv(comm, msg, bytes, arena_.mhandle(comm), index, !x.first);
  x.state = State::kPosted;
}

ncclResult_t ScheduleExecutor::postSend(Item& x) {
  const algo::Send& t = sendOf(x);
  void* comm = links_.peer(t.peer).sendComm;
  if (t.buf == Buffer::kCounter) ensurePacked(x.c.range.begin, x.c.range.end);
  uint64_t* data = plane(t.buf, t.slot, 0, t.width) + x.c.range.begin;
  size_t bytes = (size_t)t.wireBytes(x.c.range.size());
  if (x.staged) {
    uint64_t* msg = x.data;
    uint64_t* at = msg;
    if (x.first) {
      check_.writeHeader(at);
      at += kHeaderWords;
      bytes += kHeaderBytes;
    }
    if (t.coding == algo::Coding::kTrits) {
      k_->encodeTrits(plane(t.buf, 0, 0, t.width) + x.c.range.begin, plane(t.buf, 0, 1, t.width) + x.c.range.begin,
                      (size_t)x.c.range.size(), reinterpret_cast<uint8_t*>(at));
    } else {
      for (int q = 0; q < t.planes; q++)
        memcpy(at + q * x.c.range.size(), plane(t.buf, t.slot, q, t.width) + x.c.range.begin,
               (size_t)x.c.range.size() * 8);
    }
    data = msg;
  } else if (x.first) {
    // In place with the header in the headroom. Other sends may carry the
    // same plane (and header) to other peers: write only what is not there yet.
    uint64_t* msg = data - kHeaderWords;
    CallHeader h;
    check_.writeHeader(&h);
    if (memcmp(msg, &h, kHeaderBytes) != 0) memcpy(msg, &h, kHeaderBytes);
    data = msg;
    bytes += kHeaderBytes;
  }
  x.op = transfers_.size();
  x.state = State::kPosted;
  // Copied: its blocks are free now. Else when it has gone (transfers_.sent()).
  const size_t k = (size_t)(&x - items_.data());
  transfers_.send(comm, data, bytes, arena_.mhandle(comm), x.staged ? Transfers::kNoNotify : k);
  if (x.staged) markDone(x);
  return ncclSuccess;
}

ncclResult_t ScheduleExecutor::runRecvAction(Item& x) {
  const algo::Recv& r = recvOf(x);
  const int64_t nb = s_->nblocks;
  if (r.op == algo::RecvOp::kSumWords) {
    // Integer sums of field words: no carry crosses a field (the schedule
    // sized the fields for the largest count).
    for (int c = 0; c < r.planes; c++) {
      uint64_t* dst = plane(r.buf, r.slot, c, r.width) + x.c.range.begin;
      const uint64_t* src = x.data + (int64_t)c * x.c.range.size();
      for (int64_t i = 0; i < x.c.range.size(); i++) dst[i] += src[i];
    }
  } else if (r.op == algo::RecvOp::kAdd) {
    ensurePacked(x.c.range.begin, x.c.range.end);  // adds to this rank's own votes
    for (int c = 0; c < s_->counters; c++) {
      uint64_t* acc = counter_ + (int64_t)c * s_->counterWidth * nb + x.c.range.begin;
      k_->add(acc, r.localWidth, (size_t)nb, x.data + (int64_t)c * r.width * x.c.range.size(), r.width, (size_t)x.c.range.size(), acc,
              r.resultWidth, (size_t)nb, (size_t)x.c.range.size());
    }
  } else if (r.coding == algo::Coding::kTrits) {
    // A result coded 5 elements per byte (always staged: 2 planes).
    if (!k_->decodeTrits(reinterpret_cast<const uint8_t*>(x.data), (size_t)x.c.range.size(),
                         plane(r.buf, 0, 0, r.width) + x.c.range.begin, plane(r.buf, 0, 1, r.width) + x.c.range.begin)) {
      WARN("ncclSignHostAllReduce: rank %d sent rank %d a malformed coded result for blocks [%lld, %lld) (a byte "
           "above %u, or an element both +1 and -1)",
           r.peer, s_->rank, (long long)x.c.range.begin, (long long)x.c.range.end, bits::kTritMaxByte);
      return ncclSystemError;
    }
  } else if (x.data != plane(r.buf, r.slot, 0, r.width) + x.c.range.begin) {
    // kStore through the stage (several planes, or a first message); a
    // single plane otherwise landed in place.
    for (int q = 0; q < r.planes; q++)
      memcpy(plane(r.buf, r.slot, q, r.width) + x.c.range.begin, x.data + (int64_t)q * x.c.range.size(), (size_t)x.c.range.size() * 8);
  }
  if (unpackEarly_ && r.op == algo::RecvOp::kStore && r.buf == Buffer::kResult)
    unpackQueue_.push_back(algo::Range{x.c.range.begin, x.c.range.end});  // final: unpacked between passes
  markDone(x);
  return ncclSuccess;
}

ncclResult_t ScheduleExecutor::onRecv(size_t cookie, size_t bytes) {
  static const char* kFn = "ncclSignHostAllReduce";
  if (cookie & kHeaderCookie) {
    const int peer = (int)(cookie & ~kHeaderCookie);
    NCCLCHECK(check_.verify(peer, nullptr, bytes, 0, kFn));
    verified(peer);
    return ncclSuccess;
  }
  Item& x = items_[cookie];
  const algo::Recv& r = recvOf(x);
  if (x.first) {  // the header in front of the payload, before the payload is used
    NCCLCHECK(check_.verify(r.peer, x.data - kHeaderWords, bytes, (size_t)r.wireBytes(x.c.range.size()), kFn));
    x.state = State::kArrived;
    verified(r.peer);  // may queue this one too: it runs now, and is skipped there once done
  }
  x.state = State::kArrived;
  // At once if the peer's header has passed and what it adds to (stores
  // over) is final; else work does it (queued when it is).
  return consumable(cookie) ? runRecvAction(x) : ncclSuccess;
}

// One bounded piece of CPU work between Transfers passes, most urgent first:
// post what may be posted (receives, then the next send whose blocks are
// final), run an arrived receive's action, run a local, pack a unit, unpack
// a piece of the result.
ncclResult_t ScheduleExecutor::work(bool* more) {
  *more = true;
  // Sends that have gone: their blocks may be written now.
  for (size_t k : transfers_.sent()) markDone(items_[k]);
  transfers_.clearSent();
  // Messages to (from) a peer go in the schedule's order: only the next one
  // of each peer is looked at. A staged receive lands in space of its own:
  // posted at once. One in place waits until the blocks it overwrites are free.
  const size_t n = (size_t)s_->nranks;
  bool posted = false;
  for (size_t p = 0; p < n; p++) {
    for (size_t& i = next_[2 * p]; i < peerBegin_[2 * p + 1]; i++) {
      Item& x = items_[byPeer_[i]];
      if (!x.staged && !ready(byPeer_[i])) break;
      postRecv(x, byPeer_[i]);
      posted = true;
    }
  }
  // One send (it may pack a chunk) per piece of work: the earliest ready one.
  size_t best = SIZE_MAX;
  for (size_t p = 0; p < n; p++) {
    const size_t i = next_[2 * p + 1];
    if (i < peerBegin_[2 * p + 2] && ready(byPeer_[i]) && (best == SIZE_MAX || byPeer_[i] < byPeer_[next_[best]]))
      best = 2 * p + 1;
  }
  if (best != SIZE_MAX) return postSend(items_[byPeer_[next_[best]++]]);
  if (posted) return ncclSuccess;
  while (!runnable_.empty()) {
    std::pop_heap(runnable_.begin(), runnable_.end(), std::greater<uint32_t>());
    Item& x = items_[runnable_.back()];
    runnable_.pop_back();
    if (x.state == State::kDone) continue;  // an arrived receive run at once by onRecv
    if (x.c.kind == algo::Chunk::Kind::kRecv) return runRecvAction(x);
    const algo::Local& l = localOf(x);
    if (l.src == Buffer::kCounter && l.op == algo::LocalOp::kDecide) ensurePacked(x.c.range.begin, x.c.range.end);
    algo::Local piece = l;
    piece.range = x.c.range;
    NCCLCHECK(runLocal(piece));
    if (l.op == algo::LocalOp::kPackVotes || l.op == algo::LocalOp::kPackFields) packPending_--;
    if (unpackEarly_ && l.op == algo::LocalOp::kDecide) unpackQueue_.push_back(piece.range);
    markDone(x);
    return ncclSuccess;
  }
  if (lazyPack_ != nullptr) {
    while (packRest_ < packed_.size() && packed_[packRest_]) packRest_++;
    if (packRest_ < packed_.size()) {
      ensurePacked((int64_t)packRest_ * unit_, (int64_t)(packRest_ + 1) * unit_);
      return ncclSuccess;
    }
  }
  // Unpacking never holds a transfer up: what is left when none is in flight
  // waits for the next ones (or the call's end). An in-place call's input is
  // read by the packs: no output element is written before they are done.
  if (unpackHead_ < unpackQueue_.size() && packsDone() && !transfers_.allDone()) {
    unpackPiece();
    return ncclSuccess;
  }
  // Last, and only while transfers are in flight: the next segment's votes
  // (this run's packs are done: ahead_ is free).
  if (packsDone() && !transfers_.allDone()) {
    if (aheadUsable_) beginAhead();  // this run read ahead_ for its packs, and is done with them
    if (aheadPending() && ahead_.units < aheadUnitCap_) {
      packAheadUnit();
      return ncclSuccess;
    }
  }
  *more = false;
  return ncclSuccess;
}

ncclResult_t ScheduleExecutor::run(const algo::Schedule& s, const HostPlan& plan, const void* send, void* recv,
                                   size_t count, ncclDataType_t dt, const Segments* segments) {
  const algo::ScratchLayout& layout = plan.layout;
  s_ = &s;
  layout_ = &layout;
  graph_ = &plan.graph;
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
  unit_ = plan.graph.pieceBlocks;  // the grain the plan was cut with
  unpackQueue_.clear();
  unpackHead_ = 0;

  transfers_.clear();
  peerVerified_.assign((size_t)s.nranks, 0);
  NCCLCHECK(buildItems());
  // Packing ahead reads the next segment's input while this one's output is
  // written: not when the two overlap (recv a shifted send; in place, the
  // next segment's input lies past this one's output).
  segs_ = Segments{};
  if (segments != nullptr) {
    segs_ = *segments;
    // As addresses: the two may be unrelated objects.
    const uintptr_t next = reinterpret_cast<uintptr_t>(segments->nextSend);
    const uintptr_t out = reinterpret_cast<uintptr_t>(recv);
    const size_t esize = bits::typeSize(dt);
    if (next != 0 && next < out + count * esize && out < next + segments->nextCount * esize) segs_.nextSend = nullptr;
  }
  aheadUsable_ = aheadMatches(segments);
  if (!aheadUsable_) beginAhead();  // what ahead_ held is for no run to come
  NCCLCHECK(transfers_.run([this](size_t cookie, size_t bytes) { return onRecv(cookie, bytes); },
                           [this](bool* more) { return work(more); }));
  for (Item& x : items_)
    if (x.c.kind == algo::Chunk::Kind::kSend && x.state == State::kPosted) markDone(x);  // every operation has completed
  if (doneItems_ != items_.size()) {
    WARN("host executor: %zu of %zu items of the %s schedule never became ready", items_.size() - doneItems_,
         items_.size(), algoName(s.algo));
    return ncclInternalError;
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
