// The vote algebra on the GPU: the CUDA counterparts of bits::Kernels
// (src/bits/bits.h), for the NCCL executor (src/nccl/). Same buffer layout
// (plane-major bit-sliced counters, one uint64 word per block of 64 elements
// per plane, plane p at base + p * stride words), same contracts and the same
// results bit for bit; only the memory (device) and the ordering (enqueued on
// `stream`, asynchronous) differ.
//
// Every launcher returns cudaSuccess or the launch error (cudaGetLastError
// after the launch); arguments no kernel can serve (a datatype that is not a
// vote type, a rule out of range, the cases named below) are
// cudaErrorInvalidValue, with nothing launched. It never synchronizes and
// never allocates, so all of them may be captured in a CUDA graph. Zero-sized
// work launches nothing. Pointers may have any alignment the datatype allows
// (element pointers need not be 16-byte aligned; the kernels fall back to
// narrower loads and stores). Implementations: kernels/*.cu (README.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"
#include "nccl_sign.h"

namespace signlion {
namespace kernels {

// bits::Kernels::pack: votes of `count` elements of src into
// bits::votePlanes(rule) planes at out (second plane at out + stride words).
// Bits past count are zero. A warp gathers the votes of 32 elements into a
// half-word (shuffles over 16-byte loads, or a ballot of element loads).
cudaError_t pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
                 size_t stride, cudaStream_t stream);

// bits::Kernels::add: out = a + b over nwords words, planes of widths wa, wb,
// wout (strides sa, sb, so words). out may be a (same pointer and stride).
cudaError_t add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out, int wout,
                size_t so, size_t nwords, cudaStream_t stream);

// Allgather's local sum: out (width wout, stride so) = sum over nslots 1-bit
// vote planes, slot r at votes + r * slotStride words. wout must hold nslots
// (planes past widthFor(nslots) are written as zero); nslots <= 65535.
cudaError_t sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout, size_t so,
                     size_t nwords, cudaStream_t stream);

// bits::Kernels::decideBits: majority over nranks voters into
// bits::majorityPlanes(...) result planes at out (second at out + so).
cudaError_t decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so,
                       size_t nwords, cudaStream_t stream);

// bits::Kernels::unpack: 1 or 2 result planes into `count` elements of dt.
cudaError_t unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt, void* dst,
                   cudaStream_t stream);

// bits::Kernels::average: (float)(P - M) / (float)nranks (2P - N without M),
// rounded to float once, then to dt (fp32/fp16/bf16, round to nearest even;
// int8 is cudaErrorInvalidValue, as bits::checkVoteArgs refuses it).
cudaError_t average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst,
                    cudaStream_t stream);

// The fused last step, in one pass over blocks [0, nwords) of `count`
// elements: sum = acc + in (per counter: P, and M when acc.neg is set; the
// sum has width sumWidth), then the op's result written as dt at dst
// (majority: decide with the tie rule, then unpack; average: as average()).
// When planesOut is not null the result planes are stored there too (stride
// so): bits::majorityPlanes(...) planes for majority, the sum's planes (P
// then M, sumWidth each) for average, as a rank that still sends its
// decided shard needs them; planesOut must not overlap acc or in. The zero
// rule must agree with the counters (acc.neg and in.neg set exactly when it
// is ncclSignZeroAbstain); average takes fp32/fp16/bf16 only.
cudaError_t addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                            ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie, uint64_t* planesOut,
                            size_t so, size_t count, ncclDataType_t dt, void* dst, cudaStream_t stream);

// Field-sum format (src/bits/fields.h): count elements of src into
// bits::votePlanes(zero) planes of bits::fieldWordsFor(count, fieldBits)
// words (second plane at out + stride). Unused fields are zero.
cudaError_t packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero, int fieldBits,
                       uint64_t* out, size_t stride, cudaStream_t stream);

// bits::fieldsToPlanes: the counts in fields [first, first + n) into `width`
// bit-sliced planes over those elements' blocks (first a multiple of 64).
cudaError_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes, int width,
                           size_t planeStride, cudaStream_t stream);

// bits::Kernels::encodeTrits: the planes pos and neg over nblocks blocks (a
// decided -1/0/+1 result) into bits::tritBytes(nblocks) bytes at out, coded 5
// elements per byte (src/bits/trits.h). out must be 4-byte aligned.
cudaError_t encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nblocks, uint8_t* out, cudaStream_t stream);
// bits::Kernels::decodeTrits: tritBytes(nblocks) coded bytes at in (4-byte
// aligned) into pos and neg. Malformed bytes (a byte above 242, a tail element
// both +1 and -1) store badValue in *bad (memory the device writes: device or
// mapped host memory; never cleared here); the planes are then unspecified,
// and the caller must not use them.
cudaError_t decodeTrits(const uint8_t* in, size_t nblocks, uint64_t* pos, uint64_t* neg, uint32_t* bad,
                        uint32_t badValue, cudaStream_t stream);

}  // namespace kernels
}  // namespace signlion
