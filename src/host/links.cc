#include "host/links.h"

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "algo/schedule.h"
#include "common/checks.h"

namespace signlion {
namespace host {

namespace {
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<int> schedulePeers(int nranks, int rank) {
  std::set<int> peers;
  if (nranks > 1) {
    peers.insert((rank + 1) % nranks);
    peers.insert((rank + nranks - 1) % nranks);
  }
  // Every algorithm's schedule over enough blocks that no shard is empty
  // names every peer it ever uses; partners depend on rank only.
  for (ncclSignAlgo_t a : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
                           ncclSignAlgoFieldSum}) {
    algo::Schedule s;
    if (algo::buildSchedule(a, nranks, rank, 4 * (int64_t)nranks, algo::OpSpec{}, &s) != ncclSuccess) continue;
    for (const algo::Step& st : s.steps) {
      for (const algo::Send& x : st.sends) peers.insert(x.peer);
      for (const algo::Recv& x : st.recvs) peers.insert(x.peer);
    }
  }
  peers.erase(rank);
  return std::vector<int>(peers.begin(), peers.end());
}

ncclResult_t Links::connect(const Net& net, Bootstrap& bootstrap, const std::vector<int>& peers, int timeoutMs) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  const ncclNet_v11_t& api = net.api();
  links_.assign(nranks, Link{});
  peers_ = peers;
  // Handle table: row r holds rank r's listen handle for each peer p.
  std::vector<char> table((size_t)nranks * nranks * NCCL_NET_HANDLE_MAXSIZE, 0);
  std::vector<void*> listens(nranks, nullptr);
  ncclResult_t res = ncclSuccess;
  auto handle = [&](int owner, int peer) {
    return table.data() + ((size_t)owner * nranks + peer) * NCCL_NET_HANDLE_MAXSIZE;
  };
  for (int p : peers) NCCLCHECKGOTO(api.listen(net.ctx(), net.dev(), handle(rank, p), &listens[p]), res, done);
  NCCLCHECKGOTO(bootstrap.allGather(table.data(), (size_t)nranks * NCCL_NET_HANDLE_MAXSIZE), res, done);
  {
    int64_t deadline = nowMs() + timeoutMs;
    size_t pending = peers.size() * 2;
    while (pending > 0) {
      size_t before = pending;
      for (int p : peers) {
        Link& l = links_[p];
        if (l.sendComm == nullptr) {
          NCCLCHECKGOTO(api.connect(net.ctx(), net.dev(), handle(p, rank), &l.sendComm, nullptr), res, done);
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

void Links::close(const Net& net) {
  for (Link& l : links_) {
    if (l.sendComm != nullptr) net.api().closeSend(l.sendComm);
    if (l.recvComm != nullptr) net.api().closeRecv(l.recvComm);
    l = Link{};
  }
}

}  // namespace host
}  // namespace signlion
