// Runs one rank's sign all-reduce schedule (src/algo) on host buffers: the
// locals with the CPU vote kernels, the transfers through Transfers, chunked
// (SIGNLION_HOST_CHUNK_BYTES). It moves bytes and calls kernels; the schedule
// decides everything else.
//
// Steps overlap, chunk by chunk. The whole schedule is cut into items (each
// chunk of a send or receive, each piece of a local) and runs as one batch:
// an item goes as soon as every item of an earlier step that touches the same
// blocks of the same buffer (one of them writing) is done, not when the whole
// earlier step is. So a chunk that has arrived and been added is forwarded
// while the rest of its step is still on the wire (halving-doubling's next
// step, the ring's next hop), a decided piece goes out while the rest is
// decided, and the link does not idle between steps. Within a step the
// schedule's rule holds (no rank writes a range it sends in the same step).
// Receives are posted early, each into its own stage space; what a receive
// does (add, store) waits for the items it depends on. Messages to (from) one
// peer keep the schedule's order, the order ncclNet matches them in.
//
// CPU work overlaps the transfers (the sockets' helper threads move the bytes
// while this thread computes): the votes are packed a piece at a time, the
// first chunk sent as soon as its blocks are packed and the rest packed while
// it travels; the result is unpacked into the output a piece at a time as
// soon as a range is final, while transfers run. The order of writes that
// makes in-place calls safe is kept: every pack is done before the first
// output element is written. Between segments of a long call, the next
// segment's votes are packed while this one waits on the wire (Segments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algo/chunk_order.h"
#include "algo/schedule.h"
#include "algo/scratch_layout.h"
#include "bits/bits.h"
#include "host/arena.h"
#include "host/call_check.h"
#include "host/host_params.h"
#include "host/links.h"
#include "host/transfers.h"

namespace signlion {
namespace host {

// What this executor derives from a schedule, made once per schedule and
// cached with it (algo/schedule_cache.h), so a warm call does no layout or
// dependency work: the arena layout (regions unaligned, the stage sized for
// every staged message of the whole schedule at once, as the steps overlap)
// and the chunks with their waits (algo::ChunkGraph), both for chunkBytes:
// the communicator's (SIGNLION_HOST_CHUNK_BYTES, or what its link's rate
// gives, link_rate.h).
struct HostPlan {
  algo::ScratchLayout layout;
  algo::ChunkGraph graph;
};
void makeHostPlan(const algo::Schedule& s, HostPlan* plan, int64_t chunkBytes = hostChunkBytes());

// A long call runs as segments, one schedule each (sign_allreduce.cc). While
// a segment waits on the wire its rank's CPU is mostly idle, and the next
// segment would begin by packing its votes while its links idle: so the
// executor packs the next segment's votes ahead, a unit at a time when it
// has nothing else to do, and the next run copies them into its counter
// instead of packing (the same bits). `self` names the segment being run;
// nextSend/nextCount are the input of the one after it in the same call
// (nextSend null: none). SIGNLION_HOST_PACK_AHEAD=0 turns it off.
struct SegmentId {
  uint64_t call = 0;  // the communicator's call sequence number
  uint32_t part = 0;  // the segment's index in the call
  bool operator==(const SegmentId& o) const { return call == o.call && part == o.part; }
};
struct Segments {
  SegmentId self;
  const void* nextSend = nullptr;
  size_t nextCount = 0;
};

class ScheduleExecutor {
 public:
  ScheduleExecutor(const Net& net, const Links& links, Arena& arena, CallCheck& check, int timeoutMs)
      : net_(net), links_(links), arena_(arena), check_(check), transfers_(net, timeoutMs) {}

  // count elements of dt from send (any alignment) -> count results into recv.
  // The schedule must have been built for numWords(count) blocks, and plan
  // made by makeHostPlan(s). send may be recv: every pack runs before the
  // first result is written. The call's header (check.begin) goes before the
  // first message to each peer, and the header from each peer is verified
  // before anything received from it is forwarded.
  ncclResult_t run(const algo::Schedule& s, const HostPlan& plan, const void* send, void* recv, size_t count,
                   ncclDataType_t dt, const Segments* segments = nullptr);

  // Units (of packing work) of votes packed ahead for a next segment, and of
  // those the next segment copied instead of packing; since construction.
  uint64_t unitsPackedAhead() const { return unitsPackedAhead_; }
  uint64_t unitsCopiedFromAhead() const { return unitsCopiedFromAhead_; }
  // Tests: pack at most `units` units of a next segment ahead, so that one
  // segment both copies units and packs the rest.
  void capUnitsPackedAheadForTesting(size_t units) { aheadUnitCap_ = units; }

 private:
  // Where plane `plane` of `buf` (slot for kVotes) starts; `payloadWidth` is
  // the per-counter width of a transfer on kCounter.
  uint64_t* plane(algo::Buffer buf, int slot, int plane, int payloadWidth) const {
    return layout_->plane(base_, *s_, buf, slot, plane, payloadWidth);
  }
  ncclResult_t runLocal(const algo::Local& l);
  // Decides blocks [b, b + len) of a counter whose M counter starts mStride
  // words after its P counter (planes nblocks apart) into the result planes.
  void decide(const uint64_t* counter, int64_t mStride, int width, int64_t b, int64_t len);
  ncclResult_t onRecv(size_t cookie, size_t bytes);

  // A chunk of the schedule (algo/chunk_order.h) and where it stands.
  enum class State : uint8_t {
    kWaiting,  // not started (a receive: not posted)
    kPosted,   // a send added to the batch; a receive posted, its data not here
    kArrived,  // a receive whose data is here, its action (add, store) not run
    kDone,     // its buffers are free for later steps (a send: sent, or copied out)
  };
  struct Item {
    algo::Chunk c;
    State state;
    bool first;   // the peer's first message of the call: a header goes with it
    bool staged;  // a receive that lands in the stage; a send gathered into it
    uint64_t* data;  // receive: where its payload lands; staged send: its message
    size_t op;       // its operation in transfers_ (sends and receives, once added)
  };
  const algo::Recv& recvOf(const Item& x) const { return s_->steps[x.c.step].recvs[x.c.index]; }
  const algo::Send& sendOf(const Item& x) const { return s_->steps[x.c.step].sends[x.c.index]; }
  const algo::Local& localOf(const Item& x) const { return s_->steps[x.c.step].locals[x.c.index]; }
  // Cuts the schedule into items_, assigns each staged one its stage space,
  // and adds the headers that travel alone.
  ncclResult_t buildItems();
  // Whether everything item k waits for is done.
  bool ready(size_t k) const { return waiting_[k] == 0; }
  // Whether an arrived receive's action (add, store) may run: its peer's
  // header has been verified (plugins may complete a peer's later messages
  // before its first, and nothing from a peer running another call may be
  // added, forwarded or written out), and it is ready.
  bool consumable(size_t k) const { return peerVerified_[(size_t)recvOf(items_[k]).peer] && ready(k); }
  // Item k may run now (a local, or a consumable arrived receive): queued.
  void runnable(size_t k);
  void markDone(Item& x);
  // Peer's header has passed: its receives that arrived meanwhile may run.
  void verified(int peer);
  // The next bounded piece of work (see the .cc); *more: false when none.
  ncclResult_t work(bool* more);
  ncclResult_t postSend(Item& x);
  void postRecv(Item& x, size_t index);
  ncclResult_t runRecvAction(Item& x);
  // Runs the lazy pack over the units that cover blocks [b, e).
  void ensurePacked(int64_t b, int64_t e);
  bool packsDone() const { return packPending_ == 0 && (lazyPack_ == nullptr || packRest_ >= packed_.size()); }
  // The next segment's votes packed ahead (Segments): countersPerValue
  // planes of `nblocks` words, its first `units` units (unit_ blocks each)
  // packed. Capacity kept (words grows only): bounded by one segment's votes,
  // so a warm communicator does not allocate.
  struct Ahead {
    std::unique_ptr<uint64_t[]> words;
    size_t capacity = 0;
    bool valid = false;  // holds (part of) the votes of segment `id`
    SegmentId id;
    const void* send = nullptr;
    size_t count = 0;
    ncclDataType_t dt = ncclFloat32;
    ncclSignZeroRule_t zeroRule = ncclSignZeroPositive;
    int planes = 1;  // bits::votePlanes(zeroRule): the run copying them needs one per counter
    int64_t nblocks = 0, unit = 0;
    size_t units = 0;
  };
  // Whether this run's lazy pack may copy from ahead_ (it was packed for it).
  bool aheadMatches(const Segments* seg) const;
  // Starts packing the next segment ahead into ahead_ (this run no longer reads it).
  void beginAhead();
  // Packs the next unit of the next segment ahead.
  void packAheadUnit();
  // Whether units of the next segment are left to pack ahead.
  bool aheadPending() const {
    return !aheadUsable_ && ahead_.valid && (int64_t)ahead_.units * ahead_.unit < ahead_.nblocks;
  }

  // Writes the output elements of blocks [b, b + len) from the result planes.
  void unpackRange(int64_t b, int64_t len);
  // Unpacks the next piece of the unpack queue (not empty).
  void unpackPiece();

  const Net& net_;
  const Links& links_;
  Arena& arena_;
  CallCheck& check_;
  Transfers transfers_;
  const bits::Kernels* k_ = nullptr;

  // Per call.
  const algo::Schedule* s_ = nullptr;
  const algo::ScratchLayout* layout_ = nullptr;
  uint64_t* base_ = nullptr;  // the arena
  const void* send_ = nullptr;
  size_t count_ = 0;
  ncclDataType_t dt_ = ncclFloat32;
  uint64_t* counter_ = nullptr;
  uint64_t* result_ = nullptr;
  uint64_t* votes_ = nullptr;
  uint64_t* fields_ = nullptr;       // field-sum words: counters planes of fieldWords
  uint64_t* fieldPlanes_ = nullptr;  // field-sum counts turned into bit-sliced planes to decide
  uint64_t* stage_ = nullptr;
  void* recv_ = nullptr;
  int64_t unit_ = 1;  // blocks per piece of pack, decide or unpack work

  // The items, in the plan's chunk order (items_[k] is chunk k), and per item
  // how many items it still waits for (the plan's waits, counted down as
  // items are done). Capacity kept across calls: a warm communicator does not
  // allocate.
  const algo::ChunkGraph* graph_ = nullptr;
  std::vector<Item> items_;
  std::vector<uint32_t> waiting_;
  size_t doneItems_ = 0;
  // Locals and arrived receives that may run, earliest first (a min-heap of
  // item indices: earlier steps first, as they hold up the most).
  std::vector<uint32_t> runnable_;
  // Per peer, its receives and sends in schedule order (the order ncclNet
  // matches them in; byPeer_ indices into items_): [peerBegin_[2p],
  // peerBegin_[2p + 1]) receives from p, [peerBegin_[2p + 1], peerBegin_[2p + 2])
  // sends to p; next_[2p], next_[2p + 1]: the first not posted yet.
  std::vector<uint32_t> byPeer_;
  std::vector<size_t> peerBegin_;
  std::vector<size_t> next_;
  std::vector<uint8_t> peerVerified_;  // per peer: its call header has come and matched (this call)
  // The pack of the votes into the counter, run a unit at a time when some
  // item first needs its blocks (null: none), and per unit whether it is
  // packed; packPending_: the other packs (items) not done yet.
  const algo::Local* lazyPack_ = nullptr;
  std::vector<uint8_t> packed_;
  size_t packRest_ = 0;  // units below this are known packed
  int packPending_ = 0;
  // Result ranges that are final and not unpacked yet (unpackEarly_: every
  // result block is written once, after every pack); consumed from head.
  bool unpackEarly_ = false;
  std::vector<algo::Range> unpackQueue_;
  size_t unpackHead_ = 0;
  // The segment being run and the input of the one after it (nextSend null:
  // none, or it overlaps this run's output, so it is not packed ahead); the
  // votes packed ahead; aheadUsable_: ahead_ holds this run's own votes (packed
  // during the run before), units below ahead_.units are copied, not packed.
  Segments segs_;
  Ahead ahead_;
  bool aheadUsable_ = false;
  size_t aheadUnitCap_ = SIZE_MAX;
  uint64_t unitsPackedAhead_ = 0, unitsCopiedFromAhead_ = 0;
};

}  // namespace host
}  // namespace signlion
