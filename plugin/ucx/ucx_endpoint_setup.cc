// Confirming a new endpoint on both sides before connect and accept hand
// out its comm (ucx_comm.h): UCX 1.13 aborts the process when a peer dies
// while the endpoint's wireup is still under way.
#include "ucx/ucx_comm.h"

#include <cstring>

#include "common/checks.h"
#include "common/clock.h"

namespace signlion {
namespace net {
namespace ucx {

// ---- Confirming an endpoint before the comm is handed out ----------------------
//
// ucp_ep_create only starts UCX's wireup: the first messages on the new
// endpoint, the receiver's worker making its own endpoint back and answering
// (wireup REQUEST/REPLY, wireup.c), TCP connections being opened (tcp_ep.c)
// all go on inside later ucp_worker_progress calls. UCX 1.13 aborts the
// process when a peer dies while that is still under way:
//   - ucp_request_send_state_ff asserts ("got REP message",
//     ucp_request.c:684) when the failed endpoint's pending queue still
//     holds the REPLY to the dead peer's REQUEST (queued because the TCP
//     connection that carries it was not up yet);
//   - uct_tcp_ep_destroy_progress asserts (tcp_ep.c:478) on a TCP
//     endpoint that failed while still connecting to the dead peer.
// Connection setup is the only time either is queued. So a comm is handed
// out only once its endpoint is complete on both sides, and the last step
// of each side needs the other side's last step done:
//   1. the sender's synchronous send (tag setupTag(id, 0)) completes once
//      the receiver's worker matched it and its acknowledgement came back
//      over the receiver's endpoint, queued behind that worker's REPLY: the
//      receiver's part of the wireup is out, and ours is answered;
//   2. the sender flushes its endpoint: UCT's TCP flush is refused until
//      each lane's connection is up (uct_tcp_ep_check_tx_res), so every lane
//      is connected, not only the one that carried step 1;
//   3. the sender's plain send (tag setupTag(id, 1)): the receiver's accept()
//      returns the comm once it has both messages, the sender's connect()
//      once this send is out.
// Either side returns its comm only after the other one's wireup is done: a
// peer that dies after connect/accept (the killed-rank case) finds nothing
// of UCX's setup in flight. A peer that dies during connect/accept still
// can (no caller can then prevent UCX's assertions; docs/PLUGIN.md).

// The sender's steps 1-3; *ready once all are done. The caller holds
// workerLock().
ncclResult_t confirmEndpoint(SendComm* c, bool* ready) {
  *ready = false;
  if (c->ep == nullptr) {  // the receiver closed before we reached it (connectSteps)
    c->connState = 5;
    *ready = true;
    return ncclSuccess;
  }
  progress(c);
  for (int i = 0; i < 3; i++) {
    Slot* s = &c->setup[i];
    if (!c->setupPosted[i]) {
      c->setupPosted[i] = true;
      ucp_request_param_t p = opParams(s, nullptr);
      p.cb.send = sendDone;
      ucs_status_ptr_t r;
      if (i == 0)
        r = ucp_tag_send_sync_nbx(c->ep, &c->setupBuf[0], 1, setupTag(c->commId, 0), &p);
      else if (i == 1)
        r = ucp_ep_flush_nbx(c->ep, &p);
      else
        r = ucp_tag_send_nbx(c->ep, &c->setupBuf[1], 1, setupTag(c->commId, 1), &p);
      startSlot(s, r, 1);
    }
    if (s->done && s->status != UCS_OK) {
      WARN("NET/signlion-ucx: connect: setup step %d of the endpoint failed: %s", i + 1, ucsStr(s->status));
      return peerLost(c, "the endpoint failed before the listener confirmed it");
    }
    if (!s->done) {
      if (c->epStatus != UCS_OK) return peerLost(c, "the endpoint failed before the listener confirmed it");
      if (checkPeer(c, false) != OobWatch::kAlive)
        return peerLost(c, "the listener closed the connection before it confirmed the endpoint");
      return ncclSuccess;  // timed out by progressConnect
    }
  }
  c->connState = 5;
  *ready = true;
  return ncclSuccess;
}

// The receiver's side: its receives for the two setup messages, posted once
// the reply with our worker address is out. The caller holds workerLock().
void postSetupReceives(Comm* c) {
  for (int i = 0; i < 2; i++) {
    ucp_request_param_t p = opParams(&c->setup[i], nullptr);
    p.cb.recv = recvDone;
    c->setupPosted[i] = true;
    startSlot(&c->setup[i], ucp_tag_recv_nbx(c->worker, &c->setupBuf[i], 1, setupTag(c->commId, i), kFullTagMask, &p),
              1);
  }
}

// Whether both setup messages came (1), not yet (0), or a receive failed
// (-1). drain: progress until they came or the worker has nothing left to
// do (bounded), for a connector already gone, whose messages are all in the
// worker's reach. The caller holds workerLock().
int setupReceived(Comm* c, bool drain) {
  for (int i = 0; i < (drain ? 64 : 1) && !(c->setup[0].done && c->setup[1].done); i++)
    if (progress(c) == 0 && drain) break;
  for (int i = 0; i < 2; i++)
    if (c->setup[i].done && c->setup[i].status != UCS_OK) return -1;
  return c->setup[0].done && c->setup[1].done ? 1 : 0;
}

}  // namespace ucx
}  // namespace net
}  // namespace signlion
