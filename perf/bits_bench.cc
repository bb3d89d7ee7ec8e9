// Micro-benchmarks of the CPU vote algebra on one core: pack, add, decide and
// average over 64M elements, as GB/s, next to a plain streaming read (and
// write) of the same bytes measured in the same run. A summary table at the
// end prints each kernel's ratio to its baseline.
//
//   bits_bench [--elems=N] [google benchmark flags, e.g. --benchmark_min_time=0.2
//               --benchmark_repetitions=5: the summary then uses the medians]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "bits/float16.h"

namespace sb = signlion::bits;

namespace {

size_t gElems = 64ull << 20;

struct AlignedBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit AlignedBuffer(size_t n) : bytes(n) {
    if (posix_memalign(&p, 64, n ? n : 64) != 0) abort();
    memset(p, 0, n);  // fault the pages in before timing
  }
  ~AlignedBuffer() { free(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Inputs made once: random signs with some zeros.
struct Inputs {
  AlignedBuffer f32, b16, counter, votes, out;
  size_t nw;
  Inputs()
      : f32(gElems * 4),
        b16(gElems * 2),
        counter(sb::numWords(gElems) * 8 * 8),
        votes(sb::numWords(gElems) * 8 * 2),
        out(gElems * 4),
        nw(sb::numWords(gElems)) {
    std::mt19937 rng(1);
    float* f = f32.as<float>();
    uint16_t* h = b16.as<uint16_t>();
    for (size_t i = 0; i < gElems; i++) {
      uint32_t r = rng();
      f[i] = (r % 17 == 0) ? 0.0f : ((r & 1) ? 1.0f : -1.0f) * (float)(r >> 8) * 1e-6f;
      h[i] = sb::floatToBf16(f[i]);
    }
    uint64_t* c = counter.as<uint64_t>();
    for (size_t i = 0; i < 8 * nw; i++) c[i] = ((uint64_t)rng() << 32) | rng();
    uint64_t* v = votes.as<uint64_t>();
    for (size_t i = 0; i < 2 * nw; i++) v[i] = ((uint64_t)rng() << 32) | rng();
  }
};

Inputs& inputs() {
  static Inputs in;
  return in;
}

const sb::Kernels& kernelsFor(int64_t isa) {
  if (isa == 1 && sb::avx2Kernels()) return *sb::avx2Kernels();
  return sb::portableKernels();
}

// Baselines a kernel is compared with: a streaming read or write of the
// same number of bytes, of fp32 or bf16 arrays.
enum Baseline { kReadF32 = 1, kReadBf16, kWriteF32, kWriteBf16 };

// Every benchmark reports cmp_GBps: the rate of the bytes it is compared on
// (the big array it streams: input for pack/add, output for decide/average),
// and `vs` (the baseline's id) or `base` (its own id, for baselines).
void record(benchmark::State& state, const char* label, size_t readBytes, size_t writeBytes, size_t cmpBytes,
            const char* key, Baseline id) {
  state.SetLabel(label);
  state.SetBytesProcessed((int64_t)(state.iterations() * (readBytes + writeBytes)));
  state.counters["read_MB"] = (double)readBytes / 1e6;
  state.counters["write_MB"] = (double)writeBytes / 1e6;
  state.counters["cmp_GBps"] =
      benchmark::Counter((double)cmpBytes * (double)state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters[key] = id;
}

// ---- baselines --------------------------------------------------------------

__attribute__((target("avx2"))) uint64_t streamRead(const void* p, size_t bytes) {
  const __m256i* v = static_cast<const __m256i*>(p);
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  size_t n = bytes / 32, i = 0;
  for (; i + 4 <= n; i += 4) {
    a = _mm256_xor_si256(a, _mm256_load_si256(v + i));
    b = _mm256_xor_si256(b, _mm256_load_si256(v + i + 1));
    c = _mm256_xor_si256(c, _mm256_load_si256(v + i + 2));
    d = _mm256_xor_si256(d, _mm256_load_si256(v + i + 3));
  }
  for (; i < n; i++) a = _mm256_xor_si256(a, _mm256_load_si256(v + i));
  a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

__attribute__((target("avx2"))) void streamWrite(void* p, size_t bytes, int value) {
  __m256i* v = static_cast<__m256i*>(p);
  __m256i x = _mm256_set1_epi32(value);
  for (size_t i = 0; i < bytes / 32; i++) _mm256_store_si256(v + i, x);
}

void BM_StreamRead(benchmark::State& state) {
  size_t esize = (size_t)state.range(0);
  const AlignedBuffer& buf = esize == 4 ? inputs().f32 : inputs().b16;
  for (auto _ : state) benchmark::DoNotOptimize(streamRead(buf.p, gElems * esize));
  record(state, "baseline", gElems * esize, 0, gElems * esize, "base", esize == 4 ? kReadF32 : kReadBf16);
}

void BM_StreamWrite(benchmark::State& state) {
  size_t esize = (size_t)state.range(0);
  int v = 0;
  for (auto _ : state) {
    streamWrite(inputs().out.p, gElems * esize, v++);
    benchmark::ClobberMemory();
  }
  record(state, "baseline", 0, gElems * esize, gElems * esize, "base", esize == 4 ? kWriteF32 : kWriteBf16);
}

// ---- kernels ----------------------------------------------------------------

// range(0): isa (0 portable, 1 avx2); range(1): element size (4 fp32, 2 bf16);
// range(2): zero rule.
void BM_Pack(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  size_t esize = (size_t)state.range(1);
  auto rule = (ncclSignZeroRule_t)state.range(2);
  Inputs& in = inputs();
  const void* src = esize == 4 ? in.f32.p : in.b16.p;
  ncclDataType_t dt = esize == 4 ? ncclFloat32 : ncclBfloat16;
  for (auto _ : state) {
    k.pack(src, dt, gElems, rule, in.votes.as<uint64_t>(), in.nw);
    benchmark::ClobberMemory();
  }
  record(state, k.name, gElems * esize, in.nw * 8 * sb::votePlanes(rule), gElems * esize, "vs",
         esize == 4 ? kReadF32 : kReadBf16);
}

// Adds a 1-bit vote vector into a counter of width range(1) - 1, in place: the
// ring's inner step (a received counter plus the local votes).
void BM_Add(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  int wout = (int)state.range(1);
  Inputs& in = inputs();
  uint64_t* c = in.counter.as<uint64_t>();
  for (auto _ : state) {
    k.add(c, wout - 1, in.nw, in.votes.as<uint64_t>(), 1, in.nw, c, wout, in.nw, in.nw);
    benchmark::ClobberMemory();
  }
  record(state, k.name, in.nw * 8 * (size_t)wout, in.nw * 8 * (size_t)wout, in.nw * 8 * (size_t)wout, "vs", kReadF32);
}

// Majority (range(3) = 0) or average (1) of N = range(2) voters from a
// counter into range(1)-byte elements.
void BM_Decide(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  size_t esize = (size_t)state.range(1);
  int n = (int)state.range(2);
  bool average = state.range(3) == 1;
  Inputs& in = inputs();
  ncclDataType_t dt = esize == 4 ? ncclFloat32 : ncclBfloat16;
  sb::Counts c{in.counter.as<uint64_t>(), sb::widthFor(n), in.nw};
  for (auto _ : state) {
    if (average) {
      k.average(c, n, gElems, dt, in.out.p);
    } else {
      sb::decideMajority(k, c, n, ncclSignZeroPositive, ncclSignTieZero, gElems, dt, in.out.p);
    }
    benchmark::ClobberMemory();
  }
  record(state, k.name, in.nw * 8 * (size_t)sb::widthFor(n), gElems * esize, gElems * esize, "vs",
         esize == 4 ? kWriteF32 : kWriteBf16);
}

// The output pass of the executor: a whole message's result planes -> dt.
void BM_Unpack(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  size_t esize = (size_t)state.range(1);
  Inputs& in = inputs();
  ncclDataType_t dt = esize == 4 ? ncclFloat32 : ncclBfloat16;
  for (auto _ : state) {
    k.unpack(in.counter.as<uint64_t>(), 2, in.nw, gElems, dt, in.out.p);
    benchmark::ClobberMemory();
  }
  record(state, k.name, in.nw * 8 * 2, gElems * esize, gElems * esize, "vs", esize == 4 ? kWriteF32 : kWriteBf16);
}

// The result's wire coding (bits/trits.h): a decided -1/0/+1 result's 2
// planes to 5 elements per byte (EncodeTrits, what a sender does per chunk)
// and back (DecodeTrits, the receiver, checking every byte). Compared as
// Unpack is, by elements: cmp_GBps counts 4 bytes per element against the
// fp32 streaming write, so their ratio sits beside Unpack's (fp32) and
// Decide's.
struct TritInputs {
  AlignedBuffer planes, coded;
  size_t nw;
  TritInputs()
      : planes(sb::numWords(gElems) * 8 * 2), coded(sb::tritBytes(sb::numWords(gElems))), nw(sb::numWords(gElems)) {
    std::mt19937_64 rng(2);
    uint64_t* p = planes.as<uint64_t>();
    for (size_t i = 0; i < nw; i++) {
      uint64_t a = rng(), b = rng();
      p[i] = a & b;        // +1
      p[nw + i] = ~a & b;  // -1, never both
    }
    sb::portableKernels().encodeTrits(p, p + nw, nw, coded.as<uint8_t>());
  }
};

TritInputs& tritInputs() {
  static TritInputs in;
  return in;
}

void BM_EncodeTrits(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  TritInputs& in = tritInputs();
  const uint64_t* p = in.planes.as<uint64_t>();
  for (auto _ : state) {
    k.encodeTrits(p, p + in.nw, in.nw, in.coded.as<uint8_t>());
    benchmark::ClobberMemory();
  }
  record(state, k.name, in.nw * 16, sb::tritBytes(in.nw), gElems * 4, "vs", kWriteF32);
}

void BM_DecodeTrits(benchmark::State& state) {
  const sb::Kernels& k = kernelsFor(state.range(0));
  TritInputs& in = tritInputs();
  AlignedBuffer out(in.nw * 16);
  uint64_t* p = out.as<uint64_t>();
  for (auto _ : state) {
    if (!k.decodeTrits(in.coded.as<uint8_t>(), in.nw, p, p + in.nw)) state.SkipWithError("decode refused its input");
    benchmark::ClobberMemory();
  }
  record(state, k.name, sb::tritBytes(in.nw), in.nw * 16, gElems * 4, "vs", kWriteF32);
}

void registerAll() {
  auto reg = [](const char* name, void (*fn)(benchmark::State&), std::vector<int64_t> args) {
    benchmark::RegisterBenchmark(name, fn)->Args(args)->Unit(benchmark::kMillisecond)->UseRealTime();
  };
  for (int64_t esize : {4, 2}) {
    reg("StreamRead", BM_StreamRead, {esize});
    reg("StreamWrite", BM_StreamWrite, {esize});
  }
  for (int64_t isa : {0, 1}) {
    if (isa == 1 && !sb::avx2Kernels()) continue;
    for (int64_t esize : {4, 2}) {
      reg("Pack", BM_Pack, {isa, esize, ncclSignZeroPositive});
      reg("Pack", BM_Pack, {isa, esize, ncclSignZeroAbstain});
    }
    reg("Add", BM_Add, {isa, 3});
    reg("Add", BM_Add, {isa, 5});
    for (int64_t esize : {4, 2}) {
      reg("Decide", BM_Decide, {isa, esize, 8, 0});
      reg("Average", BM_Decide, {isa, esize, 8, 1});
      reg("Unpack", BM_Unpack, {isa, esize});
    }
    reg("EncodeTrits", BM_EncodeTrits, {isa});
    reg("DecodeTrits", BM_DecodeTrits, {isa});
  }
}

// Keeps every run's compared rate so the summary prints ratios from this run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(OutputOptions opts) : ConsoleReporter(opts) {}
  struct Row {
    std::string name;
    double gbps;
    int vs;
  };
  std::vector<Row> rows;
  std::map<int, double> base;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      // With --benchmark_repetitions the median stands for the benchmark;
      // without, the single iteration run does.
      bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type != Run::RT_Iteration && !median) continue;
      auto rate = r.counters.find("cmp_GBps");
      if (rate == r.counters.end()) continue;
      auto b = r.counters.find("base");
      auto vs = r.counters.find("vs");
      if (b != r.counters.end()) base[(int)b->second.value] = rate->second.value;
      if (vs == r.counters.end()) continue;
      std::string name = r.run_name.str() + " " + r.report_label;
      auto it = index.find(name);
      if (it == index.end()) {
        index[name] = rows.size();
        rows.push_back({name, rate->second.value, (int)vs->second.value});
      } else {
        rows[it->second].gbps = rate->second.value;  // the median replaces the repetitions
      }
    }
  }
  std::map<std::string, size_t> index;
};

}  // namespace

// The console reporter's options as --benchmark_color asks: a reporter made
// here does not read that flag itself (Google Benchmark applies it only to the
// reporter it makes), so "false" would otherwise still print ANSI colors.
benchmark::ConsoleReporter::OutputOptions consoleOptions(const char* color) {
  bool on;
  if (color == nullptr || strcmp(color, "auto") == 0) {
    const char* term = getenv("TERM");
    on = isatty(STDOUT_FILENO) && term != nullptr && strcmp(term, "dumb") != 0;
  } else {
    on = strcmp(color, "true") == 0 || strcmp(color, "yes") == 0 || strcmp(color, "1") == 0 || strcmp(color, "on") == 0;
  }
  int opts = benchmark::ConsoleReporter::OO_Tabular;
  if (on) opts |= benchmark::ConsoleReporter::OO_Color;
  return static_cast<benchmark::ConsoleReporter::OutputOptions>(opts);
}

int main(int argc, char** argv) {
  std::vector<char*> args;
  const char* color = nullptr;
  for (int i = 0; i < argc; i++) {
    if (strncmp(argv[i], "--elems=", 8) == 0) {
      gElems = strtoull(argv[i] + 8, nullptr, 0);
    } else {
      if (strncmp(argv[i], "--benchmark_color=", 18) == 0) color = argv[i] + 18;
      args.push_back(argv[i]);
    }
  }
  int n = (int)args.size();
  benchmark::Initialize(&n, args.data());
  printf("# bits_bench: %zu elements (%zu MiB of fp32), one core, kernels in use: %s\n", gElems, gElems * 4 >> 20,
         sb::kernels().name);
#ifndef NDEBUG
  printf("# bits_bench itself was built without NDEBUG (not a Release build): its figures are not representative\n");
#endif
  printf(
      "# A \"Library was built as DEBUG\" warning below is about the Google Benchmark library (Debian's\n"
      "# libbenchmark is built with assertions on), not about signlion, which is built Release. Only the\n"
      "# library's bookkeeping around each timed iteration runs those checks; an iteration here streams\n"
      "# %zu elements, so they are a negligible share of its time.\n",
      gElems);
  registerAll();
  RatioReporter reporter(consoleOptions(color));
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const char* baseName[] = {"", "read fp32", "read bf16", "write fp32", "write bf16"};
  printf("\n# summary: GB/s of the streamed array (input for Pack/Add, output for Decide/Average)\n");
  printf("# and the ratio to a plain streaming read/write of the same bytes in this run (1.00 = as fast);\n");
  printf("# EncodeTrits/DecodeTrits count 4 bytes per element, as Unpack fp32 does\n");
  printf("# %-40s %9s %-11s %9s %7s\n", "kernel", "GB/s", "baseline", "base GB/s", "ratio");
  bool missing = false;
  for (const auto& row : reporter.rows) {
    // A --benchmark_filter that leaves out a row's baseline leaves it nothing to compare with: N/A, not a 0.
    double b = reporter.base.count(row.vs) ? reporter.base[row.vs] : 0.0;
    if (b > 0) {
      printf("  %-40s %9.2f %-11s %9.2f %7.2f\n", row.name.c_str(), row.gbps, baseName[row.vs], b, row.gbps / b);
    } else {
      printf("  %-40s %9.2f %-11s %9s %7s\n", row.name.c_str(), row.gbps, baseName[row.vs], "N/A", "N/A");
      missing = true;
    }
  }
  if (missing)
    printf("# N/A: the row's baseline did not run (left out by --benchmark_filter; add |^Stream to the\n"
           "# filter to measure it)\n");
  benchmark::Shutdown();
  return 0;
}
