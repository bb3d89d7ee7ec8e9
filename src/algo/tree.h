// The shape of the double binary tree (tree.cc builds its schedule): two
// binary trees over the same N ranks, each carrying half of the message. A
// tree is the in-order tree over positions 1..N: position p with lowest set
// bit b has children p - b/2 and p + c (c the largest power of two <= b/2
// with p + c <= N), and the root is the largest power of two <= N. Odd
// positions are leaves. Rank r sits at position r + 1 in tree 0, and in tree 1
// at N - r (N even: the mirror) or ((r + 1) mod N) + 1 (N odd: the shift),
// both of which map every even position of tree 0 to an odd one: every rank
// is an inner node of at most one tree, so each rank forwards at most half of
// the message's counters and results. Parents and children are nearby
// positions: a leaf's parent is its neighbour, and only the top levels span
// far. Plain arithmetic, O(log N) per node.
#pragma once

#include <cstdint>

namespace signlion {
namespace algo {

constexpr int kTreeCount = 2;

struct TreeNode {
  int parent = -1;           // rank; -1 at the root
  int children[2] = {-1, -1};
  int nchildren = 0;
  int size = 1;              // ranks in the subtree (votes its counter holds at the end)
  int height = 0;            // 0 at a leaf; log2 of the position's lowest set bit
  bool rightChild = false;   // the higher-positioned child of its parent
};

// Position (1..N) of `rank` in tree `tree` (0 or 1), and the rank at a position.
int treePosition(int nranks, int tree, int rank);
int treeRank(int nranks, int tree, int position);

// Rank `rank`'s node in tree `tree` of the double binary tree over nranks ranks.
TreeNode treeNode(int nranks, int tree, int rank);

// The up-phase step offset of a node: it sends chunk c of its counter to its
// parent in step c + treeSlot(node). Siblings have different slots (no two
// adds into one range in one step) and a parent's slot is above its
// children's: 2 * height, plus 1 for a right child.
inline int treeSlot(const TreeNode& n) { return 2 * n.height + (n.rightChild ? 1 : 0); }

// The rank the cost model prices (its links are the pipeline's busiest): the
// root's child with the largest subtree in tree 0, whose counter is the
// widest that travels, and which also forwards results to two children and
// sends its votes up the other tree. 0 for N = 1.
int treeBusiestRank(int nranks);

// How many chunks each half is cut into (every rank computes the same): the
// K that makes (K + pipeline fill steps) * (alpha + chunk bytes / beta) least
// for a step's latency worth kTreeStepBytes (the cost model's default link:
// 20 us at 10 Gb/s), at most kMaxTreeChunks and at most one trit group
// (5 blocks) per chunk; 1 for N = 1.
constexpr double kTreeStepBytes = 25000.0;
constexpr int kMaxTreeChunks = 512;
int treePipelineChunks(int nranks, int64_t nblocks, int counters);

}  // namespace algo
}  // namespace signlion
