// A baseline for sign_allreduce_perf, not part of the library: the 1-bit
// compressed all-reduce of DeepSpeed's 1-bit Adam / 1-bit LAMB
// (NcclBackend.compressed_allreduce), run over signlion's transport.
//
// Each call, on every rank, for a tensor of `count` fp32 values padded with
// zeros to P elements (onebitPaddedCount: whole bytes of signs per chunk):
//  1. m = input + worker error; scale = ||m||_2 / sqrt(P); worker error =
//     m - scale * sign(m), where sign is +1 for m >= 0 and -1 below.
//  2. All-to-all: chunk j (P/N elements) of sign(m), packed 8 per byte, goes
//     to rank j with the rank's scale (one fp32).
//  3. Owner j: c = sum over ranks i, in rank order, of sign_i * scale_i / N,
//     plus its server error; scale_j = ||c||_2 / sqrt(P/N); server error =
//     c - scale_j * sign(c).
//  4. All-gather: each owner's packed sign(c) and scale_j go to every rank;
//     the output is scale_j * sign(c) for every chunk.
// The errors persist across calls of the same count (error feedback, as in
// DeepSpeed); a call with another count, or resetErrors(), starts from zero.
// onebit_reference.h computes the same in one place; the two agree bit for bit.
//
// Wire: each phase sends N-1 messages of P/(8N) bytes plus a 4-byte scale,
// so onebitPayloadBytes = 2(N-1)(P/(8N) + 4) bytes per rank per call: about
// 2(N-1)/N bits per element plus 64(N-1)/count for the scales.
//
// Transport: the ncclNet the host communicator uses (the built-in socket
// transport by default, or the named plugin), on links of its own between the
// same ranks: one send and one receive comm per peer, connected at create().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nccl_sign.h"

namespace signlion {
namespace host {
class Net;
}
namespace perf {

// Every rank links to every other (a send and a receive comm each, about 10
// sockets and 4 helper threads per peer with the built-in transport): as the
// direct algorithm, the baseline runs on at most this many ranks.
constexpr int kOnebitMaxRanks = 16;

// Trades `bytes` of this rank for every rank's (rank order, nranks x bytes in
// `all`); called by every rank at once. Returns false on failure.
using OnebitExchange = std::function<bool(const void* mine, size_t bytes, void* all)>;

class OnebitBaseline {
 public:
  // plugin: as ncclSignConfig_t.netPlugin (nullptr or "": the built-in
  // sockets). Every wait is bounded by timeoutMs.
  // Errors: ncclInvalidArgument for a bad nranks (1..kOnebitMaxRanks), rank
  // or timeout (WARN naming it), the transport's own errors, ncclRemoteError when a peer's
  // link does not come up in time.
  static ncclResult_t create(int nranks, int rank, const char* plugin, int timeoutMs, const OnebitExchange& exchange,
                             std::unique_ptr<OnebitBaseline>* out);
  ~OnebitBaseline();
  OnebitBaseline(const OnebitBaseline&) = delete;
  OnebitBaseline& operator=(const OnebitBaseline&) = delete;

  // One all-reduce of `count` fp32 values; in and out may be the same buffer.
  // Buffers grow on a larger count and are reused after (no allocation once
  // warm). ncclRemoteError when a peer's message is missing, short or late.
  ncclResult_t allReduce(const float* in, float* out, size_t count);
  void resetErrors();
  // Paces its links as the host communicator paces the direct algorithm's
  // (host/send_pacing.h), which sends to every peer at once as this pattern
  // does: each send link capped at linkMbits / (N-1), so the two are compared
  // on the same footing. 0 (or SIGNLION_HOST_PACING=0): no cap.
  void paceLinks(int64_t linkMbits);
  // Ends every link as a crash would (after a failed call): each peer's
  // pending transfers with this rank fail at once instead of waiting out
  // the timeout. The destructor still closes them.
  void abort();

  // Bytes this rank handed to the transport (messages' payload), in total.
  uint64_t payloadBytesSent() const { return payloadSent_; }
  // Bytes the transport put on the wire towards `peer` (payload plus its
  // message headers), or towards every peer with peer = -1.
  uint64_t wireBytesSent(int peer = -1) const;

 private:
  OnebitBaseline() = default;
  ncclResult_t connect(const char* plugin, const OnebitExchange& exchange);
  void resize(size_t count);
  // Receives one message of `bytes` from every peer into recv_ (peer p at
  // p * slot_) while sending sendOf(p) to every peer; pairwise order: step
  // k sends to rank + k and receives from rank - k.
  ncclResult_t exchangeWithPeers(const std::function<const uint8_t*(int peer)>& sendOf, size_t bytes);

  int nranks_ = 0, rank_ = 0, timeoutMs_ = 0;
  std::unique_ptr<host::Net> net_;
  std::vector<void*> sendComms_, recvComms_;  // per peer (null for this rank)
  size_t count_ = 0, padded_ = 0, chunk_ = 0, slot_ = 0;
  std::vector<float> m_, workerError_, combined_, serverError_;
  std::vector<uint8_t> send_;  // N slots: chunk j's message at j * slot_ ([scale][signs])
  std::vector<uint8_t> recv_;  // N slots: peer p's message at p * slot_
  std::vector<void*> sendReqs_, recvReqs_;  // per peer, while in flight
  std::vector<void*> waitOn_;               // the comms with a transfer in flight
  uint64_t payloadSent_ = 0;
};

}  // namespace perf
}  // namespace signlion
