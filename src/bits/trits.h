// Decided results at 1.6 bits per element: the wire coding of a result that
// can be -1, 0 or +1 (majority with exact ties, or ternary mode), 5 values per
// byte (3^5 = 243 <= 256) instead of its 2 planes (bits.h: plane 0 = +1,
// plane 1 = -1, both clear = 0). Only the wire uses it: both ends keep the
// planes in memory, the sender codes what it sends, the receiver decodes.
//
// Format of a range of B blocks (64 elements each), counted from its start:
//  - each whole group of 5 blocks (320 elements) is 64 bytes; byte j of group
//    g codes the 5 elements 320 g + 64 k + j, k = 0..4 (bit j of the group's
//    5 plane words), as the base-3 number sum_k d_k 3^k with the digit
//    d = 0 for 0, 1 for +1, 2 for -1; so a byte is at most 242;
//  - the last B % 5 blocks (a partial group) travel as their 2 planes:
//    B % 5 words of plane 0, then B % 5 of plane 1 (at most as many bytes as
//    trits would take there, and still whole words).
// tritBytes(B) = 64 * (B / 5) + 16 * (B % 5): always a multiple of 8.
// Coding a group bit by bit column (byte j from bit j of 5 words) keeps both
// directions branch-free and word-parallel on every implementation (AVX2
// byte lanes, a GPU warp's lanes).
//
// A peer's bytes are checked as they are decoded: a byte above 242, or a
// tail element with both its +1 and -1 bits, is malformed; decode reports it
// and the caller fails the call (never a wrong result).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/hd.h"

namespace signlion {
namespace bits {

constexpr size_t kTritGroupBlocks = 5;   // blocks per coded group
constexpr size_t kTritGroupBytes = 64;   // bytes per coded group (one per bit of a word)
constexpr unsigned kTritMaxByte = 242;   // 3^5 - 1: the largest valid byte

// Bytes that code nblocks blocks (the format above).
SIGNLION_HD constexpr size_t tritBytes(size_t nblocks) {
  return kTritGroupBytes * (nblocks / kTritGroupBlocks) + 16 * (nblocks % kTritGroupBlocks);
}

// The coder of one implementation (portable or AVX2); bits.h's Kernels
// carries the pair of the implementation in use.
//  encode: the planes pos[0, nblocks) and neg[0, nblocks) (a decided result:
//          no element has both bits; an element that had would code as +1)
//          into tritBytes(nblocks) bytes at out (any alignment).
//  decode: tritBytes(nblocks) bytes at in into pos and neg (nblocks words
//          each). Returns false when the bytes are malformed; then what it
//          wrote is unspecified and must not be used.
using TritEncodeFn = void (*)(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out);
using TritDecodeFn = bool (*)(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg);

// The portable coder (trits.cc); the AVX2 one lives in trits_avx2.cc.
void encodeTritsPortable(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out);
bool decodeTritsPortable(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg);

// The partial last group (nblocks % 5 blocks, starting at block `first`) as
// its planes (an element with both bits as +1, as in a group: what a sender
// codes is never malformed); shared by every host coder. Decode returns
// false when an element has both bits.
void encodeTritTail(const uint64_t* pos, const uint64_t* neg, size_t first, size_t rest, uint8_t* out);
bool decodeTritTail(const uint8_t* in, size_t first, size_t rest, uint64_t* pos, uint64_t* neg);

// The value (-1, 0, +1) of element e of a coded range of nblocks blocks, read
// straight from the format above: the plain reference the coders and the
// GPU kernels are tested against. Returns 2 for a malformed element.
int tritReference(const uint8_t* in, size_t nblocks, size_t e);

}  // namespace bits
}  // namespace signlion
