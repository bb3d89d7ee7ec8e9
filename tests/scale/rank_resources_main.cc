// signlion_rank_resources: the host communicator with N rank processes on
// loopback, what each rank holds once its links are up, and whether every
// rank's results are the reference's.
//
// The parent forks N children before it starts any thread, makes one unique
// id per algorithm (each starts a root rendezvous in the parent) and hands
// them to the children through pipes, as a launcher would. Each child, for
// each algorithm in turn: ncclSignCommInitRank with that algorithm forced
// (config.algorithm; "auto" lets the cost model choose), timed; sign
// all-reduce calls over several counts, fp32 and bf16, majority and average,
// in and out of place, each compared byte for byte with the reference
// (src/bits/vote_reference.h) of every rank's input; then, with the comm
// still up, its sockets (entries of /proc/self/fd that are sockets), threads
// (/proc/self/status) and private resident memory (/proc/self/smaps_rollup:
// not the inputs shared with the parent); then ncclSignCommDestroy, after
// which the sockets must be back to what they were.
//
// What the schedule needs is computed here from the schedules themselves
// (src/algo, not the communicator's link code): the distinct peers of the
// algorithm's schedule (every algorithm's for auto) and the ring neighbours
// of the sum all-reduce. --check-bounds fails a rank whose sockets or threads
// exceed what those peers need over the socket transport: per peer one send
// and one recv comm, each a control stream plus its data streams (SIGNLION_NSOCKS)
// and SIGNLION_NTHREADS helper threads, plus the bootstrap's two ring sockets.
//
// Ranks carry host ids "node<r / G>" (--node-ranks G, default 8; 0: none,
// every rank on this host's one node), so the hierarchical algorithm has
// nodes to group by.
//
// The direct algorithm talks to every rank, so it runs on at most
// algo::kMaxDirectRanks ranks (algo/direct.h). Forced on more, the
// communicator makes no links for it (its peers are the ring neighbours of
// the sum all-reduce) and refuses its calls with ncclInvalidArgument: there a
// rank passes when its first call is refused so ("refused" in the table).
//
// Usage: signlion_rank_resources --nranks N [--algos ring,hd,allgather,fieldsum,hier,direct,tree,auto]
//        [--node-ranks G] [--check-bounds] [--markdown]
// Exit status: 0 all ranks correct (and within bounds), 1 otherwise, 2 usage.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "algo/direct.h"
#include "algo/schedule.h"
#include "algo/topology.h"
#include "bits/bits.h"
#include "common/config.h"
#include "common/vote_inputs.h"
#include "nccl_sign.h"
#include "scale/schedule_sim.h"

namespace {

using signlion::test::Bytes;

constexpr int kTimeoutMs = 120000;

struct Options {
  int nranks = 0;
  std::vector<ncclSignAlgo_t> algos;
  int nodeRanks = 8;
  bool checkBounds = false;
  bool markdown = false;
};

// One rank's record for one algorithm, sent to the parent through a pipe.
struct Record {
  int rank;
  int algo;
  int ok;     // init and every call succeeded
  int wrong;  // calls whose output differed from the reference
  int calls;
  double initMs;
  int sockets;  // with the comm up
  int threads;
  long rssKb;        // private memory of the rank process (smaps_rollup), comm up
  int socketsAfter;  // after destroy
  int peers;         // what the schedules need
  int socketBound, threadBound;
  int chosen;  // auto: the algorithm the model picked for the largest count (-1 unknown)
  int refused;  // the algorithm cannot run on N ranks: its call was refused with ncclInvalidArgument
};

// Forced, the direct algorithm's calls are refused past its rank limit.
bool refusedOn(ncclSignAlgo_t algo, int nranks) {
  return algo == ncclSignAlgoDirect && !signlion::algo::directAllowed(nranks);
}

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int countSockets() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char path[300], link[64];
      snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
      ssize_t k = readlink(path, link, sizeof link - 1);
      if (k > 0) {
        link[k] = 0;
        if (strncmp(link, "socket:", 7) == 0) n++;
      }
    }
    closedir(d);
  }
  return n;
}

long statusField(const char* name) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long v = -1;
  const size_t len = strlen(name);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, name, len) == 0 && line[len] == ':') v = atol(line + len + 1);
  fclose(f);
  return v;
}

// Memory only this process maps (kB): what it allocated itself, not the
// inputs it shares with the parent that made them before forking.
long privateKb() {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long v = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "Private_Clean:", 14) == 0 || strncmp(line, "Private_Dirty:", 14) == 0)
      v += atol(strchr(line, ':') + 1);
  fclose(f);
  return v;
}

long envInt(const char* name, long dflt) {
  const char* v = getenv(name);
  return v && *v ? atol(v) : dflt;
}

signlion::algo::Topology topologyOf(int nranks, int nodeRanks) {
  signlion::algo::Topology t;
  if (nodeRanks <= 0) return t;
  for (int r = 0; r < nranks; r++) t.node.push_back(r / nodeRanks);
  return t;
}

// How many ranks `rank`'s schedules talk to: those of `algo` (of every
// algorithm auto may pick, for auto) and the ring's, whose neighbours the sum
// all-reduce uses.
int schedulePeerCount(ncclSignAlgo_t algo, int nranks, int rank, const signlion::algo::Topology& topo) {
  // Auto has the hierarchical algorithm only over several nodes; forced, it
  // runs over one node too.
  const bool severalNodes = topo.known() && topo.node.back() > 0;
  std::vector<ncclSignAlgo_t> used{ncclSignAlgoRing};
  if (!refusedOn(algo, nranks)) used.push_back(algo);
  if (algo == ncclSignAlgoAuto) {
    used = {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather, ncclSignAlgoFieldSum,
            ncclSignAlgoTree};
    if (severalNodes) used.push_back(ncclSignAlgoHierarchical);
    if (signlion::algo::directAllowed(nranks)) used.push_back(ncclSignAlgoDirect);
  }
  std::set<int> peers;
  for (ncclSignAlgo_t a : used) {
    signlion::algo::Schedule s;
    const bool built = signlion::algo::buildSchedule(a, nranks, rank, 4 * (int64_t)nranks, signlion::algo::OpSpec{}, &s,
                                                     topo.known() ? &topo : nullptr) == ncclSuccess;
    if (built) signlion::test::addSchedulePeers(s, &peers);
  }
  return (int)peers.size();
}

bool readAll(int fd, void* p, size_t n) {
  size_t got = 0;
  for (int64_t end = nowUs() + (int64_t)kTimeoutMs * 1000; got < n && nowUs() < end;) {
    pollfd q{fd, POLLIN, 0};
    if (poll(&q, 1, 100) != 1) continue;
    ssize_t k = read(fd, (char*)p + got, n - got);
    if (k <= 0) return false;
    got += (size_t)k;
  }
  return got == n;
}

bool writeAll(int fd, const void* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = write(fd, (const char*)p + done, n - done);
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

// The calls each comm runs: counts around a block and a shard, both dtypes,
// both ops, in place and out of place. Made with their references by the
// parent before it forks, so each child only compares.
struct Call {
  size_t count;
  ncclDataType_t dt;
  ncclSignOp_t op;
  bool inPlace;
  std::vector<Bytes> in;
  Bytes want;
};

std::vector<Call> makeCalls(int nranks) {
  const size_t counts[] = {0, 1, 1000, (size_t)64 * nranks + 5, (size_t)64 * 1024 * 3 + 17};
  std::vector<Call> calls;
  int i = 0;
  for (size_t count : counts)
    for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
      Call c{count, dt, i % 2 ? ncclSignAverage : ncclSignMajority, i % 3 == 1, {}, {}};
      c.in = signlion::test::randomVoteInputs(nranks, count, dt, 977u * (uint32_t)i + (uint32_t)count);
      c.want = signlion::test::referenceOutput(c.in, count, dt, c.op, ncclSignZeroPositive, ncclSignTieZero);
      calls.push_back(std::move(c));
      i++;
    }
  return calls;
}

int runCalls(ncclSignComm_t comm, int rank, const std::vector<Call>& calls, int* wrong) {
  int n = 0;
  for (const Call& c : calls) {
    Bytes out(c.want.size() + 1, 0xA5);
    if (c.inPlace) out.assign(c.in[(size_t)rank].begin(), c.in[(size_t)rank].end());
    const void* send = c.inPlace ? out.data() : c.in[(size_t)rank].data();
    if (ncclSignHostAllReduce(send, out.data(), c.count, c.dt, c.op, comm) != ncclSuccess) return -1;
    out.resize(c.want.size());
    n++;
    if (signlion::test::firstMismatch(out, c.want) != std::string::npos) (*wrong)++;
  }
  return n;
}

int childMain(const Options& o, const std::vector<Call>& calls, int rank, int idFd, int outFd) {
  std::vector<ncclSignUniqueId> ids(o.algos.size());
  if (!readAll(idFd, ids.data(), ids.size() * sizeof(ncclSignUniqueId))) return 10;
  const signlion::algo::Topology topo = topologyOf(o.nranks, o.nodeRanks);
  // Unset or 0, the transport picks from the link: loopback has no sysfs
  // speed and counts as a fast link, four streams (socketDeviceStreams).
  const long nsocksSet = envInt("SIGNLION_NSOCKS", 0);
  const long nsocks = nsocksSet == 0 ? 4 : std::max(1L, std::min(64L, nsocksSet));
  const long nthreads = std::max(1L, std::min(nsocks, envInt("SIGNLION_NTHREADS", 2)));
  const std::string hostId = "node" + std::to_string(o.nodeRanks > 0 ? rank / o.nodeRanks : 0);
  for (size_t k = 0; k < o.algos.size(); k++) {
    Record rec{};
    rec.rank = rank;
    rec.algo = o.algos[k];
    rec.chosen = -1;
    const int socketsBefore = countSockets();
    const long threadsBefore = statusField("Threads");
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.algorithm = o.algos[k];
    config.timeoutMs = kTimeoutMs;
    if (o.nodeRanks > 0) config.hostId = hostId.c_str();
    ncclSignComm_t comm = nullptr;
    const int64_t t0 = nowUs();
    ncclResult_t res = ncclSignCommInitRank(&comm, o.nranks, ids[k], rank, &config);
    rec.initMs = (double)(nowUs() - t0) / 1000.0;
    if (res == ncclSuccess && refusedOn(o.algos[k], o.nranks)) {
      const Call& c = calls.back();
      Bytes out(c.want.size());
      rec.refused = ncclSignHostAllReduce(c.in[(size_t)rank].data(), out.data(), c.count, c.dt, c.op, comm) ==
                    ncclInvalidArgument;
      rec.ok = rec.refused;
      rec.sockets = countSockets() - socketsBefore;
      rec.threads = (int)(statusField("Threads") - threadsBefore);
      rec.rssKb = privateKb();
      ncclSignCommDestroy(comm);
    } else if (res == ncclSuccess) {
      rec.calls = runCalls(comm, rank, calls, &rec.wrong);
      rec.ok = rec.calls > 0;
      rec.sockets = countSockets() - socketsBefore;
      rec.threads = (int)(statusField("Threads") - threadsBefore);
      rec.rssKb = privateKb();
      ncclSignCommDestroy(comm);
    }
    rec.socketsAfter = countSockets() - socketsBefore;
    rec.peers = schedulePeerCount(o.algos[k], o.nranks, rank, topo);
    rec.socketBound = (int)(rec.peers * 2 * (1 + nsocks) + 2);
    rec.threadBound = (int)(rec.peers * 2 * nthreads);
    if (!writeAll(outFd, &rec, sizeof rec)) return 11;
  }
  return 0;
}

bool parseAlgos(const char* list, std::vector<ncclSignAlgo_t>* out) {
  std::string s(list);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string name = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    ncclSignAlgo_t a;
    if (!signlion::parseAlgoName(name.c_str(), &a)) return false;
    out->push_back(a);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return !out->empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nranks") && i + 1 < argc) {
      o.nranks = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--algos") && i + 1 < argc) {
      if (!parseAlgos(argv[++i], &o.algos)) {
        fprintf(stderr, "--algos %s: a list of auto, ring, hd, allgather, fieldsum, hier, direct, tree\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--node-ranks") && i + 1 < argc) {
      o.nodeRanks = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--check-bounds")) {
      o.checkBounds = true;
    } else if (!strcmp(argv[i], "--markdown")) {
      o.markdown = true;
    } else {
      fprintf(stderr,
              "usage: %s --nranks N [--algos ring,hd,allgather,fieldsum,hier,direct,tree,auto] [--node-ranks G] "
              "[--check-bounds] [--markdown]\n",
              argv[0]);
      return 2;
    }
  }
  if (o.nranks < 1 || o.nranks > 256 || o.nodeRanks < 0) {
    fprintf(stderr, "--nranks must be in [1, 256] and --node-ranks at least 0\n");
    return 2;
  }
  if (o.algos.empty())
    o.algos = {ncclSignAlgoAuto,     ncclSignAlgoRing,         ncclSignAlgoHalvingDoubling, ncclSignAlgoAllGather,
               ncclSignAlgoFieldSum, ncclSignAlgoHierarchical, ncclSignAlgoDirect,  ncclSignAlgoTree};
  // Loopback only: the ranks and the root listen there.
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 0);

  const std::vector<Call> calls = makeCalls(o.nranks);
  std::vector<int> idW(o.nranks), outR(o.nranks);
  std::vector<pid_t> pids(o.nranks, -1);
  for (int r = 0; r < o.nranks; r++) {
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) {
      perror("pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(a[1]);
      close(b[0]);
      for (int q = 0; q < r; q++) {
        close(idW[q]);
        close(outR[q]);
      }
      _exit(childMain(o, calls, r, a[0], b[1]));
    }
    close(a[0]);
    close(b[1]);
    idW[r] = a[1];
    outR[r] = b[0];
    pids[r] = pid;
  }
  // Each id's root rendezvous waits for its ranks as long as its timeout
  // (SIGNLION_TIMEOUT_MS): the ranks reach the last algorithm's root only
  // after running all the others.
  setenv("SIGNLION_TIMEOUT_MS", std::to_string((int64_t)kTimeoutMs * (int64_t)(o.algos.size() + 1)).c_str(), 1);
  std::vector<ncclSignUniqueId> ids(o.algos.size());
  bool failed = false;
  for (auto& id : ids)
    if (ncclSignGetUniqueId(&id) != ncclSuccess) failed = true;
  for (int r = 0; r < o.nranks && !failed; r++)
    if (!writeAll(idW[r], ids.data(), ids.size() * sizeof(ncclSignUniqueId))) failed = true;

  // Per algorithm: the largest figure over ranks.
  std::vector<Record> worst(o.algos.size());
  std::vector<int> wrong(o.algos.size(), 0), bad(o.algos.size(), 0);
  for (int r = 0; r < o.nranks; r++)
    for (size_t k = 0; k < o.algos.size(); k++) {
      Record rec;
      if (failed || !readAll(outR[r], &rec, sizeof rec)) {
        failed = true;
        break;
      }
      Record& w = worst[k];
      w.initMs = std::max(w.initMs, rec.initMs);
      w.sockets = std::max(w.sockets, rec.sockets);
      w.threads = std::max(w.threads, rec.threads);
      w.rssKb = std::max(w.rssKb, rec.rssKb);
      w.socketsAfter = std::max(w.socketsAfter, rec.socketsAfter);
      w.peers = std::max(w.peers, rec.peers);
      w.calls = std::max(w.calls, rec.calls);
      w.refused = std::max(w.refused, rec.refused);
      wrong[k] += rec.wrong;
      const bool over = o.checkBounds && (rec.sockets > rec.socketBound || rec.threads > rec.threadBound);
      if (!rec.ok || rec.wrong || rec.socketsAfter != 0 || over) {
        bad[k]++;
        fprintf(stderr,
                "rank %d, %s: ok %d, %d of %d calls wrong, sockets %d (bound %d, %d after destroy), threads %d "
                "(bound %d), schedule peers %d\n",
                rec.rank, signlion::algoName((ncclSignAlgo_t)rec.algo), rec.ok, rec.wrong, rec.calls, rec.sockets,
                rec.socketBound, rec.socketsAfter, rec.threads, rec.threadBound, rec.peers);
      }
    }
  int exitBad = 0;
  for (int r = 0; r < o.nranks; r++) {
    if (failed) kill(pids[r], SIGKILL);
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) exitBad++;
  }
  if (failed || exitBad) {
    fprintf(stderr, "signlion_rank_resources: %d rank process(es) failed\n", exitBad);
    return 1;
  }
  if (!o.markdown)
    printf("# N=%d, host ids node<r/%d>; per algorithm the largest figure over ranks\n", o.nranks, o.nodeRanks);
  int total = 0;
  for (size_t k = 0; k < o.algos.size(); k++) {
    const Record& w = worst[k];
    printf("| %d | %s | %d | %d | %d | %.1f | %.0f | %d/%d | %s |\n", o.nranks, signlion::algoName(o.algos[k]), w.peers,
           w.sockets, w.threads, w.rssKb / 1024.0, w.initMs, wrong[k], w.calls * o.nranks,
           bad[k] ? "FAIL" : w.refused ? "refused" : "ok");
    total += bad[k];
  }
  return total ? 1 : 0;
}
