// A local multi-rank sign all-reduce: N ranks (threads of this process) on a
// host communicator over loopback, each algorithm and the automatic choice,
// next to the fp32 ring sum all-reduce on the same links. Uses the public C
// API only, and checks every rank's result against a plain loop.
//
//   host_allreduce_demo [nranks=4] [count=4194304] [iters=5]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "nccl_sign.h"

namespace {

struct Contender {
  const char* name;
  ncclSignAlgo_t algo;  // ignored by the sum baseline
  bool sum;
};

// The contract, written plainly: x >= 0 votes +1 (zero rule "positive"); the
// result is the sign of the sum of votes, 0 on a tie.
float expectedMajority(const std::vector<std::vector<float>>& in, size_t i) {
  int sum = 0;
  for (const auto& v : in) sum += v[i] < 0 ? -1 : 1;
  return sum > 0 ? 1.0f : sum < 0 ? -1.0f : 0.0f;
}

}  // namespace

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 4;
  size_t count = argc > 2 ? strtoull(argv[2], nullptr, 0) : (4u << 20);
  int iters = argc > 3 ? atoi(argv[3]) : 5;
  if (nranks < 1 || nranks > 64 || iters < 1) {
    fprintf(stderr, "usage: host_allreduce_demo [nranks 1..64] [count] [iters >= 1]\n");
    return 2;
  }
  if (getenv("SIGNLION_SOCKET_IFNAME") == nullptr) setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);

  std::vector<std::vector<float>> in(nranks, std::vector<float>(count));
  std::mt19937 rng(1);
  for (auto& v : in)
    for (float& x : v) x = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<float> want(count);
  for (size_t i = 0; i < count; i++) want[i] = expectedMajority(in, i);

  printf("# signlion host sign all-reduce: %d ranks (threads) over loopback, %zu fp32 elements (%.1f MiB)\n", nranks,
         count, count * 4.0 / (1 << 20));
  printf("# %-18s %10s %10s %14s %10s %s\n", "contender", "time(ms)", "algbw GB/s", "wire bits/elem", "vs fp32", "check");

  const Contender contenders[] = {{"fp32 ring sum", ncclSignAlgoAuto, true},
                                  {"sign auto", ncclSignAlgoAuto, false},
                                  {"sign ring", ncclSignAlgoRing, false},
                                  {"sign halving-dbl", ncclSignAlgoHalvingDoubling, false},
                                  {"sign allgather", ncclSignAlgoAllGather, false}};
  double baselineMs = 0;
  int failures = 0;
  for (const Contender& c : contenders) {
    ncclSignUniqueId id;
    if (ncclSignGetUniqueId(&id) != ncclSuccess) return 1;
    ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
    config.algorithm = c.algo;
    std::vector<double> ms(nranks, 0.0);
    std::vector<uint64_t> wire(nranks, 0);
    std::vector<int> ok(nranks, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; r++) {
      threads.emplace_back([&, r] {
        ncclSignComm_t comm;
        if (ncclSignCommInitRank(&comm, nranks, id, r, &config) != ncclSuccess) return;
        std::vector<float> out(count);
        bool good = true;
        for (int it = 0; it <= iters; it++) {  // iteration 0 warms up
          ncclSignBarrier(comm);
          uint64_t s0, r0, s1, r1;
          ncclSignCommGetWireBytes(comm, &s0, &r0);
          auto t0 = std::chrono::steady_clock::now();
          ncclResult_t res = c.sum ? ncclSignHostSumAllReduce(in[r].data(), out.data(), count, ncclFloat32, comm)
                                   : ncclSignHostAllReduce(in[r].data(), out.data(), count, ncclFloat32,
                                                           ncclSignMajority, comm);
          double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          ncclSignCommGetWireBytes(comm, &s1, &r1);
          good &= res == ncclSuccess;
          if (it > 0) ms[r] += t / iters;
          wire[r] = s1 - s0;
        }
        if (!c.sum) good &= memcmp(out.data(), want.data(), count * 4) == 0;
        ok[r] = good;
        ncclSignCommDestroy(comm);
      });
    }
    for (auto& t : threads) t.join();
    double worst = 0;
    uint64_t maxWire = 0;
    bool allOk = true;
    for (int r = 0; r < nranks; r++) {
      worst = ms[r] > worst ? ms[r] : worst;
      maxWire = wire[r] > maxWire ? wire[r] : maxWire;
      allOk &= ok[r] != 0;
    }
    if (c.sum) baselineMs = worst;
    failures += allOk ? 0 : 1;
    printf("  %-18s %10.2f %10.2f %14.2f %9.2fx %s\n", c.name, worst, count * 4.0 / (worst * 1e6),
           maxWire * 8.0 / count, baselineMs > 0 ? baselineMs / worst : 0.0, allOk ? "OK" : "FAILED");
  }
  printf("# time: slowest rank's mean over %d calls; algbw: fp32 input bytes / time; vs fp32: speed-up over the\n"
         "# fp32 sum all-reduce on the same links. On loopback the CPU, not the link, is the bottleneck: the\n"
         "# Ethernet benchmark (scripts/, docs/PERFORMANCE.md) measures rate-limited links.\n",
         iters);
  printf("# demo %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
