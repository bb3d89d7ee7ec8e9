#include "algo/chunk_order.h"

#include <algorithm>
#include <climits>
#include <utility>

namespace signlion {
namespace algo {

namespace {

// One buffer access of a chunk: slot -1 is every vote slot.
struct Access {
  Buffer buf;
  int slot;
  int64_t b, e;
  bool write;
};

int slotOf(Buffer buf, int slot) { return buf == Buffer::kVotes ? slot : 0; }

int accesses(const Schedule& s, const Chunk& x, Access out[2]) {
  constexpr int64_t kAll = INT64_MAX;  // field words and blocks do not compare: the whole buffer
  const Step& st = s.steps[x.step];
  const int64_t b = x.range.begin, e = x.range.end;
  switch (x.kind) {
    case Chunk::Kind::kSend: {
      const Send& t = st.sends[x.index];
      out[0] = {t.buf, slotOf(t.buf, t.slot), b, e, false};
      return 1;
    }
    case Chunk::Kind::kRecv: {
      const Recv& t = st.recvs[x.index];
      out[0] = {t.buf, slotOf(t.buf, t.slot), b, e, true};
      return 1;
    }
    case Chunk::Kind::kLocal:
      break;
  }
  const Local& l = st.locals[x.index];
  switch (l.op) {
    case LocalOp::kPackVotes:
      out[0] = {l.dst, slotOf(l.dst, l.slot), b, e, true};
      return 1;
    case LocalOp::kPackFields:
      out[0] = {Buffer::kFields, 0, 0, kAll, true};
      return 1;
    case LocalOp::kSumVotes:
      out[0] = {Buffer::kVotes, -1, b, e, false};
      out[1] = {Buffer::kCounter, 0, b, e, true};
      return 2;
    case LocalOp::kDecide:
      out[0] = l.src == Buffer::kFields ? Access{Buffer::kFields, 0, 0, kAll, false} : Access{l.src, 0, b, e, false};
      out[1] = {Buffer::kResult, 0, b, e, true};
      return 2;
  }
  return 0;
}

}  // namespace

void cutIntoChunks(const Schedule& s, int64_t chunkBytes, int64_t pieceBlocks, std::vector<Chunk>* out,
                   const Local** lazyPack) {
  out->clear();
  *lazyPack = nullptr;
  pieceBlocks = std::max<int64_t>(1, pieceBlocks);
  bool counterTouched = false;  // some earlier chunk reads or writes kCounter
  auto transfer = [&](Chunk::Kind kind, uint32_t step, uint32_t index, const Transfer& x) {
    const int64_t len = chunkBlocks(x, chunkBytes);
    for (int64_t b = x.range.begin; b < x.range.end; b += len)
      out->push_back({kind, step, index, Range{b, std::min(b + len, x.range.end)}});
    counterTouched |= x.buf == Buffer::kCounter;
  };
  for (uint32_t i = 0; i < (uint32_t)s.steps.size(); i++) {
    const Step& st = s.steps[i];
    for (uint32_t j = 0; j < (uint32_t)st.locals.size(); j++) {
      const Local& l = st.locals[j];
      if (l.range.empty()) continue;  // an empty shard: nothing to do
      if (l.op == LocalOp::kPackVotes && l.dst == Buffer::kCounter && l.range.begin == 0 &&
          l.range.end == s.nblocks && !counterTouched && *lazyPack == nullptr) {
        *lazyPack = &l;
        counterTouched = true;
        continue;
      }
      // Decides go a piece at a time, so a decided piece can be sent (and
      // unpacked) while the next is decided.
      const int64_t piece = l.op == LocalOp::kDecide ? pieceBlocks : l.range.size();
      for (int64_t b = l.range.begin; b < l.range.end; b += piece)
        out->push_back({Chunk::Kind::kLocal, i, j, Range{b, std::min(b + piece, l.range.end)}});
      counterTouched |= l.dst == Buffer::kCounter || l.src == Buffer::kCounter;
    }
    for (uint32_t j = 0; j < (uint32_t)st.recvs.size(); j++) transfer(Chunk::Kind::kRecv, i, j, st.recvs[j]);
    for (uint32_t j = 0; j < (uint32_t)st.sends.size(); j++) transfer(Chunk::Kind::kSend, i, j, st.sends[j]);
  }
}

bool chunkWaitsFor(const Schedule& s, const Chunk& x, const Chunk& y) {
  if (y.step > x.step) return false;
  if (y.step == x.step) {
    // Within a step only its locals are ordered (before its transfers, and
    // in the order listed); its sends and receives never touch the same
    // blocks (schedule.h).
    if (y.kind != Chunk::Kind::kLocal) return false;
    if (x.kind == Chunk::Kind::kLocal &&
        (y.index > x.index || (y.index == x.index && y.range.begin >= x.range.begin)))
      return false;
  }
  Access a[2], c[2];
  const int na = accesses(s, x, a), nc = accesses(s, y, c);
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nc; j++)
      if ((a[i].write || c[j].write) && a[i].buf == c[j].buf &&
          (a[i].slot == c[j].slot || a[i].slot < 0 || c[j].slot < 0) && a[i].b < c[j].e && c[j].b < a[i].e)
        return true;
  return false;
}

void buildChunkGraph(const Schedule& s, int64_t chunkBytes, int64_t pieceBlocks, ChunkGraph* g) {
  g->chunkBytes = chunkBytes;
  g->pieceBlocks = pieceBlocks;
  const Local* lazy = nullptr;
  cutIntoChunks(s, chunkBytes, pieceBlocks, &g->chunks, &lazy);
  g->lazyPackStep = g->lazyPackIndex = -1;
  for (size_t i = 0; lazy != nullptr && i < s.steps.size(); i++)
    for (size_t j = 0; j < s.steps[i].locals.size(); j++)
      if (&s.steps[i].locals[j] == lazy) g->lazyPackStep = (int)i, g->lazyPackIndex = (int)j;
  // Every access, sorted by buffer and first block; a sweep keeps those that
  // still cover the current block, and each access meets exactly the earlier
  // ones it overlaps. chunkWaitsFor then judges the pair (order, slots, writes).
  struct Span {
    Buffer buf;
    int64_t b, e;
    uint32_t chunk;
  };
  std::vector<Span> spans;
  for (uint32_t k = 0; k < (uint32_t)g->chunks.size(); k++) {
    Access a[2];
    const int na = accesses(s, g->chunks[k], a);
    for (int i = 0; i < na; i++)
      if (a[i].b < a[i].e) spans.push_back({a[i].buf, a[i].b, a[i].e, k});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) {
    return x.buf != y.buf ? x.buf < y.buf : x.b != y.b ? x.b < y.b : x.chunk < y.chunk;
  });
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (earlier, later)
  std::vector<size_t> active;
  for (size_t i = 0; i < spans.size(); i++) {
    if (i > 0 && spans[i].buf != spans[i - 1].buf) active.clear();
    const Span& x = spans[i];
    for (size_t a = 0; a < active.size();) {
      const Span& y = spans[active[a]];
      if (y.e <= x.b) {  // ends before x: before everything after x too
        active[a] = active.back();
        active.pop_back();
        continue;
      }
      const uint32_t lo = std::min(x.chunk, y.chunk), hi = std::max(x.chunk, y.chunk);
      if (lo != hi && chunkWaitsFor(s, g->chunks[hi], g->chunks[lo])) edges.push_back({lo, hi});
      a++;
    }
    active.push_back(i);
  }
  // Two chunks may meet on two buffers (a decide's counter and result).
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  const size_t n = g->chunks.size();
  g->waits.assign(n, 0);
  g->succBegin.assign(n + 1, 0);
  for (const auto& e : edges) {
    g->waits[e.second]++;
    g->succBegin[e.first + 1]++;
  }
  for (size_t k = 0; k < n; k++) g->succBegin[k + 1] += g->succBegin[k];
  g->succ.resize(edges.size());
  for (size_t k = 0; k < edges.size(); k++) g->succ[k] = edges[k].second;  // sorted by (earlier, later): in place
}

}  // namespace algo
}  // namespace signlion
