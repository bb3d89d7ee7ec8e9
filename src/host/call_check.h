// Every rank agrees or every rank gets an error. Each call of the host
// communicator has a sequence number and a signature (what the ranks must
// pass identically: count, datatype, op, zero and tie rules, algorithm,
// segment); a rank's first message to each peer in a call (segment) starts
// with a small header carrying both, and the receiver compares it with its
// own before the step ends, so nothing of a call that disagrees is forwarded
// or written out. The header rides in front of the first data chunk, so it
// costs no message of its own; a peer whose first transfer is empty gets the
// header alone. A rank that finds another call or another signature fails
// with ncclInvalidUsage and a WARN naming the field and both values; its
// peers then miss its next messages and fail within the timeout. Headers
// that travel alone land in a registered buffer of their own (one slot per
// peer), so a warm call allocates and registers nothing. The header is 16
// bytes (CallHeader). The check relies on nothing but ncclNet's in-order
// delivery on each comm: no tags, so any NCCL net plugin carries it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/cost_model.h"
#include "algo/topology.h"
#include "common/call_signature.h"
#include "common/config.h"
#include "host/bootstrap.h"
#include "host/links.h"
#include "host/net.h"
#include "host/registrations.h"
#include "host/transfers.h"

namespace signlion {
namespace host {

// What one call's first message to each peer says: 16 bytes, so that on a
// small call (a 750-byte vote vector, one header per peer) the check costs
// little of the wire. Fixed size: a receive of a header never depends on the
// peer's idea of the call. Word 0 is the count, whole; word 1 packs the rest
// (low bits first): an 8-bit magic, the collective (2 bits), datatype (4),
// op (2), zero rule (2), tie rule (2), algorithm (4), the low 24 bits of the
// sequence number and the low 16 bits of the segment index. The sender's
// rank is the link it came on; the segment size is not sent, as it follows
// from SIGNLION_HOST_SEGMENT, which checkSettingsAgree compares at init. A
// rank that is 2^23 calls (2^15 segments) away would read as another number
// still: the difference is named, only with the nearest such value.
struct CallHeader {
  uint64_t count = 0;
  uint64_t packed = 0;
  static constexpr uint64_t kMagic = 0xa7;  // low byte of `packed`
  // The header that says `sig`; kinds, types, ops, rules and algorithms all
  // fit their fields (static_asserts in call_check.cc).
  static CallHeader encode(const CallSignature& sig);
  // False when the magic is not there (not a header). Otherwise *sig gets
  // the fields, made whole against `mine` (sequence number and segment index
  // nearest to mine's with the same low bits; mine's segment size), and
  // `rank` as its sender.
  bool decode(const CallSignature& mine, int rank, CallSignature* sig) const;
};
static_assert(sizeof(CallHeader) == 16, "CallHeader is a wire format");

constexpr size_t kHeaderBytes = sizeof(CallHeader);
constexpr size_t kHeaderWords = kHeaderBytes / 8;

// Cookies of a header alone in a Transfers batch: the peer with this bit.
constexpr size_t kHeaderCookie = size_t{1} << (sizeof(size_t) * 8 - 1);

class CallCheck {
 public:
  // Registers the header slots on every link comm.
  ncclResult_t init(const Net& net, const Links& links, int rank, int nranks);
  // Deregisters (when the comms are still open) and frees.
  void release(const Net& net);
  void forget();
  ~CallCheck() { forget(); }

  // Starts one run (a segment of a call, or one step of the check ring): the
  // header this rank sends from now on; every peer gets it again once.
  void begin(const CallSignature& mine);
  const CallSignature& mine() const { return mine_; }

  // True the first time in this run for `peer` (and never again): that
  // message carries the header.
  bool firstSend(int peer);
  bool firstRecv(int peer);
  // Writes the header in front of a first message (kHeaderBytes at msg).
  void writeHeader(void* msg) const;
  // The header alone, to (from) a peer whose first transfer is empty (and
  // around the check ring): from (into) this object's registered slots.
  void sendAlone(Transfers& t, void* comm);
  void recvAlone(Transfers& t, int peer, void* comm);

  // A first message from `peer` of `size` bytes at msg (a header alone:
  // msg = nullptr, the peer's slot) whose payload should be payloadBytes:
  // its header against mine() (ncclInvalidUsage with a WARN naming the
  // field and both values), then its size.
  ncclResult_t verify(int peer, const void* msg, size_t size, size_t payloadBytes, const char* fn) const;

  // N-1 steps of headers around the ring (to rank+1, from rank-1): a call
  // that has no data to move still takes part, and fails when any rank
  // passed something else (a failed rank sends no further header, so the
  // failure goes round within the timeout).
  ncclResult_t checkRing(Transfers& t, const Links& links, const CallSignature& mine, const char* fn);

 private:
  CallHeader* slot(int i) const { return reinterpret_cast<CallHeader*>(buf_) + i; }
  void* mhandle(void* comm) const { return regs_.mhandle(comm); }

  int rank_ = 0;
  int nranks_ = 0;
  char* buf_ = nullptr;  // nranks_ receive slots (by peer), then the one this rank sends
  Registrations regs_;
  CallSignature mine_;                     // this run's signature (slot(nranks_) holds it encoded)
  uint64_t run_ = 0;                       // begin() calls so far
  std::vector<uint64_t> sentIn_, recvIn_;  // per peer: the run whose header went (came)
};

// Compares the settings every rank must share (the config's rules and
// algorithm, the host tunables that shape messages, the cost model's
// parameters) across the ranks once, at ncclSignCommInitRank: ncclInvalidUsage
// on every rank, with a WARN naming the setting and both values, when any
// differs. The same exchange carries each rank's host identity (hashed, not
// compared): *topology comes back with every rank's node.
ncclResult_t checkSettingsAgree(Bootstrap& bootstrap, const ResolvedConfig& config, const algo::CostParams& cost,
                                algo::Topology* topology);

// Bytes of each rank's row in checkSettingsAgree's table.
size_t settingsRowBytes();
// checkSettingsAgree's verdict on the gathered table as this rank (`rank`)
// sees it: nranks rows of settingsRowBytes() at `rows` (any alignment), as
// they came from the peers; *topology from the rows' host hashes.
ncclResult_t compareSettingsRows(const void* rows, int nranks, int rank, algo::Topology* topology);

// The check of one first message of a call from `peer`, as `rank` makes it:
// `header` holds the message's first kHeaderBytes (any alignment; ignored
// when size < kHeaderBytes), `size` is the whole message's and payloadBytes
// what its payload should be. ncclInvalidUsage, with a WARN from `fn` naming
// the field and both values, when it is no header, says another call or
// signature than `mine`, or has another size. CallCheck::verify calls it.
ncclResult_t verifyCallHeader(const CallSignature& mine, int rank, int peer, const void* header, size_t size,
                              size_t payloadBytes, const char* fn);

}  // namespace host
}  // namespace signlion
