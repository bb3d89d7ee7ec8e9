// A schedule of the sign all-reduce: for one rank of an N-rank communicator,
// the list of steps it runs (what to pack, send, receive, add and decide), as
// plain data. Executors (host, NCCL) move the bytes and call the bit kernels;
// they never decide policy. docs/ALGORITHMS.md describes every algorithm.
//
// Units. Elements are grouped into blocks of 64; every range below is in
// blocks (or, for the field-sum buffer, in 64-bit field words), and every
// split happens at a block (word) boundary. A counter of width w over B blocks
// is w bit-planes, plane-major, one uint64 per block per plane: 8*w*B bytes.
// In ternary mode (ncclSignZeroAbstain) a counter value is a pair of counters
// (P = #(+1), M = #(-1)), so a message carries 2*w planes.
//
// Step semantics, the same on every rank: a step first runs its `locals` in
// order, then posts all its sends and receives together. Sends read the
// buffer as it is after the locals; a receive's action (add, store, sum) may
// run as soon as its data arrives, because within a step no rank writes a
// range it sends. Step i of every rank matches step i of every other rank: a
// send from a to b in step i has exactly one receive of b from a in step i,
// with the same buffer, range and bytes. Transfers of zero bytes are omitted
// (both sides agree on them), so a step may be empty on some ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/topology.h"
#include "bits/bits.h"
#include "bits/trits.h"
#include "nccl_sign.h"

namespace signlion {
namespace algo {

constexpr int kBlockElems = static_cast<int>(bits::kBlockElems);  // elements per block (bits per plane word)

// What is being reduced: the op and the two rules of nccl_sign.h.
struct OpSpec {
  ncclSignOp_t op = ncclSignMajority;
  ncclSignZeroRule_t zeroRule = ncclSignZeroPositive;
  ncclSignTieRule_t tieRule = ncclSignTieZero;
};

// The width rule: the fewest bits that hold any count in [0, maxCount]
// (bit_width(maxCount), at least 1).
int counterWidth(int64_t maxCount);

// Counters per value: 1 in the binary modes, 2 (P and M) in ternary mode.
int countersPerValue(ncclSignZeroRule_t zeroRule);

// Planes per element of the decided result that is gathered:
//  majority: 1 if a tie rule maps ties onto a side, else 2 (-1/0/+1) when a tie
//            can happen (N even, or ternary), else 1;
//  average:  the full count, width(N) planes (P) or 2*width(N) (P then M).
int resultPlanes(ncclSignOp_t op, ncclSignZeroRule_t zeroRule, ncclSignTieRule_t tieRule, int nranks);

// Blocks of 64 elements that hold `count` elements.
inline int64_t blocksForCount(uint64_t count) { return static_cast<int64_t>((count + kBlockElems - 1) / kBlockElems); }

// [begin, end) in the units of a buffer (blocks, or field words).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};
inline bool operator==(const Range& a, const Range& b) { return a.begin == b.begin && a.end == b.end; }

// Blocks per chunk when an executor cuts a transfer of `planes` planes into
// chunks of at most chunkBytes: as many as fit, at least one. Sender and
// receiver cut with the same rule, so their chunks match. (A transfer cuts
// with chunkBlocks(Transfer, chunkBytes) below, which knows its coding.)
inline int64_t chunkBlocks(int planes, int64_t chunkBytes) {
  const int64_t perBlock = 8 * static_cast<int64_t>(planes > 1 ? planes : 1);
  return chunkBytes / perBlock > 1 ? chunkBytes / perBlock : 1;
}

// How a transfer's payload travels.
//  kPlanes: its planes, plane-major, 8 bytes per plane per unit of range.
//  kTrits:  a decided -1/0/+1 result (2 planes in the buffer) coded 5 values
//           per byte (src/bits/trits.h): 64 bytes per group of 5 blocks, a
//           last partial group as its 2 planes; 1.6 bits per element.
// Only the wire changes: both ends hold the planes in their buffers.
enum class Coding : uint8_t { kPlanes, kTrits };

// Algorithms whose exchange is one collective on an NCCL communicator
// (ncclAllGather, ncclAllReduce) rather than one grouped step per schedule
// step: the NCCL executor runs them so and the cost model prices them so.
inline bool runsAsOneCollective(ncclSignAlgo_t algo) {
  return algo == ncclSignAlgoAllGather || algo == ncclSignAlgoFieldSum;
}

// Shard i of `count` units split into `parts` contiguous, balanced shards
// (the first count%parts shards are one unit longer). Empty when count < parts.
Range shardRange(int64_t count, int parts, int i);

// The buffers a schedule names. Every one covers the whole message.
enum class Buffer : uint8_t {
  kCounter,  // the accumulating counter: counters*width planes per block
  kResult,   // the decided result: resultPlanes planes per block; the output
  kVotes,    // gathered 1-bit vote vectors, one slot per origin rank (allgather)
  kFields,   // field-sum words: counters planes of fieldWords words
};

enum class LocalOp : uint8_t {
  kPackVotes,   // own input -> dst (kCounter, or kVotes slot `slot`): width 1, max 1
  kPackFields,  // own input -> kFields: one fieldBits-wide field per element
  kSumVotes,    // kCounter[range] = sum of all vote slots: max N
  kDecide,      // kResult[range] = decide(src[range]); src is kCounter or kFields
};

struct Local {
  LocalOp op;
  Buffer src = Buffer::kCounter;  // kDecide: what is decided (else unused)
  Buffer dst = Buffer::kCounter;  // what is written
  int slot = 0;                   // kPackVotes into kVotes: the slot (own rank)
  Range range;                    // blocks (all locals range over blocks)
  int64_t maxCount = 0;           // max count of src (kDecide) or of dst after the op
  int width = 0;                  // counterWidth(maxCount) (kFields: fieldBits)
};

enum class RecvOp : uint8_t {
  kAdd,       // kCounter[range] += incoming counter (bit-sliced add)
  kStore,     // copy into the buffer (kResult, or a kVotes slot)
  kSumWords,  // kFields[range] += incoming words (integer uint64 sum, no carry across fields)
};

// One message. The payload is `planes` planes of range.size() words each,
// plane-major (in ternary, the P planes then the M planes).
struct Transfer {
  int peer = -1;
  Buffer buf = Buffer::kCounter;
  int slot = 0;          // kVotes: the origin rank whose votes travel
  Range range;           // blocks, or words for kFields
  int planes = 0;        // 64-bit words per unit of range that travel
  int width = 0;         // per-counter width of the payload (kCounter/kVotes: planes/counters)
  int64_t maxCount = 0;  // max count of the payload (counters, votes, fields: per field)
  Coding coding = Coding::kPlanes;  // set by buildSchedule (codeResultTransfers)
  // Bytes on the wire for `units` units of range starting at a chunk cut
  // (chunkBlocks(Transfer)), and for the whole transfer.
  int64_t wireBytes(int64_t units) const {
    return coding == Coding::kTrits ? static_cast<int64_t>(bits::tritBytes(static_cast<size_t>(units)))
                                    : 8 * static_cast<int64_t>(planes) * units;
  }
  int64_t bytes() const { return wireBytes(range.size()); }
};

// Blocks per chunk of transfer t, cut from the start of its range: a trit
// coded transfer is cut at whole groups of 5 blocks (as many groups as fit
// in chunkBytes, at least one), so that every chunk but the last is whole
// groups and each chunk is coded on its own.
inline int64_t chunkBlocks(const Transfer& t, int64_t chunkBytes) {
  if (t.coding != Coding::kTrits) return chunkBlocks(t.planes, chunkBytes);
  const int64_t groups = chunkBytes / static_cast<int64_t>(bits::kTritGroupBytes);
  return static_cast<int64_t>(bits::kTritGroupBlocks) * (groups > 1 ? groups : 1);
}

struct Send : Transfer {};

struct Recv : Transfer {
  RecvOp op = RecvOp::kStore;
  // kAdd: the receiver's counter over `range` before and after the add.
  int64_t localMax = 0;
  int localWidth = 0;
  int64_t resultMax = 0;
  int resultWidth = 0;
};

struct Step {
  std::vector<Local> locals;
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  // Some rank of the communicator sends in this step. A step can be idle on
  // this rank (an empty shard, a folded rank) and still cost a latency on the
  // critical path; cost models count these.
  bool anyRankCommunicates = false;
  int64_t bytesSent() const;
  int64_t bytesReceived() const;
  bool communicates() const { return !sends.empty() || !recvs.empty(); }
};

struct Schedule {
  ncclSignAlgo_t algo = ncclSignAlgoAuto;
  int nranks = 0;
  int rank = 0;
  int64_t nblocks = 0;
  OpSpec spec;
  int counters = 1;      // countersPerValue(spec.zeroRule)
  int resultPlanes = 1;  // resultPlanes(...) for this N
  // Scratch sizing: the largest count this rank's kCounter ever holds (over
  // any range) and its width. kCounter needs counters*counterWidth planes.
  int64_t counterMax = 0;
  int counterWidth = 0;
  int voteSlots = 0;  // kVotes slots (allgather: N, else 0)
  // Field-sum only: field width, fields per word, words per counter plane.
  int fieldBits = 0;
  int fieldsPerWord = 0;
  int64_t fieldWords = 0;
  // How many peers this rank's sends may be on the wire to at once. An
  // executor that posts each send as soon as its blocks are ready overlaps
  // the sends of steps that wait on no receive: direct's N-1 in each phase.
  // 1 where each send waits for the receive before it (ring,
  // halving-doubling). The host communicator paces its links by it
  // (host/send_pacing.h).
  int concurrentSendPeers = 1;
  std::vector<Step> steps;

  int64_t bytesSent() const;  // this rank, whole call
  int64_t bytesReceived() const;
  int messageSteps() const;             // steps in which this rank sends or receives
  int64_t maxRecvBytesPerStep() const;  // staging space for one step's receives
  // Bytes of each buffer this rank needs (uint64 words * 8).
  int64_t counterBytes() const { return 8 * nblocks * counters * counterWidth; }
  int64_t resultBytes() const { return 8 * nblocks * resultPlanes; }
  int64_t votesBytes() const { return 8 * nblocks * counters * voteSlots; }
  int64_t fieldsBytes() const { return 8 * fieldWords * counters; }
  // Where plane `plane` of `buf` starts, in words from the start of that
  // buffer (kVotes: of vote slot `slot`). Planes hold nblocks words (kFields:
  // fieldWords). For kCounter, `payloadWidth` is the per-counter width of a
  // transfer's payload: its plane p is bit p % payloadWidth of counter
  // p / payloadWidth (P, then M), and in the buffer counter c starts
  // c * counterWidth planes in. Every executor addresses buffers this way.
  int64_t planeOffset(Buffer buf, int slot, int plane, int payloadWidth) const;
};

// The shape of CPU work that overlaps the transfers, as the cost model prices
// the host executor (which packs on demand: algo/chunk_order.h's lazy pack):
// The pack that can run a chunk at a time inside step i's transfers: the
// step's only local, packing votes over all nblocks, in a step that
// communicates; or, for a step without locals that communicates, the pack
// that is the only local of step i - 1 when that step has no messages on
// this rank (halving-doubling's fold step of a core member). nullptr: none.
const Local* deferrablePack(const Schedule& s, size_t i);
// Calls f(stepIndex, range) for every write of the result planes: decides,
// and receives stored into kResult.
template <typename F>
void forEachResultWrite(const Schedule& s, F&& f) {
  for (size_t i = 0; i < s.steps.size(); i++) {
    for (const Local& l : s.steps[i].locals)
      if (l.op == LocalOp::kDecide && !l.range.empty()) f(i, l.range);
    for (const Recv& r : s.steps[i].recvs)
      if (r.op == RecvOp::kStore && r.buf == Buffer::kResult && !r.range.empty()) f(i, r.range);
  }
}
// Whether each result range may go to the output as soon as it is written:
// every block is written exactly once (the writes tile [0, nblocks)), and
// none in or before the last step that packs (an in-place call's input is
// read by the packs: no output element may be written before they are done).
bool resultWrittenOnceAfterPacks(const Schedule& s);

// Field-sum's field width on nranks ranks when SIGNLION_FIELD_BITS is
// `setting`: the setting, or the narrowest that holds N votes when it is 0.
// 0 when the setting is no usable width (too narrow for N votes, or over 32).
int fieldBitsFor(int64_t setting, int nranks);
// SIGNLION_FIELD_BITS as set (read once; 0 when unset). Ranks must agree on
// fieldBitsFor(it, nranks): the host communicator compares it at init.
int64_t fieldBitsSetting();

// A SIGNLION_* setting under which an algorithm's schedule cannot be built.
struct SettingConflict {
  const char* name = nullptr;  // the variable ("SIGNLION_FIELD_BITS"); nullptr: none
  int64_t value = 0;           // its value
  std::string why;             // why the algorithm cannot run with it
};

// The setting that keeps `algo` (concrete) from being built for nranks ranks
// under the current environment, if any. Logs nothing: buildSchedule refuses
// such an algorithm (a forced one fails), chooseAlgorithm leaves it out of
// Auto's candidates.
SettingConflict settingsConflict(ncclSignAlgo_t algo, int nranks);

// Whether the decided result travels trit coded (Coding::kTrits): a majority
// whose result can be -1, 0 or +1 (2 result planes: exact ties, N even or
// ternary), unless SIGNLION_RESULT_CODING=0 (resultCodingEnabled, read once:
// the 2 planes travel, for A/B comparisons). The average's result is a count
// (width(N) planes), not a trit.
bool resultsTravelAsTrits(const OpSpec& spec, int resultPlanes);
bool resultCodingEnabled();

// Builds rank `rank`'s schedule of `algo` (a concrete algorithm, not Auto) for
// a message of nblocks blocks. Every rank of the communicator must call it
// with the same arguments but its own rank. `topo` (nullptr or unknown: every
// rank its own node) is what the hierarchical algorithm groups by; the flat
// algorithms ignore it.
// Errors: ncclInvalidArgument (with a WARN naming the argument) for nranks < 1,
// rank outside [0, nranks), nblocks < 0, Auto or an unknown algorithm, an
// out-of-range op/zero rule/tie rule, or a setting that rules `algo` out
// (settingsConflict; the WARN names the variable), a known topology whose
// size is not nranks.
ncclResult_t buildSchedule(ncclSignAlgo_t algo, int nranks, int rank, int64_t nblocks, const OpSpec& spec,
                           Schedule* out, const Topology* topo = nullptr);

// Checks an OpSpec's enums; `caller` names the API call in the WARN line.
ncclResult_t checkOpSpec(const OpSpec& spec, const char* caller);

namespace detail {
// One builder per algorithm file. `s` arrives with the header fields filled
// (algo, nranks, rank, nblocks, spec, counters, resultPlanes); the builder
// appends steps and sets the scratch fields.
void buildRing(Schedule* s);
void buildHalvingDoubling(Schedule* s);
void buildAllGather(Schedule* s);
void buildFieldSum(Schedule* s);
void buildHierarchical(Schedule* s, const Topology& topo);
void buildDirect(Schedule* s);
void buildTree(Schedule* s);
// SIGNLION_FIELD_BITS read once: fieldBitsFor(it, nranks); when that is 0,
// *conflict (if not null) says why.
int fieldSumBits(int nranks, SettingConflict* conflict);

// Helpers shared by the builders (schedule.cc).
// A message of `planes` planes per unit (width = planes, maxCount 0).
Transfer planesTransfer(int peer, Buffer buf, Range range, int planes);
Send makeSend(int peer, Buffer buf, Range range, int counters, int64_t maxCount);
Recv makeAddRecv(int peer, Range range, int counters, int64_t incomingMax, int64_t localMax);
Recv makeStoreRecv(int peer, Buffer buf, Range range, int planes);
// The result of a kStore of the decided result: planes = resultPlanes.
Send makeResultSend(int peer, Range range, int resultPlanes);
Local packVotes(Buffer dst, int slot, int64_t nblocks);
Local decide(Buffer src, Range range, int64_t maxCount, int width);
}  // namespace detail

}  // namespace algo
}  // namespace signlion
