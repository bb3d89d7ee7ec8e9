// What the NCCL executor drives: the vote kernels and the NCCL operations of
// one call, enqueued in order and never waited for. The device backend
// (device_backend.h) puts them on the user's stream with kernels/ and the
// process's NCCL; the unit tests drive the same executor with a CPU backend.
// Pointers are the backend's memory (device memory for the device backend).
//
// Two lanes. Work runs on the main lane (the user's stream) in the order it
// is issued, except between divert() and join(): kernels then go to a side
// lane that starts after everything issued so far on the main lane, while
// communication stays on the main lane; join() makes the main lane wait for
// the side lane and sends kernels back to the main lane. So the kernels that
// consume chunk k run while chunk k+1 is on the wire.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bits/bits.h"
#include "nccl_sign.h"

namespace signlion {
namespace nccl {

class Backend {
 public:
  virtual ~Backend() = default;

  // Kernels, with the contracts of kernels/sign_kernels.h (same names).
  virtual ncclResult_t pack(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t rule, uint64_t* out,
                            size_t stride) = 0;
  virtual ncclResult_t add(const uint64_t* a, int wa, size_t sa, const uint64_t* b, int wb, size_t sb, uint64_t* out,
                           int wout, size_t so, size_t nwords) = 0;
  virtual ncclResult_t sumVotes(const uint64_t* votes, int nslots, size_t slotStride, uint64_t* out, int wout,
                                size_t so, size_t nwords) = 0;
  virtual ncclResult_t decideBits(const bits::Counts& c, int nranks, ncclSignTieRule_t tie, uint64_t* out, size_t so,
                                  size_t nwords) = 0;
  virtual ncclResult_t unpack(const uint64_t* planes, int nplanes, size_t stride, size_t count, ncclDataType_t dt,
                              void* dst) = 0;
  virtual ncclResult_t average(const bits::Counts& c, int nranks, size_t count, ncclDataType_t dt, void* dst) = 0;
  virtual ncclResult_t addDecideUnpack(const bits::Counts& acc, const bits::Counts& in, int sumWidth, int nranks,
                                       ncclSignOp_t op, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                                       uint64_t* planesOut, size_t so, size_t count, ncclDataType_t dt, void* dst) = 0;
  virtual ncclResult_t packFields(const void* src, ncclDataType_t dt, size_t count, ncclSignZeroRule_t zero,
                                  int fieldBits, uint64_t* out, size_t stride) = 0;
  virtual ncclResult_t fieldsToPlanes(const uint64_t* words, int fieldBits, size_t first, size_t n, uint64_t* planes,
                                      int width, size_t planeStride) = 0;
  // bits::Kernels::encodeTrits: a decided result's planes (pos, neg: nwords
  // words each) into bits::tritBytes(nwords) coded bytes at out.
  virtual ncclResult_t encodeTrits(const uint64_t* pos, const uint64_t* neg, size_t nwords, uint64_t* out) = 0;
  // bits::Kernels::decodeTrits of coded bytes from rank `peer`. Malformed
  // bytes are recorded, naming the peer, where the caller looks for them (the
  // device backend: the communicator's flag, which a later call reports; a
  // CPU backend may report at once); the planes are then not to be used.
  virtual ncclResult_t decodeTrits(const uint64_t* in, size_t nwords, uint64_t* pos, uint64_t* neg, int peer) = 0;
  // Plane q of dst = plane q of src, for q < planes, nwords words each.
  virtual ncclResult_t copyPlanes(uint64_t* dst, size_t dstStride, const uint64_t* src, size_t srcStride, int planes,
                                  size_t nwords) = 0;

  // Communication, always on the main lane, in uint64 words. send/recv only
  // between groupStart and groupEnd.
  virtual ncclResult_t groupStart() = 0;
  virtual ncclResult_t groupEnd() = 0;
  virtual ncclResult_t send(const uint64_t* data, size_t words, int peer) = 0;
  virtual ncclResult_t recv(uint64_t* data, size_t words, int peer) = 0;
  // recv holds nranks blocks of wordsPerRank words, rank r's at r * wordsPerRank;
  // send may be this rank's block of recv (in place).
  virtual ncclResult_t allGather(const uint64_t* send, uint64_t* recv, size_t wordsPerRank) = 0;
  // In-place integer sum over the ranks.
  virtual ncclResult_t allReduceSum(uint64_t* data, size_t words) = 0;

  // SIGNLION_CHECK only (src/nccl/call_agreement.h): host bytes into
  // backend memory, on the main lane; and backend memory back to the host
  // once everything issued before it on the main lane is done (the device
  // backend waits for the stream: not capturable).
  virtual ncclResult_t copyIn(uint64_t* dst, const void* src, size_t words) = 0;
  virtual ncclResult_t copyOut(void* dst, const uint64_t* src, size_t words) = 0;

  virtual ncclResult_t divert() = 0;
  virtual ncclResult_t join() = 0;
};

}  // namespace nccl
}  // namespace signlion
