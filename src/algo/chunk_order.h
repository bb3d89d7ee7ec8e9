// How the steps of a schedule overlap when an executor runs it a chunk at a
// time (the host executor, src/host/schedule_executor.h): the schedule cut
// into chunks (each message chunk, each piece of a local), and which earlier
// chunks each one must wait for. A chunk waits only for the chunks of earlier
// steps (and the locals of its own step before it: a step's locals run before
// its transfers) that touch the same blocks of the same buffer, one of them
// writing. So step k+1 may send a chunk as soon as that chunk of step k has
// arrived and been added, not when all of step k has: the link does not idle
// between steps. Plain data, no I/O; the rules are the schedule's (schedule.h).
#pragma once

#include <cstdint>
#include <vector>

#include "algo/schedule.h"

namespace signlion {
namespace algo {

struct Chunk {
  enum class Kind : uint8_t { kLocal, kRecv, kSend };
  Kind kind = Kind::kLocal;
  uint32_t step = 0;
  uint32_t index = 0;  // into the step's locals, recvs or sends
  Range range;         // blocks (kFields transfers: words)
};

// The schedule's chunks, step by step: each step's locals (decides in pieces
// of pieceBlocks, others whole; empty ones left out), then its receives, then
// its sends, each transfer cut with chunkBlocks(planes, chunkBytes) from the
// start of its range. The pack of the votes into the counter over every
// block, in a step before anything else touches the counter, is no chunk: it
// is returned in *lazyPack (else nullptr), for the executor to run on demand
// (its blocks before anything reads or adds to them). `out` keeps its
// capacity (a warm caller does not allocate).
void cutIntoChunks(const Schedule& s, int64_t chunkBytes, int64_t pieceBlocks, std::vector<Chunk>* out,
                   const Local** lazyPack);

// Whether x must wait for y to be done: y is of an earlier step, or a local of
// x's step before x (y before x in cutIntoChunks' order), and they touch the
// same blocks of the same buffer (vote slots apart; field words and blocks do
// not compare, so kFields overlaps whole), one of them writing. A receive
// writes its range (an add reads it too); a send reads its range until it is
// sent (or copied out).
bool chunkWaitsFor(const Schedule& s, const Chunk& x, const Chunk& y);

// The waits of a whole schedule, made once per schedule (and cached with it)
// so that an executor knows in O(1) when a chunk may go: per chunk how many
// chunks it waits for (chunkWaitsFor), and whom it holds up. The executor
// copies `waits`, and as each chunk is done decrements its successors' counts;
// a chunk whose count is 0 is ready. Built from the pairs of chunks that
// touch overlapping blocks of one buffer (a sweep, not all pairs), so a
// schedule cut into many small chunks (SIGNLION_HOST_CHUNK_BYTES down to 64 B)
// costs about the number of its chunks times the chunks over one block.
struct ChunkGraph {
  int64_t chunkBytes = 0;   // what it was cut with
  int64_t pieceBlocks = 0;
  std::vector<Chunk> chunks;        // cutIntoChunks
  int lazyPackStep = -1;            // the lazy pack (cutIntoChunks): its step and
  int lazyPackIndex = -1;           // index into the step's locals; -1: none
  std::vector<uint32_t> waits;      // per chunk: how many chunks it waits for
  std::vector<uint32_t> succBegin;  // chunk i holds up succ[succBegin[i] .. succBegin[i + 1])
  std::vector<uint32_t> succ;
};
void buildChunkGraph(const Schedule& s, int64_t chunkBytes, int64_t pieceBlocks, ChunkGraph* g);

}  // namespace algo
}  // namespace signlion
