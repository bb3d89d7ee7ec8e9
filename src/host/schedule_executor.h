// Runs one rank's sign all-reduce schedule (src/algo) on host buffers: the
// locals with the CPU vote kernels, the transfers through Transfers, chunked
// (SIGNLION_HOST_CHUNK_BYTES) so each received chunk is added while the next
// ones are still on the wire. It moves bytes and calls kernels; the schedule
// decides everything else.
//
// CPU work overlaps the transfers (the sockets' helper threads move the bytes
// while this thread computes): the first step's votes are packed a chunk at a
// time, each chunk sent as soon as it is packed and the rest packed while it
// travels; the result is unpacked into the output a piece at a time as soon
// as a range is final (decided here, or stored from a peer), while the
// remaining transfers run. The order of writes that makes in-place calls safe
// is kept: every pack is done before the first output element is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/schedule.h"
#include "algo/scratch_layout.h"
#include "bits/bits.h"
#include "host/arena.h"
#include "host/call_check.h"
#include "host/links.h"
#include "host/transfers.h"

namespace signlion {
namespace host {

// The arena layout this executor runs s with: its regions unaligned, its
// stage the largest step's staged payloads (sends and receives of more than
// one plane, and receives that add or sum). Made once per schedule and cached
// with it, so a warm call does no layout work.
algo::ScratchLayout hostScratchLayout(const algo::Schedule& s);

class ScheduleExecutor {
 public:
  ScheduleExecutor(const Net& net, const Links& links, Arena& arena, CallCheck& check, int timeoutMs)
      : net_(net), links_(links), arena_(arena), check_(check), transfers_(net, timeoutMs) {}

  // count elements of dt from send (any alignment) -> count results into recv.
  // The schedule must have been built for numWords(count) blocks, and layout
  // be hostScratchLayout(s). send may be recv: every pack runs before the
  // first result is written. The call's header (check.begin) goes before the
  // first message to each peer, and the header from each peer is verified
  // before anything received from it is forwarded.
  ncclResult_t run(const algo::Schedule& s, const algo::ScratchLayout& layout, const void* send, void* recv,
                   size_t count, ncclDataType_t dt);

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

  // The overlap (see the top of this file).
  // Posts this step's receives (they take no CPU work to prepare).
  void addRecvs(const algo::Step& st);
  // Adds the next chunk of this step's sends to the batch (packing its blocks
  // first when the step's pack is deferred); false when all are added.
  bool addNextSend();
  // One bounded piece of CPU work between Transfers passes: the next send
  // chunk, else the next unit of the deferred pack, else, while transfers are
  // in flight, the next piece of the unpack queue. *more: false when none was
  // left (the rest of the queue waits for the next step, or the call's end).
  ncclResult_t work(bool* more);
  // Runs the deferred pack over the units that cover blocks [b, e).
  void ensurePacked(int64_t b, int64_t e);
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

  // Per step: the send cursor (addNextSend) and the next free stage word.
  const algo::Step* step_ = nullptr;
  size_t sendIdx_ = 0;
  int64_t sendB_ = 0;
  bool sendStarted_ = false;
  bool sendFirst_ = false;
  uint64_t* stageNext_ = nullptr;
  int64_t unit_ = 1;  // blocks per piece of overlapped pack or unpack work
  // The pack deferred into this step's transfers (null: none, or done), and
  // per unit whether it is packed yet.
  const algo::Local* deferredPack_ = nullptr;
  std::vector<uint8_t> packed_;
  size_t packRest_ = 0;  // units below this are known packed
  // Result ranges that are final and not unpacked yet (unpackEarly_: every
  // result block is written once, after every pack); consumed from head.
  bool unpackEarly_ = false;
  std::vector<algo::Range> unpackQueue_;
  size_t unpackHead_ = 0;

  // A received chunk waiting for its action: the recv, its block range, and
  // where its payload landed (planes of len words, plane-major).
  struct Pending {
    const algo::Recv* recv;
    int64_t begin;
    int64_t len;
    uint64_t* data;
    bool first;  // the peer's first message of the run: a header precedes data
  };
  std::vector<Pending> pending_;
};

}  // namespace host
}  // namespace signlion
