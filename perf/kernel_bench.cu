// Throughput of the CUDA kernels (kernels/sign_kernels.h) on large buffers:
// pack (fp32, bf16; binary and ternary), add, sumVotes, decide, unpack,
// encodeTrits / decodeTrits (the result's wire coding),
// average, the fused last step and the field-sum conversions, as GB/s of the
// bytes each one touches (reads + writes) and as the ratio to a
// device-to-device cudaMemcpyAsync that touches as many bytes (it copies
// half of them), timed in the same run. Issue 6's target is 0.80 of the copy.
// Every figure is the median of --reps launches timed with CUDA events,
// after --warmup untimed ones; counters are for N = 8 ranks.
//
// Kernels with variants (kernels/variants.h) get a row per variant, named
// "kernel ... [variant]", and after the table a summary per kernel: each
// variant's mean and lowest ratio over that kernel's rows, the best (highest
// mean), and one machine-readable line
//   WINNER <kernel> <number> <name> mean=<ratio> min=<ratio> default=<number> default_mean=<ratio>
// (scripts/kernel_winners.py reads them; docs/dev/GPU.md: making the winners
// the defaults).
//
//   kernel_bench [--elems=N] [--reps=R] [--warmup=W]   (N default 256M; K/M/G suffixes)
//
// Exit status: 0 measured; 77 no CUDA device answered (the reason is
// printed; nothing is measured); 1 a CUDA call failed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "bits/fields.h"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace sk = signlion::kernels;
namespace sb = signlion::bits;

namespace {

constexpr int kNoDevice = 77;

#define BENCHCHECK(call)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "kernel_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                 \
              cudaGetErrorString(err_));                                                           \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

// Reproducible random bits, made on the device (a 1 GiB input in a few ms).
__global__ void fillRandom(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 0x9e3779b9u ^ (uint32_t)(i >> 32) ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = x;
  }
}

void fill(void* p, size_t bytes, uint32_t seed) {
  fillRandom<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed);
  BENCHCHECK(cudaGetLastError());
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return (size_t)v;
}

class Bench {
 public:
  Bench(int reps, int warmup) : reps_(reps), warmup_(warmup) {
    BENCHCHECK(cudaStreamCreate(&stream_));
    BENCHCHECK(cudaEventCreate(&start_));
    BENCHCHECK(cudaEventCreate(&stop_));
  }

  // Median microseconds of run() (each call one launch, or one copy).
  double time(const std::function<cudaError_t()>& run) {
    for (int i = 0; i < warmup_; i++) BENCHCHECK(run());
    std::vector<float> ms(reps_);
    for (int i = 0; i < reps_; i++) {
      BENCHCHECK(cudaEventRecord(start_, stream_));
      BENCHCHECK(run());
      BENCHCHECK(cudaEventRecord(stop_, stream_));
      BENCHCHECK(cudaEventSynchronize(stop_));
      BENCHCHECK(cudaEventElapsedTime(&ms[i], start_, stop_));
    }
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[reps_ / 2];
  }

  // The kernel, then a device-to-device copy that touches the same bytes;
  // returns the ratio (copy time / kernel time).
  double add(const std::string& name, double bytes, const std::function<cudaError_t()>& run, void* copyDst,
             const void* copySrc) {
    const double us = time(run);
    const size_t half = (size_t)(bytes / 2);
    const double copyUs =
        time([&] { return cudaMemcpyAsync(copyDst, copySrc, half, cudaMemcpyDeviceToDevice, stream_); });
    printf("  %-52s %10.1f %10.1f %9.1f %9.1f %7.2f\n", name.c_str(), bytes / 1e6, us, bytes / us / 1e3,
           bytes / copyUs / 1e3, copyUs / us);
    fflush(stdout);
    return copyUs / us;
  }

  // add() once per variant of k, each row named "name [variant]"; the
  // ratios are kept for summary(). Leaves k at its default.
  void variants(sk::Tuned k, const std::string& name, double bytes, const std::function<cudaError_t()>& run,
                void* copyDst, const void* copySrc) {
    std::vector<std::vector<double>>& mine = ratios_[(int)k];
    mine.resize(sk::variantCount(k));
    for (int v = 0; v < sk::variantCount(k); v++) {
      BENCHCHECK(sk::selectVariant(k, v));
      mine[v].push_back(add(name + " [" + sk::variantName(k, v) + "]", bytes, run, copyDst, copySrc));
    }
    BENCHCHECK(sk::selectVariant(k, sk::defaultVariant(k)));
  }

  // Per kernel with variants: each variant's mean and lowest ratio over its
  // rows, and the WINNER line (highest mean ratio).
  void summary() const {
    printf("# variants: mean and lowest ratio over each kernel's rows; best = highest mean\n");
    printf("# %-16s %-20s %5s %7s %7s\n", "kernel", "variant", "rows", "mean", "min");
    for (const auto& [kind, perVariant] : ratios_) {
      const sk::Tuned k = (sk::Tuned)kind;
      int best = 0;
      double bestMean = -1, bestMin = 0, defaultMean = 0;
      for (size_t v = 0; v < perVariant.size(); v++) {
        const std::vector<double>& r = perVariant[v];
        double sum = 0, low = r.empty() ? 0 : r[0];
        for (double x : r) sum += x, low = std::min(low, x);
        const double mean = r.empty() ? 0 : sum / r.size();
        printf("  %-16s %-20s %5zu %7.2f %7.2f%s\n", sk::tunedName(k), sk::variantName(k, (int)v), r.size(), mean, low,
               (int)v == sk::defaultVariant(k) ? "  (default)" : "");
        if (mean > bestMean) best = (int)v, bestMean = mean, bestMin = low;
        if ((int)v == sk::defaultVariant(k)) defaultMean = mean;
      }
      printf("WINNER %s %d %s mean=%.3f min=%.3f default=%d default_mean=%.3f\n", sk::tunedName(k), best,
             sk::variantName(k, best), bestMean, bestMin, sk::defaultVariant(k), defaultMean);
    }
    fflush(stdout);
  }

  cudaStream_t stream() const { return stream_; }

 private:
  int reps_, warmup_;
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
  std::map<int, std::vector<std::vector<double>>> ratios_;  // [kernel][variant]: one ratio per row
};

}  // namespace

int main(int argc, char** argv) {
  size_t elems = 256ull << 20;
  int reps = 20, warmup = 3;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--elems=", 8) == 0) {
      elems = parseSize(argv[i] + 8);
    } else if (strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, atoi(argv[i] + 7));
    } else if (strncmp(argv[i], "--warmup=", 9) == 0) {
      warmup = std::max(0, atoi(argv[i] + 9));
    } else {
      fprintf(stderr, "usage: %s [--elems=N] [--reps=R] [--warmup=W]\n", argv[0]);
      return 2;
    }
  }
  int ndev = 0;
  cudaError_t err = cudaGetDeviceCount(&ndev);
  if (err != cudaSuccess || ndev == 0) {
    printf("# kernel_bench: no CUDA device (%s); nothing measured\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none");
    return kNoDevice;
  }
  cudaDeviceProp prop;
  BENCHCHECK(cudaGetDeviceProperties(&prop, 0));

  const int n = 8, w = sb::widthFor(n), wHalf = sb::widthFor(n / 2);  // 8 ranks: counters of 4 planes, halves of 3
  const size_t nw = sb::numWords(elems), planeBytes = nw * 8;
  const int fieldBits = 4;  // widthFor(8)
  const size_t fieldWords = sb::fieldWordsFor(elems, fieldBits);
  // Buffers: elements in and out (fp32-sized), 16 planes, field words (2
  // planes), and the copy's two halves (the largest case touches ~elems *
  // 4.5 bytes: half of that each).
  void *in, *out, *planes, *fields, *copyA, *copyB;
  const size_t copyBytes = elems * 4 / 2 + 16 * planeBytes;
  BENCHCHECK(cudaMalloc(&in, elems * 4));
  BENCHCHECK(cudaMalloc(&out, elems * 4));
  BENCHCHECK(cudaMalloc(&planes, 16 * planeBytes));
  BENCHCHECK(cudaMalloc(&fields, 2 * fieldWords * 8));
  BENCHCHECK(cudaMalloc(&copyA, copyBytes));
  BENCHCHECK(cudaMalloc(&copyB, copyBytes));
  fill(in, elems * 4, 1);
  fill(planes, 16 * planeBytes, 2);
  fill(fields, 2 * fieldWords * 8, 3);
  fill(copyA, copyBytes, 4);
  BENCHCHECK(cudaDeviceSynchronize());

  uint64_t* P = static_cast<uint64_t*>(planes);
  auto plane = [&](int i) { return P + (size_t)i * nw; };  // plane i of the 16
  Bench b(reps, warmup);
  cudaStream_t s = b.stream();

  printf("# kernel_bench: %zu elements, %s (%d SMs), median of %d after %d warm-up, counters for N = %d\n", elems,
         prop.name, prop.multiProcessorCount, reps, warmup, n);
  printf("# GB/s of the bytes each kernel reads and writes; copy = cudaMemcpyAsync D2D touching as many bytes;\n");
  printf("# ratio = kernel GB/s / copy GB/s (the streaming kernels aim at 0.85 or more)\n");
  printf("# %-52s %10s %10s %9s %9s %7s\n", "kernel", "MB", "us", "GB/s", "copy GB/s", "ratio");

  // P (w planes) at 0.., M at 8..; halves of the fused step at 0.. and 4..
  const sb::Counts binary{plane(0), w, nw}, ternary{plane(0), w, nw, plane(8), w, nw};
  const sb::Counts accB{plane(0), wHalf, nw}, inB{plane(4), wHalf, nw};
  const sb::Counts accT{plane(0), wHalf, nw, plane(8), wHalf, nw}, inT{plane(4), wHalf, nw, plane(12), wHalf, nw};
  const double e = (double)elems, pb = (double)planeBytes;

  for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
    const double es = (double)sb::typeSize(dt);
    const char* t = dt == ncclFloat32 ? "fp32" : "bf16";
    b.add(std::string("pack ") + t + " binary", e * es + pb,
          [&] { return sk::pack(in, dt, elems, ncclSignZeroPositive, plane(0), nw, s); }, copyA, copyB);
    b.add(std::string("pack ") + t + " ternary", e * es + 2 * pb,
          [&] { return sk::pack(in, dt, elems, ncclSignZeroAbstain, plane(0), nw, s); }, copyA, copyB);
  }
  b.add("add 3+3 -> 4 planes", (2 * wHalf + w) * pb,
        [&] { return sk::add(plane(0), wHalf, nw, plane(4), wHalf, nw, plane(8), w, nw, nw, s); }, copyA, copyB);
  b.variants(sk::Tuned::kSumVotes, "sumVotes 8 slots -> 4 planes", (n + w) * pb,
        [&] { return sk::sumVotes(plane(0), n, nw, plane(8), w, nw, nw, s); }, copyA, copyB);
  b.add("decide binary (tie zero)", (w + 2) * pb,
        [&] { return sk::decideBits(binary, n, ncclSignTieZero, plane(14), nw, nw, s); }, copyA, copyB);
  b.add("decide ternary (tie zero)", (2 * w + 2) * pb,
        [&] { return sk::decideBits(ternary, n, ncclSignTieZero, plane(14), nw, nw, s); }, copyA, copyB);
  for (ncclDataType_t dt : {ncclFloat32, ncclBfloat16}) {
    const double es = (double)sb::typeSize(dt);
    const std::string t = dt == ncclFloat32 ? "fp32" : "bf16";
    b.variants(sk::Tuned::kUnpack, "unpack " + t + " 1 plane", pb + e * es,
          [&] { return sk::unpack(plane(0), 1, nw, elems, dt, out, s); }, copyA, copyB);
    b.variants(sk::Tuned::kUnpack, "unpack " + t + " 2 planes", 2 * pb + e * es,
          [&] { return sk::unpack(plane(0), 2, nw, elems, dt, out, s); }, copyA, copyB);
    b.variants(sk::Tuned::kAverage, "average " + t + " binary", w * pb + e * es,
          [&] { return sk::average(binary, n, elems, dt, out, s); }, copyA, copyB);
    b.variants(sk::Tuned::kFusedMajority, "fused majority " + t + " binary", 2 * wHalf * pb + e * es, [&] {
      return sk::addDecideUnpack(accB, inB, w, n, ncclSignMajority, ncclSignZeroPositive, ncclSignTieZero, nullptr, 0,
                                 elems, dt, out, s);
    }, copyA, copyB);
    b.variants(sk::Tuned::kFusedMajority, "fused majority " + t + " ternary", 4 * wHalf * pb + e * es, [&] {
      return sk::addDecideUnpack(accT, inT, w, n, ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero, nullptr, 0,
                                 elems, dt, out, s);
    }, copyA, copyB);
    b.variants(sk::Tuned::kFusedAverage, "fused average " + t + " binary", 2 * wHalf * pb + e * es, [&] {
      return sk::addDecideUnpack(accB, inB, w, n, ncclSignAverage, ncclSignZeroPositive, ncclSignTieZero, nullptr, 0,
                                 elems, dt, out, s);
    }, copyA, copyB);
  }
  // The result's wire coding (bits/trits.h): 2 planes <-> 5 elements per
  // byte. Encode first: decode reads what it wrote (every byte valid).
  uint32_t* malformed = nullptr;
  BENCHCHECK(cudaMalloc(&malformed, sizeof(uint32_t)));
  BENCHCHECK(cudaMemset(malformed, 0, sizeof(uint32_t)));
  const double coded = (double)sb::tritBytes(nw);
  b.variants(sk::Tuned::kEncodeTrits, "encodeTrits 2 planes -> 1.6 bits", 2 * pb + coded, [&] {
    return sk::encodeTrits(plane(0), plane(1), nw, static_cast<uint8_t*>(out), s);
  }, copyA, copyB);
  b.variants(sk::Tuned::kDecodeTrits, "decodeTrits 1.6 bits -> 2 planes", coded + 2 * pb, [&] {
    return sk::decodeTrits(static_cast<const uint8_t*>(out), nw, plane(14), plane(15), malformed, 1, s);
  }, copyA, copyB);
  b.variants(sk::Tuned::kPackFields, "packFields fp32 4-bit binary", e * 4 + fieldWords * 8.0, [&] {
    return sk::packFields(in, ncclFloat32, elems, ncclSignZeroPositive, fieldBits, static_cast<uint64_t*>(fields),
                          fieldWords, s);
  }, copyA, copyB);
  b.variants(sk::Tuned::kFieldsToPlanes, "fieldsToPlanes 4-bit -> 4 planes", fieldWords * 8.0 + w * pb, [&] {
    return sk::fieldsToPlanes(static_cast<const uint64_t*>(fields), fieldBits, 0, elems, plane(0), w, nw, s);
  }, copyA, copyB);
  // N = 4..7 sum 3-bit fields: 21 per word, not a divisor of 64.
  const size_t fieldWords3 = sb::fieldWordsFor(elems, 3);
  b.variants(sk::Tuned::kFieldsToPlanes, "fieldsToPlanes 3-bit -> 3 planes", fieldWords3 * 8.0 + 3 * pb, [&] {
    return sk::fieldsToPlanes(static_cast<const uint64_t*>(fields), 3, 0, elems, plane(0), 3, nw, s);
  }, copyA, copyB);

  b.summary();
  BENCHCHECK(cudaDeviceSynchronize());
  for (void* p : {in, out, planes, fields, copyA, copyB, static_cast<void*>(malformed)}) cudaFree(p);
  return 0;
}
