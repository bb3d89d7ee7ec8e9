#include "host/links.h"

#include <chrono>
#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "algo/direct.h"
#include "algo/schedule.h"
#include "common/checks.h"
#include "common/clock.h"

namespace signlion {
namespace host {

namespace {
// One published listen handle: for which peer, and the handle itself. The
// handle is kept 16-byte aligned: transports (ours among them) read their
// own struct out of it, as they may from NCCL's aligned handle buffers.
struct HandleSlot {
  int64_t peer;
  alignas(16) char handle[NCCL_NET_HANDLE_MAXSIZE];
};

const char* findHandle(const HandleSlot* row, int slots, int peer) {
  for (int i = 0; i < slots; i++)
    if (row[i].peer == peer) return row[i].handle;
  return nullptr;
}

}  // namespace

int maxPeerSlots(int nranks, int nodeRanks) {
  int lg = 0;
  while ((1 << lg) < nranks) lg++;
  const int logarithmic = 2 * lg + 4 + std::max(0, nodeRanks - 1);
  // The direct algorithm's N-1 peers, where it may run.
  return algo::directAllowed(nranks) ? std::max(logarithmic, nranks - 1) : logarithmic;
}

int hierarchicalNodeRanks(const algo::Topology& topo, int nranks, ncclSignAlgo_t configured) {
  const auto nodes = topo.members(nranks);
  size_t largest = 0;
  for (const auto& m : nodes) largest = std::max(largest, m.size());
  if (largest > (size_t)kMaxHierNodeRanks) return 0;
  return nodes.size() > 1 || configured == ncclSignAlgoHierarchical ? (int)largest : 0;
}

std::vector<int> schedulePeers(int nranks, int rank, const algo::Topology& topo, bool withHier,
                               ncclSignAlgo_t configured) {
  std::set<int> peers;
  if (nranks > 1) {
    peers.insert((rank + 1) % nranks);
    peers.insert((rank + nranks - 1) % nranks);
  }
  // Every algorithm's schedule over enough blocks that no shard is empty
  // names every peer it ever uses; partners depend on rank only. One that a
  // setting rules out is passed over quietly: a call that forces it is where
  // the WARN belongs (and its peers, the ring's, are in already).
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoFieldSum,
                           ncclSignAlgoHierarchical, ncclSignAlgoDirect, ncclSignAlgoTree}) {
    algo::Schedule s;
    if (configured != ncclSignAlgoAuto && a != configured) continue;
    if (algo::settingsConflict(a, nranks).name != nullptr) continue;
    if (a == ncclSignAlgoHierarchical && !withHier) continue;
    if (a == ncclSignAlgoDirect && !algo::directAllowed(nranks)) continue;
    if (algo::buildSchedule(a, nranks, rank, 4 * (int64_t)nranks, algo::OpSpec{}, &s, &topo) != ncclSuccess) continue;
    for (const algo::Step& st : s.steps) {
      for (const algo::Send& x : st.sends) peers.insert(x.peer);
      for (const algo::Recv& x : st.recvs) peers.insert(x.peer);
    }
  }
  peers.erase(rank);
  return std::vector<int>(peers.begin(), peers.end());
}

ncclResult_t Links::connect(const Net& net, Bootstrap& bootstrap, const std::vector<int>& peers, int timeoutMs,
                            int nodeRanks) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  const ncclNet_v11_t& api = net.api();
  links_.assign(nranks, Link{});
  peers_ = peers;
  // Handle table: row r holds rank r's listen handles, one slot per peer of
  // r. A rank has O(log N) peers (ring neighbours, halving-doubling partners,
  // the fold partner), so the table is O(N log N), not O(N^2).
  const int slots = maxPeerSlots(nranks, nodeRanks);
  if ((int)peers.size() > slots) {
    WARN("rank %d: %zu peers exceed the %d handle slots of %d ranks", rank, peers.size(), slots, nranks);
    return ncclInternalError;
  }
  std::vector<HandleSlot> table((size_t)nranks * slots);
  std::vector<void*> listens(nranks, nullptr);
  ncclResult_t res = ncclSuccess;
  HandleSlot* mine = table.data() + (size_t)rank * slots;
  for (int i = 0; i < slots; i++) mine[i].peer = i < (int)peers.size() ? peers[i] : -1;
  for (int i = 0; i < (int)peers.size(); i++)
    NCCLCHECKGOTO(api.listen(net.ctx(), net.dev(), mine[i].handle, &listens[peers[i]]), res, done);
  NCCLCHECKGOTO(bootstrap.allGather(table.data(), (size_t)slots * sizeof(HandleSlot)), res, done);
  {
    int64_t deadline = nowMs() + timeoutMs;
    size_t pending = peers.size() * 2;
    while (pending > 0) {
      size_t before = pending;
      for (int p : peers) {
        Link& l = links_[p];
        if (l.sendComm == nullptr) {
          const char* h = findHandle(table.data() + (size_t)p * slots, slots, rank);
          if (h == nullptr) {
            WARN("rank %d: rank %d published no handle for it (the peer sets are not symmetric)", rank, p);
            res = ncclInternalError;
            goto done;
          }
          NCCLCHECKGOTO(api.connect(net.ctx(), net.dev(), const_cast<char*>(h), &l.sendComm, nullptr), res, done);
          if (l.sendComm != nullptr) pending--;
        }
        if (l.recvComm == nullptr) {
          NCCLCHECKGOTO(api.accept(listens[p], &l.recvComm, nullptr), res, done);
          if (l.recvComm != nullptr) pending--;
        }
      }
      if (pending == before) std::this_thread::sleep_for(std::chrono::microseconds(50));  // leave the core to peers
      if (pending > 0 && nowMs() > deadline) {
        WARN("rank %d: links to %zu peers not all up after %d ms", rank, peers.size(), timeoutMs);
        res = ncclRemoteError;
        goto done;
      }
    }
  }
  INFO(kSubsysInit | kSubsysNet, "rank %d/%d: %zu links up over %s", rank, nranks, peers.size(), net.name());
done:
  for (void* l : listens)
    if (l != nullptr) api.closeListen(l);
  if (res != ncclSuccess) close(net);
  return res;
}

void Links::abort(const Net& net) {
  for (Link& l : links_) {
    net.abortComm(l.sendComm);
    net.abortComm(l.recvComm);
  }
}

void Links::close(const Net& net) {
  for (Link& l : links_) {
    if (l.sendComm != nullptr) net.api().closeSend(l.sendComm);
    if (l.recvComm != nullptr) net.api().closeRecv(l.recvComm);
    l = Link{};
  }
}

}  // namespace host
}  // namespace signlion
