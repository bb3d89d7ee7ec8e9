// A small self-check printout: N voters' random gradients are packed to one
// bit per element, summed in bit-sliced counters and decided, on this CPU's
// kernels, then compared bit for bit with the plain reference.
//
//   vote_selfcheck [nvoters=8] [count=1000003]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bits/bits.h"
#include "bits/float16.h"
#include "bits/local_vote.h"
#include "bits/vote_reference.h"

namespace sb = signlion::bits;

int main(int argc, char** argv) {
  int nvoters = argc > 1 ? atoi(argv[1]) : 8;
  size_t count = argc > 2 ? strtoull(argv[2], nullptr, 0) : 1000003;
  if (nvoters < 1 || nvoters > 4096) {
    fprintf(stderr, "vote_selfcheck: nvoters must be in 1..4096, got %d\n", nvoters);
    return 2;
  }
  const sb::Kernels& k = sb::kernels();
  printf("# signlion %d.%d.%d, vote kernels: %s\n", NCCL_SIGN_MAJOR, NCCL_SIGN_MINOR, NCCL_SIGN_PATCH, k.name);
  printf("# self-check: %d voters, %zu elements: pack -> bit-sliced add -> decide, vs the plain reference\n", nvoters,
         count);
  printf("# %-9s %-9s %-9s %12s %12s %10s %s\n", "type", "op", "zero", "bits/elem", "fp32 bits", "time(ms)", "result");

  std::mt19937 rng(42);
  int failures = 0;
  const ncclDataType_t types[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
  const char* zeroNames[] = {"positive", "negative", "abstain"};
  for (ncclDataType_t dt : types) {
    size_t es = sb::typeSize(dt);
    std::vector<std::vector<uint8_t>> in(nvoters, std::vector<uint8_t>(count * es));
    for (auto& buf : in) {
      for (size_t i = 0; i < count; i++) {
        float v = (rng() % 11 == 0) ? 0.0f : (float)((int)(rng() % 2001) - 1000) / 100.0f;
        if (dt == ncclInt8) {
          buf[i] = (uint8_t)(int8_t)(v > 0 ? 1 : v < 0 ? -1 : 0);
        } else {
          sb::storeFloatAs(v, dt, buf.data(), i);
        }
      }
    }
    std::vector<const void*> ptrs;
    for (auto& b : in) ptrs.push_back(b.data());
    for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
      if (op == ncclSignAverage && dt == ncclInt8) continue;
      for (ncclSignZeroRule_t zero : {ncclSignZeroPositive, ncclSignZeroAbstain}) {
        size_t nw = sb::numWords(count);
        int planes = sb::votePlanes(zero);
        std::vector<uint64_t> packed((size_t)nvoters * planes * nw);
        std::vector<const uint64_t*> votes;
        std::vector<uint64_t> scratch(sb::localVoteScratchWords(nvoters, count, zero));
        std::vector<uint8_t> got(count * es), want(count * es);
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < nvoters; r++) {
          uint64_t* v = packed.data() + (size_t)r * planes * nw;
          k.pack(in[r].data(), dt, count, zero, v, nw);
          votes.push_back(v);
        }
        sb::voteLocally(k, votes.data(), nvoters, count, dt, op, zero, ncclSignTieZero, scratch.data(), got.data());
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        sb::referenceSignAllReduce(ptrs, count, dt, op, zero, ncclSignTieZero, want.data());
        bool ok = memcmp(got.data(), want.data(), got.size()) == 0;
        failures += ok ? 0 : 1;
        printf("  %-9s %-9s %-9s %12d %12d %10.2f %s\n", sb::typeName(dt), op == ncclSignMajority ? "majority" : "average",
               zeroNames[zero], planes, 32, ms, ok ? "OK" : "MISMATCH");
      }
    }
  }
  printf("# bits/elem: what one voter's vote costs on the wire before any reduction (fp32: 32)\n");
  printf("# self-check %s (%d mismatching cases)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
