// The double binary tree (algo/tree.h has the shape): tree t reduces and
// broadcasts half t of the message, cut into K chunks that are pipelined.
// Up: a node adds its children's counters into its own votes, chunk by
// chunk, and sends each chunk on to its parent as soon as both children's
// have been added, as a counter as wide as its subtree needs (width of the
// subtree's rank count: 1 bit at a leaf, width(N/2) under the root). The
// root decides each chunk as it completes. Down: the decided chunks flow
// from the root to the leaves, each node storing and forwarding them (coded
// 5 values per byte where a result can be -1/0/+1, as every algorithm's
// results). See docs/ALGORITHMS.md.
//
// Timing, the same on every rank: a node sends chunk c up in step
// c + treeSlot(node); its children's slots are lower and different, so it
// has added both before, and never two adds into one range in one step. The
// root decides chunk c in step c + D (D one above its children's slots) and
// sends it down in the same step (locals run first); a node at depth d stores
// it in step c + D + d - 1 and forwards it in the next. So a call takes
// K + D + depth - 1 steps (about K + 3 log2 N), and within a step a node
// receives one chunk while it sends another: the pipeline. Both trees run in
// the same steps; every rank is a leaf of at least one of them, and sends its
// own votes (1 bit) there in step c or c + 1.
#include "algo/tree.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "algo/schedule.h"

namespace signlion {
namespace algo {

namespace {

int lowBit(int p) { return p & -p; }

int log2Floor(int x) {
  int l = 0;
  while ((x >> (l + 1)) > 0) l++;
  return l;
}

int rootPosition(int n) { return 1 << log2Floor(n); }

// 0 at the root.
int parentPosition(int n, int p) {
  if (p == rootPosition(n)) return 0;
  const int b = lowBit(p);
  // A right child in the unclipped tree, or a left one whose parent would lie
  // past N: then it is the clipped right child of p - b.
  return ((p / b) % 4 == 3 || p + b > n) ? p - b : p + b;
}

int childPositions(int n, int q, int out[2]) {
  const int b = lowBit(q);
  if (b == 1) return 0;
  int k = 0;
  out[k++] = q - b / 2;
  for (int c = b / 2; c >= 1; c /= 2)
    if (q + c <= n) {
      out[k++] = q + c;
      break;
    }
  return k;
}

// Positions q-b+1 .. q+b-1, clipped at N.
int subtreeSize(int n, int q) {
  const int b = lowBit(q);
  return std::min(q + b - 1, n) - (q - b);
}

TreeNode nodeAt(int n, int tree, int p) {
  TreeNode node;
  const int up = parentPosition(n, p);
  node.parent = up == 0 ? -1 : treeRank(n, tree, up);
  node.rightChild = up != 0 && up < p;
  int kids[2];
  node.nchildren = childPositions(n, p, kids);
  for (int i = 0; i < node.nchildren; i++) node.children[i] = treeRank(n, tree, kids[i]);
  node.size = subtreeSize(n, p);
  node.height = log2Floor(lowBit(p));
  return node;
}

int depthOf(int n, int p) {
  int d = 0;
  for (int q = parentPosition(n, p); q != 0; q = parentPosition(n, q)) d++;
  return d;
}

// The up-phase slots and the depths that occur in a tree over n positions:
// which step offsets carry some rank's counter, and which some rank's result.
struct TreeTiming {
  int decideOffset = 0;       // D: the root decides chunk c in step c + D
  std::vector<char> upSlot;   // upSlot[s]: some node sends up with slot s
  std::vector<char> depth;    // depth[d]: some node is at depth d (d >= 1)
  int lastOffset = 0;         // the last step offset that carries a transfer
};

TreeTiming treeTiming(int n) {
  TreeTiming t;
  const int root = rootPosition(n);
  int kids[2];
  const int nk = childPositions(n, root, kids);
  for (int i = 0; i < nk; i++) t.decideOffset = std::max(t.decideOffset, treeSlot(nodeAt(n, 0, kids[i])) + 1);
  // Depths by lowest set bit, highest first: a parent's bit is above its child's.
  std::vector<int> depth(static_cast<size_t>(n) + 1, 0);
  for (int b = root; b >= 1; b /= 2)
    for (int p = b; p <= n; p += 2 * b) {
      if (p == root) continue;
      const TreeNode node = nodeAt(n, 0, p);
      depth[p] = depth[parentPosition(n, p)] + 1;
      const size_t slot = static_cast<size_t>(treeSlot(node)), d = static_cast<size_t>(depth[p]);
      if (t.upSlot.size() <= slot) t.upSlot.resize(slot + 1, 0);
      if (t.depth.size() <= d) t.depth.resize(d + 1, 0);
      t.upSlot[slot] = 1;
      t.depth[d] = 1;
      t.lastOffset = std::max(t.lastOffset, t.decideOffset + depth[p] - 1);
    }
  return t;
}

// [begin, end) of part i of `parts` of r, cut at whole trit groups (5 blocks)
// so that only a half's last chunk has a partial group on the wire.
Range groupAligned(const Range& r, int64_t parts, int64_t i) {
  const int64_t g = static_cast<int64_t>(bits::kTritGroupBlocks);
  const int64_t units = (r.size() + g - 1) / g;
  const Range u = shardRange(units, static_cast<int>(parts), static_cast<int>(i));
  return Range{std::min(r.begin + u.begin * g, r.end), std::min(r.begin + u.end * g, r.end)};
}

}  // namespace

int treePosition(int nranks, int tree, int rank) {
  if (tree == 0) return rank + 1;
  return nranks % 2 == 0 ? nranks - rank : (rank + 1) % nranks + 1;
}

int treeRank(int nranks, int tree, int position) {
  if (tree == 0) return position - 1;
  return nranks % 2 == 0 ? nranks - position : (position - 2 + nranks) % nranks;
}

TreeNode treeNode(int nranks, int tree, int rank) { return nodeAt(nranks, tree, treePosition(nranks, tree, rank)); }

int treeBusiestRank(int nranks) {
  if (nranks < 2) return 0;
  int kids[2];
  const int nk = childPositions(nranks, rootPosition(nranks), kids);
  int best = kids[0];
  for (int i = 1; i < nk; i++)
    if (subtreeSize(nranks, kids[i]) > subtreeSize(nranks, best)) best = kids[i];
  return treeRank(nranks, 0, best);
}

int treePipelineChunks(int nranks, int64_t nblocks, int counters) {
  const int64_t half = (nblocks + 1) / 2;
  const int64_t groups = (half + static_cast<int64_t>(bits::kTritGroupBlocks) - 1) /
                         static_cast<int64_t>(bits::kTritGroupBlocks);
  if (nranks < 2 || groups <= 1) return 1;
  // K chunks through a pipeline of L further steps take K + L steps of
  // (alpha + chunk bytes / beta): fewest at K = sqrt(L * bytes / (alpha * beta)).
  // A chunk's bytes: a counter under the root, taken as N/2 ranks wide (the
  // root's child of a power of two holds N-1: one bit more).
  const TreeTiming t = treeTiming(nranks);
  const double fill = t.lastOffset;
  const double bytes = 8.0 * half * counters * counterWidth((nranks + 1) / 2);
  const double best = std::sqrt(fill * bytes / kTreeStepBytes);
  return static_cast<int>(std::max<double>(1, std::min<double>({std::round(best), double(groups), kMaxTreeChunks})));
}

namespace detail {

void buildTree(Schedule* s) {
  const int n = s->nranks, r = s->rank;
  const int64_t nb = s->nblocks;
  if (n == 1) {
    s->counterMax = 1;
    s->counterWidth = 1;
    Step only;
    only.locals.push_back(packVotes(Buffer::kCounter, 0, nb));
    if (nb > 0) only.locals.push_back(decide(Buffer::kCounter, Range{0, nb}, 1, 1));
    s->steps.push_back(std::move(only));
    return;
  }
  const TreeTiming timing = treeTiming(n);  // the same for both trees: tree 1 is tree 0 relabelled
  const int chunks = treePipelineChunks(n, nb, s->counters);
  // The halves split at a trit group too, unless that would leave one empty
  // (under 2 groups): every rank is a leaf with something to send then.
  const int64_t groupBlocks = static_cast<int64_t>(bits::kTritGroupBlocks);
  auto half = [&](int tree) {
    return nb >= kTreeCount * groupBlocks ? groupAligned(Range{0, nb}, kTreeCount, tree) : shardRange(nb, kTreeCount, tree);
  };
  auto chunk = [&](int tree, int c) { return groupAligned(half(tree), chunks, c); };

  const int nsteps = chunks + timing.lastOffset;
  s->steps.resize(static_cast<size_t>(nsteps));
  s->steps[0].locals.push_back(packVotes(Buffer::kCounter, 0, nb));
  s->counterMax = 1;
  for (int tree = 0; tree < kTreeCount; tree++) {
    const TreeNode me = treeNode(n, tree, r);
    s->counterMax = std::max<int64_t>(s->counterMax, me.size);
    const int depth = depthOf(n, treePosition(n, tree, r));
    // Children in the order their counters arrive (by slot).
    TreeNode kids[2];
    int kidRank[2];
    for (int i = 0; i < me.nchildren; i++) kids[i] = treeNode(n, tree, kidRank[i] = me.children[i]);
    if (me.nchildren == 2 && treeSlot(kids[1]) < treeSlot(kids[0])) {
      std::swap(kids[0], kids[1]);
      std::swap(kidRank[0], kidRank[1]);
    }
    for (int c = 0; c < chunks; c++) {
      const Range range = chunk(tree, c);
      if (range.empty()) continue;
      int64_t held = 1;  // own votes
      for (int i = 0; i < me.nchildren; i++) {
        s->steps[c + treeSlot(kids[i])].recvs.push_back(makeAddRecv(kidRank[i], range, s->counters, kids[i].size, held));
        held += kids[i].size;
      }
      if (me.parent >= 0) {
        s->steps[c + treeSlot(me)].sends.push_back(makeSend(me.parent, Buffer::kCounter, range, s->counters, me.size));
        s->steps[c + timing.decideOffset + depth - 1].recvs.push_back(
            makeStoreRecv(me.parent, Buffer::kResult, range, s->resultPlanes));
      } else {
        s->steps[c + timing.decideOffset].locals.push_back(decide(Buffer::kCounter, range, n, counterWidth(n)));
      }
      for (int i = 0; i < me.nchildren; i++)
        s->steps[c + timing.decideOffset + depth].sends.push_back(makeResultSend(kidRank[i], range, s->resultPlanes));
    }
  }
  s->counterWidth = counterWidth(s->counterMax);
  // A step costs a latency when any rank's chunk moves in it. Chunks are
  // filled half 0 first: chunk c of half 0 is the first to have blocks.
  auto moves = [&](int c) { return c >= 0 && c < chunks && !chunk(0, c).empty(); };
  for (int st = 0; st < nsteps; st++) {
    bool any = false;
    for (size_t u = 0; u < timing.upSlot.size() && !any; u++) any = timing.upSlot[u] && moves(st - (int)u);
    for (size_t d = 1; d < timing.depth.size() && !any; d++)
      any = timing.depth[d] && moves(st - timing.decideOffset - (int)d + 1);
    s->steps[st].anyRankCommunicates = any;
  }
  // Chunks are pipelined, counters going up while results come down, but the
  // links carry unequal loads (the counters to a parent are the widest), so
  // an even split of the rate would cap the busiest link at a quarter of it:
  // concurrentSendPeers stays 1, each link paced at the whole rate.
}

}  // namespace detail
}  // namespace algo
}  // namespace signlion
