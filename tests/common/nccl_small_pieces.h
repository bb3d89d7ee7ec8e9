// Chunk and segment sizes small enough that the NCCL path cuts the steps of
// a call into several chunks and runs the call as several segments (the
// defaults, 4 MiB chunks and 64M-element segments, do neither below millions
// of elements). The GPU test MatrixOnThreeRanksInSmallChunksAndSegments runs
// with them (SIGNLION_NCCL_CHUNK_BYTES, SIGNLION_NCCL_SEGMENT); the plan test
// SmallPiecesCutStepsIntoChunksAndCallsIntoSegments checks that they do.
#pragma once

#include <cstddef>
#include <cstdint>

namespace signlion {
namespace test {

constexpr int kSmallPiecesRanks = 3;
// 16 blocks of one plane, 8 of a two-plane counter, 10 of a coded ternary
// result per chunk: fewer than a step of N = 3 moves of a 65-block segment.
constexpr int64_t kSmallChunkBytes = 128;
constexpr int64_t kSmallSegment = 8192;  // elements (128 blocks), a multiple of 64
// One segment; a segment and one element; three segments and a part.
constexpr size_t kSmallPiecesCounts[] = {4097, 8193, 3 * 8192 + 4097};

}  // namespace test
}  // namespace signlion
