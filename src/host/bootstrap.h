// Bootstrap: how the ranks of a host communicator find each other before any
// data link exists, and how they trade small blobs (the ncclNet handles).
//
// One process calls bootstrapCreateRoot: it fills the unique id (magic,
// version, the root's address and port, a random 64-bit secret) and starts the
// root rendezvous, a detached thread. Each rank then calls Bootstrap::create
// with that id: it listens on its own socket, checks in with the root (hello:
// magic, secret, rank, nranks, its address), receives the address of
// rank+1 (nothing else: O(1) bytes per rank, O(N) at the root), and connects a ring: a stream to rank+1 and one accepted
// from rank-1, each proven by the secret and the sender's rank, each
// acknowledged by the other side. allGather and barrier run over that ring.
//
// Addresses come from the socket transport's device selection
// (SIGNLION_SOCKET_IFNAME, SIGNLION_SOCKET_FAMILY: src/net/socket_devices.h);
// without a device, loopback. IPv4 and IPv6 both work.
//
// Every wait is bounded by the timeout given at creation. Errors:
// ncclInvalidArgument for bad input (WARN names it), ncclRemoteError when a
// peer (or the root) misbehaves, closes, or does not answer in time,
// ncclSystemError when a local call fails or after abort().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "host/bootstrap_wire.h"
#include "nccl_sign.h"
#include "net/socket_devices.h"

namespace signlion {
namespace host {

// Fills *id and starts the root rendezvous in this process: a detached thread
// that accepts the nranks ranks of one communicator (nranks is learnt from the
// first valid hello), checks each hello (magic, secret, rank in range and
// unique, same nranks), drops strangers (garbage, wrong secret, slow talkers)
// with a WARN without disturbing the real ranks, sends every rank the address
// of its successor (rank+1), and exits. It also exits after timeoutMs,
// closing everything so that waiting ranks see an error. The root listens on the first device the socket
// transport selects, or on loopback if there is none.
ncclResult_t bootstrapCreateRoot(ncclSignUniqueId* id, int timeoutMs);

// Ids: bootstrapParseId and bootstrapWriteId (host/bootstrap_wire.h).

// Root rendezvous threads of this process still running (tests wait for 0
// before counting descriptors).
int bootstrapRootsRunning();

// Bytes the root rendezvous threads of this process have sent to ranks, in
// all (tests: O(N) per communicator, not the N^2 of a table to every rank).
uint64_t bootstrapRootBytesSent();

class Bootstrap {
 public:
  // Joins: opens this rank's own listen socket, checks in with the root, gets
  // the address of rank+1, then connects the ring. Every wait is bounded by
  // timeoutMs (which also bounds each later allGather / barrier).
  // nranks == 1 still checks in with the root (so the root sees its
  // communicator complete and exits at once) but opens no ring.
  // Errors: ncclInvalidArgument for out == NULL, nranks < 1 or above 2^20,
  // rank outside [0, nranks), timeoutMs < 1, a bad id.
  static ncclResult_t create(const ncclSignUniqueId& id, int rank, int nranks, int timeoutMs,
                             std::unique_ptr<Bootstrap>* out);
  ~Bootstrap();  // closes everything
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // data holds nranks slots of `bytes` each; slot rank() is this rank's
  // contribution; on return every slot holds that rank's contribution. Ring
  // algorithm, N-1 steps, each wait bounded. Every rank must pass the same
  // bytes (checked with the ring neighbours: ncclInvalidUsage otherwise).
  // After any failure the bootstrap is broken: its sockets are shut down, so
  // peers fail too, and every later call returns the first error.
  // Calls on one Bootstrap must not overlap (abort() excepted).
  ncclResult_t allGather(void* data, size_t bytes);

  // Returns once every rank has entered the barrier.
  ncclResult_t barrier();

  // Shuts every socket down now (safe from another thread while this rank is
  // blocked in allGather/barrier): the blocked call returns ncclSystemError,
  // and peers see their link close instead of hanging. Descriptors are closed
  // here, or by the blocked call on its way out. Later calls fail.
  void abort();

 private:
  Bootstrap(int rank, int nranks, int timeoutMs, uint64_t secret);
  // Brackets every ring operation: refuses after abort or a failure, records
  // what failed and breaks the ring so peers do not wait for us.
  ncclResult_t beginOp(const char* op);
  ncclResult_t endOp(ncclResult_t res);
  ncclResult_t ringCollective(uint32_t kind, void* data, size_t bytes);
  void shutdownLocked();
  void closeLocked();

  const int rank_;
  const int nranks_;
  const int timeoutMs_;
  const uint64_t secret_;
  int nextFd_ = -1;  // to rank+1
  int prevFd_ = -1;  // from rank-1
  int wakeFd_ = -1;  // eventfd, written by abort() to wake a blocked poll

  std::mutex mu_;
  int busy_ = 0;
  bool aborted_ = false;
  ncclResult_t error_ = ncclSuccess;  // sticky
};

}  // namespace host
}  // namespace signlion
