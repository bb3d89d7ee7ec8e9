// Field-sum: every vote becomes a field of width(N) bits (or the fixed width
// SIGNLION_FIELD_BITS asks for, as Lion Cub's 4- and 8-bit fields) in uint64
// words (floor(64/bits) fields per word; in ternary mode a word plane of P
// fields and one of M fields), and the words are added by a ring sum
// all-reduce. A field holds at most N, which fits, so no carry crosses a field
// boundary. The NCCL executor may run the whole exchange as one
// ncclAllReduce(ncclUint64, ncclSum) over the fieldWords*counters words: the
// steps below are that ring, for executors without one. See docs/ALGORITHMS.md.
#include <string>

#include "algo/ring.h"
#include "common/param.h"

// The field width: 0 = the narrowest that holds N (docs/PARAMETERS.md).
SIGNLION_PARAM(FieldBits, "FIELD_BITS", 0, 0, 32)

namespace signlion {
namespace algo {

// The count of N votes must fit in a field, or the word sum would carry into
// the next field.
int fieldBitsFor(int64_t setting, int nranks) {
  if (setting == 0) return counterWidth(nranks);
  return setting >= counterWidth(nranks) && setting <= 32 ? static_cast<int>(setting) : 0;
}

int64_t fieldBitsSetting() { return signlionParamFieldBits(); }

namespace detail {

int fieldSumBits(int nranks, SettingConflict* conflict) {
  const int64_t setting = signlionParamFieldBits();
  const int bits = fieldBitsFor(setting, nranks);
  if (bits == 0 && conflict != nullptr) {
    conflict->name = "SIGNLION_FIELD_BITS";
    conflict->value = setting;
    conflict->why = std::to_string(setting) + "-bit fields cannot hold a count of " + std::to_string(nranks) +
                    " votes (need " + std::to_string(counterWidth(nranks)) + "..32, or 0 for the narrowest)";
  }
  return bits;
}

void buildFieldSum(Schedule* s) {
  const int n = s->nranks, next = ringNext(*s), prev = ringPrev(*s);
  // s->fieldBits arrives set (buildSchedule: fieldSumBits).
  s->fieldsPerWord = 64 / s->fieldBits;
  s->fieldWords = (s->nblocks * kBlockElems + s->fieldsPerWord - 1) / s->fieldsPerWord;
  s->counterMax = n;  // the counts live in the fields; kCounter is not used
  s->counterWidth = 0;

  auto words = [&](Range range, int64_t maxCount) {
    Send m;
    static_cast<Transfer&>(m) = planesTransfer(next, Buffer::kFields, range, s->counters);
    m.width = s->fieldBits;
    m.maxCount = maxCount;
    return m;
  };
  auto recv = [&](Range range, RecvOp op, int64_t incomingMax) {
    Recv m;
    static_cast<Transfer&>(m) = words(range, incomingMax);
    m.peer = prev;
    m.op = op;
    if (op == RecvOp::kSumWords) {
      m.localMax = 1;
      m.resultMax = incomingMax + 1;
    } else {
      m.localMax = m.resultMax = incomingMax;
    }
    m.localWidth = m.resultWidth = s->fieldBits;
    return m;
  };

  Step pack;
  Local l;
  l.op = LocalOp::kPackFields;
  l.dst = Buffer::kFields;
  l.range = Range{0, s->nblocks};
  l.maxCount = 1;
  l.width = s->fieldBits;
  pack.locals.push_back(l);
  appendRingPass(
      s, s->fieldWords, 0, std::move(pack), [&](Range out, int k) { return words(out, k + 1); },
      [&](Range in, int k) { return recv(in, RecvOp::kSumWords, k + 1); });
  appendRingPass(
      s, s->fieldWords, 1, Step(), [&](Range out, int) { return words(out, n); },
      [&](Range in, int) { return recv(in, RecvOp::kStore, n); });
  Step local;
  local.locals.push_back(decide(Buffer::kFields, Range{0, s->nblocks}, n, s->fieldBits));
  s->steps.push_back(std::move(local));
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
