// ucp_layout_perf: plain UCP 8 B tag ping-pong between two processes, in
// ucx_perftest's layout (one worker per process, both directions on it) or
// in the UCX transport's layout (per process a send worker holding the
// endpoint and a receive worker: plugin/ucx/ucx_transport.h, "one UCP worker
// per comm"). No code of ours in between: the difference between the two is
// what the layout costs (scripts/ucx_bench.sh prints it next to the plugin).
// While waiting it progresses both workers, as the plugin's test() does once
// a request has waited a while (the send worker's wireup needs progress), and
// yields as plugin_perf does (spinning processes on a loaded machine otherwise
// wait for each other's time slices).
//
//   ucp_layout_perf --role server|client --dir DIR --workers 1|2 [--iters 20000]
// The client prints "lat 8 <us>": the median of half the round trips.
#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pair_files.h"

namespace {

signlion::perf::PairFiles gPair("ucp_layout_perf");
using signlion::perf::nowSec;

void checkUcs(ucs_status_t s, const char* what) {
  if (s != UCS_OK) gPair.die((std::string(what) + ": " + ucs_status_string(s)).c_str());
}

void noSendCallback(void*, ucs_status_t, void*) {}
void noRecvCallback(void*, ucs_status_t, const ucp_tag_recv_info_t*, void*) {}

struct Layout {
  ucp_context_h context = nullptr;
  ucp_worker_h sendWorker = nullptr, recvWorker = nullptr;  // the same worker with --workers 1
  ucp_ep_h ep = nullptr;
  char sbuf[8] = {1}, rbuf[8] = {};

  explicit Layout(int workers) {
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    checkUcs(ucp_init(&p, nullptr, &context), "ucp_init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    checkUcs(ucp_worker_create(context, &wp, &recvWorker), "ucp_worker_create");
    sendWorker = recvWorker;
    if (workers == 2) checkUcs(ucp_worker_create(context, &wp, &sendWorker), "ucp_worker_create");
    ucp_address_t* addr;
    size_t len;
    checkUcs(ucp_worker_get_address(recvWorker, &addr, &len), "ucp_worker_get_address");
    gPair.put(gPair.server ? "addr.s" : "addr.c", &len, sizeof(len));
    gPair.put(gPair.server ? "bytes.s" : "bytes.c", addr, len);
    ucp_worker_release_address(recvWorker, addr);
    size_t peerLen = 0;
    gPair.get(gPair.server ? "addr.c" : "addr.s", &peerLen, sizeof(peerLen));
    std::vector<char> peer(peerLen);
    gPair.get(gPair.server ? "bytes.c" : "bytes.s", peer.data(), peer.size());
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    checkUcs(ucp_ep_create(sendWorker, &ep, &this->ep), "ucp_ep_create");
  }
  // The process exits right after: UCX reclaims endpoints and workers then.

  void wait(void* req) {
    if (req == nullptr) return;
    if (UCS_PTR_IS_ERR(req)) checkUcs(UCS_PTR_STATUS(req), "request");
    double start = 0;
    for (long spins = 0; ucp_request_check_status(req) == UCS_INPROGRESS; spins++) {
      ucp_worker_progress(recvWorker);
      if (sendWorker != recvWorker) ucp_worker_progress(sendWorker);
      if (spins < 1000 || spins % 16 != 0) continue;  // plugin_perf's wait(): few clock reads, a yield after 100 us
      double now = nowSec();
      if (start == 0) start = now;
      if (now - start > 100e-6) sched_yield();
      if (now - start > 60) gPair.die("request did not complete in 60 s");
    }
    ucp_request_free(req);
  }
  void pingPong() {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    rp.cb.recv = noRecvCallback;
    void* rreq = ucp_tag_recv_nbx(recvWorker, rbuf, sizeof(rbuf), 1, ~0ull, &rp);
    if (gPair.server) wait(rreq);
    ucp_request_param_t sp{};
    sp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    sp.cb.send = noSendCallback;
    void* sreq = ucp_tag_send_nbx(ep, sbuf, sizeof(sbuf), 1, &sp);
    if (!gPair.server) wait(rreq);
    wait(sreq);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string role;
  int workers = 0, iters = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--role")
      role = argv[i + 1];
    else if (k == "--dir")
      gPair.dir = argv[i + 1];
    else if (k == "--workers")
      workers = atoi(argv[i + 1]);
    else if (k == "--iters")
      iters = atoi(argv[i + 1]);
    else
      workers = -1;
  }
  if ((role != "server" && role != "client") || gPair.dir.empty() || (workers != 1 && workers != 2) || iters < 1 ||
      argc % 2 == 0) {
    fprintf(stderr, "usage: ucp_layout_perf --role server|client --dir DIR --workers 1|2 [--iters 20000]\n");
    return 2;
  }
  gPair.server = role == "server";
  Layout layout(workers);
  std::vector<double> halfTrips;
  halfTrips.reserve(iters);
  for (int i = 0; i < iters / 10 + 10; i++) layout.pingPong();
  for (int i = 0; i < iters; i++) {
    double t0 = nowSec();
    layout.pingPong();
    halfTrips.push_back((nowSec() - t0) * 1e6 / 2);
  }
  std::sort(halfTrips.begin(), halfTrips.end());
  if (!gPair.server) printf("lat 8 %.3f\n", halfTrips[halfTrips.size() / 2]);
  // Both sides' last replies are out: leave the peer a moment to take ours.
  double end = nowSec() + 0.2;
  while (nowSec() < end) ucp_worker_progress(layout.sendWorker);
  return 0;
}
