#include "host/link_rate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include <unistd.h>

#include "algo/cost_model.h"
#include "common/checks.h"
#include "common/clock.h"
#include "common/param.h"
#include "host/host_params.h"
#include "host/links.h"
#include "host/registrations.h"
#include "host/transfers.h"

namespace signlion {
namespace host {

namespace {
const double kStandard[] = {10, 100, 1000, 2500, 5000, 10000, 25000, 40000, 50000, 100000, 200000, 400000};
// SIGNLION_COST_BETA_MBPS set to a rate (a bad value, WARNed, is as unset).
bool betaIsSet() { return signlionParamCostBetaMBpsIsSet(); }
}  // namespace

bool isStandardLineRate(int64_t mbits) {
  for (double s : kStandard)
    if ((double)mbits == s) return true;
  return false;
}

bool isLineRate(int64_t mbits) { return betaIsSet() || isStandardLineRate(mbits); }

int64_t nominalLinkMbits(double measuredMbits) {
  double best = 0, bestDistance = 0;
  for (double s : kStandard) {
    if (measuredMbits < 0.7 * s || measuredMbits > 1.1 * s) continue;
    const double distance = std::fabs(std::log(measuredMbits / s));
    if (best == 0 || distance < bestDistance) best = s, bestDistance = distance;
  }
  if (best > 0) return (int64_t)best;
  return std::max<int64_t>(1, (int64_t)std::llround(std::min(measuredMbits, 1e12)));
}

int64_t agreedLinkMbits(const double* measuredMbits, int nranks) {
  double slowest = 0;
  for (int r = 0; r < nranks; r++)
    if (measuredMbits[r] > 0 && (slowest == 0 || measuredMbits[r] < slowest)) slowest = measuredMbits[r];
  return slowest > 0 ? nominalLinkMbits(slowest) : 0;
}

LinkSettings linkSettingsFor(int64_t mbits) {
  LinkSettings s;
  s.betaMBps = std::max<int64_t>(1, mbits / 8);
  s.chunkBytes = hostChunkBytesForBeta((double)s.betaMBps);
  return s;
}

namespace {

constexpr size_t kFirstRoundBytes = 1 << 20;   // per link; x4 per round
constexpr int kProbeRounds = 3;                 // up to 16 MiB per link
constexpr size_t kMinMessageBytes = 128 << 10;  // past the socket transport's inline size: on its data streams
constexpr int kMaxMessages = 16;                // per round; the rate is that of the second half
constexpr int64_t kEnoughRoundUs = 20000;       // a round this long measures the link, not TCP's ramp
constexpr double kNoRound = 1e18;                // a rank that is no node's first: its "round" never too short

// One probe round's result on one rank, as every rank gathers it.
struct RoundRow {
  double mbits;       // received in the round's second half; 0: this rank did not probe
  double durationUs;  // first post to last receive; kNoRound: did not probe
};

// Whether and how this rank would learn the rate; gathered first, so every
// rank probes or none does.
struct PlanRow {
  int64_t betaSet;    // SIGNLION_COST_BETA_MBPS when set and valid, else 0
  int64_t chunkSet;   // SIGNLION_HOST_CHUNK_BYTES is set (non-zero): the chunk does not follow the rate
  int64_t wantProbe;  // several nodes, and not over the loopback interface
  uint64_t stack;     // localNetworkStack()
};

// The network stack this process talks through: its machine (boot id) and
// network namespace. Ranks that share one reach each other through the
// kernel's loopback whatever interface they name, crossing no link: nodes
// that a host id makes (SIGNLION_HOSTID) on one machine, unlike namespaces
// joined by links.
uint64_t localNetworkStack() {
  std::string id;
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f) != nullptr) id = buf;
    fclose(f);
  }
  char ns[64] = {0};
  if (readlink("/proc/self/ns/net", ns, sizeof(ns) - 1) > 0) id += ns;
  return algo::hostIdHash(id);
}

// The probe's links and buffer, closed however the probe ends.
struct ProbeLinks {
  const Net& net;
  Links links;
  Registrations regs;
  std::vector<char> buf;
  explicit ProbeLinks(const Net& n) : net(n) {}
  ~ProbeLinks() {
    regs.release(net);
    links.close(net);
  }
};

// Rounds of the probe (link_rate.h) over the nodes' first ranks; *measured
// gets every rank's last-round rate (0 where a rank did not probe), *bytes
// the last round's bytes per link, *connectUs the time its links took to
// come up and *totalUs the probe's time. *connected false: some first rank's
// probe links did not come up within half the timeout (a firewall, a port
// range); the rate is then not learned, and the communicator's own links,
// made next, fail on every rank with their own message, as without a probe.
// Half the timeout so that the ranks that wait for the probe in the
// bootstrap's gather below are still waiting when the probing ranks arrive.
ncclResult_t probe(const Net& net, Bootstrap& bootstrap, const algo::Topology& topo, int timeoutMs,
                   std::vector<double>* measured, size_t* bytes, int64_t* connectUs, int64_t* totalUs,
                   bool* connected) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  const int64_t start = nowUs();
  const std::vector<std::vector<int>> nodes = topo.members(nranks);
  const int k = (int)nodes.size();
  int me = -1;
  for (int i = 0; i < k; i++)
    if (nodes[i][0] == rank) me = i;
  const int next = me < 0 ? -1 : nodes[(me + 1) % k][0], prev = me < 0 ? -1 : nodes[(me + k - 1) % k][0];
  std::set<int> peerSet;
  if (me >= 0) peerSet = {next, prev};
  ProbeLinks p(net);
  const ncclResult_t up =
      p.links.connect(net, bootstrap, std::vector<int>(peerSet.begin(), peerSet.end()), std::max(1, timeoutMs / 2));
  *connectUs = nowUs() - start;
  std::vector<int32_t> upTable(nranks, 0);
  upTable[rank] = up == ncclSuccess ? 1 : 0;
  NCCLCHECK(bootstrap.allGather(upTable.data(), sizeof(int32_t)));
  *connected = std::find(upTable.begin(), upTable.end(), 0) == upTable.end();
  if (!*connected) {
    *totalUs = nowUs() - start;
    return ncclSuccess;
  }
  const size_t maxBytes = kFirstRoundBytes << (2 * (kProbeRounds - 1));
  if (me >= 0) {
    p.buf.assign(2 * maxBytes, 0);
    NCCLCHECK(p.regs.add(net, p.links, p.buf.data(), p.buf.size()));
  }
  std::vector<RoundRow> table(nranks);
  Transfers t(net, timeoutMs);
  std::vector<int64_t> stamps(kMaxMessages);
  for (int round = 0;; round++) {
    const size_t total = kFirstRoundBytes << (2 * round);
    const size_t m = std::max(kMinMessageBytes, total / kMaxMessages);
    const int messages = (int)(total / m);
    RoundRow mine{0, kNoRound};
    if (me >= 0) {
      void* sendComm = p.links.peer(next).sendComm;
      void* recvComm = p.links.peer(prev).recvComm;
      char* out = p.buf.data();
      char* in = out + maxBytes;
      t.clear();
      for (int i = 0; i < messages; i++) {
        t.send(sendComm, out + i * m, m, p.regs.mhandle(sendComm));
        t.recv(recvComm, in + i * m, m, p.regs.mhandle(recvComm), (size_t)i);
      }
      const int64_t t0 = nowUs();
      NCCLCHECK(t.run([&](size_t cookie, size_t) {
        stamps[cookie] = nowUs();
        return ncclSuccess;
      }));
      const int half = messages / 2;
      const double secondHalfUs = (double)std::max<int64_t>(1, stamps[messages - 1] - stamps[half - 1]);
      mine.mbits = 8.0 * (double)(m * (messages - half)) / secondHalfUs;  // bits per us = Mbit/s
      mine.durationUs = (double)(stamps[messages - 1] - t0);
    }
    table[rank] = mine;
    NCCLCHECK(bootstrap.allGather(table.data(), sizeof(RoundRow)));
    double shortest = kNoRound;
    for (const RoundRow& r : table) shortest = std::min(shortest, r.durationUs);
    if (shortest >= kEnoughRoundUs || round + 1 == kProbeRounds) {
      measured->resize(nranks);
      for (int r = 0; r < nranks; r++) (*measured)[r] = table[r].mbits;
      *bytes = total;
      break;
    }
  }
  *totalUs = nowUs() - start;
  return ncclSuccess;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char s[256];
  snprintf(s, sizeof(s), f, a, b, c, d);
  return s;
}

}  // namespace

ncclResult_t learnLinkRate(const Net& net, Bootstrap& bootstrap, const algo::Topology& topo, int timeoutMs,
                           LearnedLink* out) {
  const int nranks = bootstrap.nranks(), rank = bootstrap.rank();
  *out = LearnedLink{};
  const int64_t beta = betaIsSet() ? signlionParamCostBetaMBps() : 0;
  const bool several = nranks > 1 && topo.known() && topo.members(nranks).size() > 1;
  std::vector<PlanRow> plans(nranks);
  plans[rank] = PlanRow{beta, signlionParamHostChunkBytes() >= 64,
                        several && !net.loopback() ? 1 : 0, localNetworkStack()};
  NCCLCHECK(bootstrap.allGather(plans.data(), sizeof(PlanRow)));
  bool allWant = true, oneStack = true;
  for (int r = 0; r < nranks; r++) {
    allWant &= plans[r].wantProbe != 0;
    oneStack &= plans[r].stack == plans[0].stack;
    // A value set on some ranks only, equal to what the others compute,
    // passes checkSettingsAgree; the others would then follow a learned rate.
    const bool betaDiffers = (plans[r].betaSet > 0) != (plans[0].betaSet > 0);
    const bool chunkDiffers = plans[r].chunkSet != plans[0].chunkSet;
    if (betaDiffers || chunkDiffers) {
      const char* var = betaDiffers ? "SIGNLION_COST_BETA_MBPS" : "SIGNLION_HOST_CHUNK_BYTES";
      const bool setR = betaDiffers ? plans[r].betaSet > 0 : plans[r].chunkSet != 0;
      WARN("ncclSignCommInitRank: rank %d %s %s, rank 0 %s: every rank must set it or none (unset, it follows the "
           "link's measured rate) (seen by rank %d)",
           r, setR ? "set" : "did not set", var, setR ? "did not" : "set it", rank);
      return ncclInvalidUsage;
    }
  }
  if (plans[0].betaSet > 0) {
    out->mbits = plans[0].betaSet * 8;
    out->lineRate = true;
    out->how = "from SIGNLION_COST_BETA_MBPS";
    return ncclSuccess;
  }
  if (!allWant || oneStack) {
    out->how = !several  ? "not learned: one node, no network link between ranks"
               : oneStack ? "not learned: every rank in one network stack (one machine and namespace), no link between"
                          : "not learned: a rank's links run over the loopback interface";
    return ncclSuccess;
  }
  std::vector<double> measured;
  size_t bytes = 0;
  int64_t connectUs = 0, totalUs = 0;
  bool connected = false;
  NCCLCHECK(probe(net, bootstrap, topo, timeoutMs, &measured, &bytes, &connectUs, &totalUs, &connected));
  if (!connected) {
    out->how = fmt("not learned: the probe's links between nodes did not come up within %.0f ms",
                   (double)std::max(1, timeoutMs / 2));
    return ncclSuccess;
  }
  out->mbits = agreedLinkMbits(measured.data(), nranks);
  out->lineRate = isStandardLineRate(out->mbits);
  double slowest = 0;
  for (double m : measured)
    if (m > 0 && (slowest == 0 || m < slowest)) slowest = m;
  ncclNetProperties_v11_t props;
  const int reported = net.api().getProperties(net.dev(), &props) == ncclSuccess ? props.speed : 0;
  out->how = fmt("measured: %.0f Mbit/s on the slowest of %.0f nodes' links (%.0f bytes per link in the last "
                 "round, %.1f ms in all",
                 slowest, (double)topo.members(nranks).size(), (double)bytes, (double)totalUs / 1000) +
             fmt(", %.1f of them to connect)", (double)connectUs / 1000) +
             fmt("; the interface reports %.0f Mbit/s", reported);
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
