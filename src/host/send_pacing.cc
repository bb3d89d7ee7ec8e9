#include "host/send_pacing.h"

#include <algorithm>
#include <utility>

#include "common/debug.h"

namespace signlion {
namespace host {

uint64_t pacedLinkBytesPerSec(int64_t linkMbits) {
  if (linkMbits <= 0 || signlionParamHostPacing() == 0) return 0;
  return (uint64_t)linkMbits * 1000000 / 8 * kPacedPercent / 100;
}

void SendPacing::init(int64_t linkMbits, std::vector<int> remotePeers) {
  linkBytesPerSec_ = pacedLinkBytesPerSec(linkMbits);
  remote_ = std::move(remotePeers);
  current_ = 0;
}

void SendPacing::follow(const Net& net, const Links& links, int fanout) {
  const uint64_t want = linkBytesPerSec_ / (uint64_t)std::max(1, fanout);
  if (want == current_) return;
  bool ok = true;
  for (int p : remote_) ok &= net.setSendPacing(links.peer(p).sendComm, want);
  if (!ok && !refusedLogged_) {
    INFO(kSubsysNet, "host communicator: a link refused to be paced at %llu bytes/s", (unsigned long long)want);
    refusedLogged_ = true;
  }
  current_ = want;
}

}  // namespace host
}  // namespace signlion
