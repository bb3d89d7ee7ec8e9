// The vote algebra on CPU: pack, add, decide and unpack over bit-sliced
// counters (DESIGN.md, "Wire format").
//
// Layout. Elements are grouped in blocks of 64. A counter of width w over
// `nwords` blocks is w bit-planes, plane-major: plane p starts at
// planes + p * stride and holds nwords uint64 words; bit i of word b is bit p
// of the count of element 64 * b + i. Little-endian, so the same buffer read as
// uint32 words puts element j at bit j % 32 of word j / 32: the GPU kernels
// share the format.
//
// Votes and results use two encodings:
//  - 1 plane ("binary"): bit set = +1, clear = -1;
//  - 2 planes ("ternary"): plane 0 = +1, plane 1 = -1, both clear = 0.
// A binary vote vector is a counter of width 1 counting +1 votes (P). In the
// ternary mode (zero abstains) two counters travel: P and M (the -1 votes).
//
// Every entry point has a portable and an AVX2 implementation; the one used is
// chosen once at run time (SIGNLION_BITS_ISA=portable|avx2 forces one). Both are
// bit-identical to the plain reference in vote_reference.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bits/trits.h"
#include "common/type_name.h"
#include "nccl_sign.h"

namespace signlion {
namespace bits {

constexpr size_t kBlockElems = 64;

// Blocks (uint64 words per plane) needed for `count` elements.
constexpr size_t numWords(size_t count) { return (count + kBlockElems - 1) / kBlockElems; }

// Smallest number of planes holding counts 0..maxCount (at least 1).
constexpr int widthFor(uint64_t maxCount) {
  int w = 1;
  while (w < 64 && (maxCount >> w) != 0) w++;
  return w;
}

// Planes of a vote vector for this zero rule: 2 when zeros abstain, else 1.
constexpr int votePlanes(ncclSignZeroRule_t rule) { return rule == ncclSignZeroAbstain ? 2 : 1; }

// Planes of a majority result: 1 when no zero can come out (the tie rule picks
// a side, or N is odd and no vote abstains), else 2.
constexpr int majorityPlanes(int nranks, ncclSignZeroRule_t zero, ncclSignTieRule_t tie) {
  return (tie != ncclSignTieZero || (zero != ncclSignZeroAbstain && nranks % 2 == 1)) ? 1 : 2;
}

// Datatypes a vote can be read from / a result written to.
bool isVoteType(ncclDataType_t dt);
size_t typeSize(ncclDataType_t dt);
// typeName(dt): common/type_name.h, where src/common's own messages reach it
// too; bits::typeName is the same function.
using signlion::typeName;

// The datatype/op/rules check every sign collective runs at entry: a vote
// type, an op in range, and a float type for ncclSignAverage. Logs a WARN
// naming `caller` and the bad argument; returns ncclInvalidArgument.
ncclResult_t checkVoteArgs(ncclDataType_t dt, int op, const char* caller);

// A read-only counter: P, and M in the ternary mode (nullptr otherwise).
struct Counts {
  const uint64_t* pos;
  int posWidth;
  size_t posStride;
  const uint64_t* neg = nullptr;
  int negWidth = 0;
  size_t negStride = 0;
};

// The function table of one implementation (portable or AVX2).
struct Kernels {
  const char* name;

  // Votes of `count` elements of `src` (any alignment) into votePlanes(rule)
  // planes at out (second plane at out + stride). Bits past count are zero.
  void (*pack)(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
               size_t stride);

  // out = a + b over nwords, planes of widths wa, wb, wout (wout >= max(wa, wb);
  // the caller sizes it with widthFor(maxA + maxB), carries past it are lost).
  // out may be a itself (same pointer and stride) for an in-place add.
  void (*add)(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
              size_t so, size_t nwords);

  // Majority over nranks voters into majorityPlanes(nranks, zero, tie) result
  // planes (second at out + so): sign(P - M), or sign(2P - N) when c.neg is
  // null; a zero sum follows the tie rule.
  void (*decideBits)(const Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so, size_t nwords);

  // Result planes (1 or 2, encodings above) into `count` elements of dst.
  void (*unpack)(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst);

  // Average: (float)(P - M) / (float)nranks (2P - N when c.neg is null), rounded
  // to float once, then to dt (fp32/fp16/bf16, round to nearest even).
  void (*average)(const Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst);

  // A decided -1/0/+1 result's 2 planes to and from its wire coding, 5
  // elements per byte (trits.h, which defines the format and the contract).
  TritEncodeFn encodeTrits;
  TritDecodeFn decodeTrits;
};

const Kernels& portableKernels();
// nullptr when the CPU (or the compiler) has no AVX2/F16C.
const Kernels* avx2Kernels();

// The implementation in use: AVX2 when available, unless SIGNLION_BITS_ISA says
// otherwise. Chosen on first call.
const Kernels& kernels();

// SIGNLION_BITS_ISA as kernels() reads it: auto, portable or avx2 (any other
// value is WARNed and read as auto).
std::string bitsIsaSetting();

// Majority straight to dt: decideBits then unpack, a tile of blocks at a time
// so the result planes stay in L1 and nothing is allocated.
void decideMajority(const Kernels& k, const Counts& c, int nranks, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                    size_t count, ncclDataType_t dt, void* dst);

}  // namespace bits
}  // namespace signlion
