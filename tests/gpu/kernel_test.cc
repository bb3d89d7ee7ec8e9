// The CUDA kernels (kernels/sign_kernels.h) against the CPU vote algebra
// (bits::kernels(), bits::packFields / fieldsToPlanes), bit for bit, over the
// matrix: counts 0 .. 1000003, fp32 / fp16 / bf16 / int8, every zero and tie
// rule, N = 1..16, counter widths, element pointers one element off 16-byte
// alignment, inputs with NaN, infinities, signed zeros and denormals. Every
// output buffer is filled with a pattern first: words and bytes a launcher
// must not write (plane gaps, the bytes around the elements) must keep it.
//
// Kernels with variants (kernels/variants.h) run every test once per variant:
// each must give the same bits.
//
// Built twice: against the CUDA runtime (signlion_gpu_kernel_tests, label
// gpu; every test skips when no device answers) and against the SIMT
// emulator (signlion_simt_kernel_tests, label unit: the kernels' source run
// on the CPU, with a smaller largest count).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bits/bits.h"
#include "bits/fields.h"
#include "common/vote_inputs.h"
#include "kernels/sign_kernels.h"
#include "kernels/variants.h"

namespace signlion {
namespace kernels {
namespace {

using test::Bytes;

#if defined(SIGNLION_TEST_ON_SIMT_EMULATOR)
constexpr size_t kLargeCount = 70001;
#else
constexpr size_t kLargeCount = 1000003;
#endif
const size_t kCounts[] = {0, 1, 31, 32, 33, 63, 64, 65, 4097, kLargeCount};
const ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt8};
const ncclDataType_t kFloatTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16};  // what an average is written as
const ncclSignZeroRule_t kZeroRules[] = {ncclSignZeroPositive, ncclSignZeroNegative, ncclSignZeroAbstain};
const ncclSignTieRule_t kTieRules[] = {ncclSignTieZero, ncclSignTiePositive, ncclSignTieNegative};
constexpr uint8_t kFill = 0xa5;  // what every output buffer holds before a launch
constexpr size_t kTail = 16;     // pattern bytes after every output

const bits::Kernels& cpu() { return bits::kernels(); }

// Why no test can run here, or "" when a device answers.
const std::string& noDeviceReason() {
  static const std::string reason = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) return std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(err);
    if (n == 0) return std::string("no CUDA device: cudaGetDeviceCount found none");
    return std::string();
  }();
  return reason;
}

// Device bytes [offset, offset + size) of an allocation that holds kFill
// everywhere else: `offset` bytes before them and `tail` after.
class DeviceBytes {
 public:
  // (At least 16 bytes are allocated: no zero-sized cudaMalloc.)
  explicit DeviceBytes(size_t size, size_t offset = 0, size_t tail = kTail)
      : size_(size), offset_(offset), total_(std::max<size_t>(offset + size + tail, 16)) {
    EXPECT_EQ(cudaMalloc(&base_, total_), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, kFill, total_), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* get() const { return static_cast<char*>(base_) + offset_; }
  uint64_t* words() const { return static_cast<uint64_t*>(get()); }
  void upload(const void* src) { EXPECT_EQ(cudaMemcpy(get(), src, size_, cudaMemcpyHostToDevice), cudaSuccess); }
  void upload(const Bytes& b) {
    EXPECT_EQ(b.size(), size_);
    upload(b.data());
  }
  void upload(const std::vector<uint64_t>& w) {
    EXPECT_EQ(w.size() * 8, size_);
    upload(w.data());
  }
  // The bytes [offset, offset + size), after checking the others kept kFill.
  Bytes download() const {
    Bytes all(total_);
    EXPECT_EQ(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < total_; i++) {
      if (i >= offset_ && i < offset_ + size_) continue;
      if (all[i] != kFill) {
        ADD_FAILURE() << "a launcher wrote byte " << (long long)i - (long long)offset_ << " relative to its buffer of "
                      << size_ << " bytes";
        break;
      }
    }
    return Bytes(all.begin() + offset_, all.begin() + offset_ + size_);
  }
  std::vector<uint64_t> downloadWords() const {
    Bytes b = download();
    std::vector<uint64_t> w(b.size() / 8);
    if (!w.empty()) memcpy(w.data(), b.data(), w.size() * 8);
    return w;
  }

 private:
  void* base_ = nullptr;
  size_t size_, offset_, total_;
};

// Words that start as the device buffers do (kFill bytes).
std::vector<uint64_t> filledWords(size_t n) { return std::vector<uint64_t>(n, 0x0101010101010101ull * kFill); }

std::vector<uint64_t> randomWords(size_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> w(n);
  for (uint64_t& x : w) x = rng();
  return w;
}

// Vote inputs (test/common/vote_inputs.h) with raw patterns the generator
// does not make mixed in: NaNs of either sign and any payload, the smallest
// denormals, the largest finite values, int8's extremes.
Bytes voteInputs(size_t count, ncclDataType_t dt, uint32_t seed) {
  Bytes in = test::randomVoteInputs(1, count, dt, seed)[0];
  static const uint32_t f32[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu,
                                 0x00000001u, 0x80000001u, 0x7f7fffffu, 0xff7fffffu, 0x80000000u, 0x00000000u};
  static const uint32_t f16[] = {0x7e00u, 0xfe00u, 0x7c01u, 0xfc01u, 0x7fffu, 0xffffu,
                                 0x0001u, 0x8001u, 0x7bffu, 0xfbffu, 0x8000u, 0x0000u};
  static const uint32_t bf16[] = {0x7fc0u, 0xffc0u, 0x7f81u, 0xff81u, 0x7fffu, 0xffffu,
                                  0x0001u, 0x8001u, 0x7f7fu, 0xff7fu, 0x8000u, 0x0000u};
  static const uint32_t i8[] = {0x80u, 0x7fu, 0xffu, 0x01u, 0x00u};
  const uint32_t* raw = dt == ncclFloat32 ? f32 : dt == ncclFloat16 ? f16 : dt == ncclBfloat16 ? bf16 : i8;
  const size_t nraw = dt == ncclInt8 ? 5 : 12, es = bits::typeSize(dt);
  std::mt19937 rng(seed ^ 0x5eed);
  for (size_t i = 0; i < count; i++) {
    if (rng() % 8 != 0) continue;
    uint32_t r = raw[rng() % nraw];
    memcpy(in.data() + i * es, &r, es);  // little-endian: the low es bytes
  }
  return in;
}

// N random 1-bit vote planes summed into a counter of widthFor(N) planes
// (stride nw), on the CPU: counts in 0..N as the schedules produce them.
std::vector<uint64_t> randomCounter(int n, size_t nw, int width, std::mt19937_64& rng) {
  std::vector<uint64_t> c((size_t)width * nw, 0);
  for (int r = 0; r < n; r++) {
    std::vector<uint64_t> vote = randomWords(nw, rng);
    cpu().add(c.data(), width, nw, vote.data(), 1, nw, c.data(), width, nw, nw);
  }
  return c;
}

std::string describe(const char* what, ncclDataType_t dt, size_t count, const std::string& more) {
  std::ostringstream s;
  s << what << " dt=" << bits::typeName(dt) << " count=" << count << " " << more;
  return s.str();
}

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!noDeviceReason().empty()) GTEST_SKIP() << noDeviceReason();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // The launch's status, then the stream's.
  void finish(cudaError_t launched) {
    ASSERT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
    cudaError_t err = cudaStreamSynchronize(stream_);
    ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  }
  cudaStream_t stream_ = nullptr;
};

// Runs body() once per variant of the kernels `kinds` (variant v of each, or
// its last when it has fewer), then puts the defaults back.
template <typename Body>
void forEachVariant(std::initializer_list<Tuned> kinds, Body body) {
  int most = 0;
  for (Tuned k : kinds) most = std::max(most, variantCount(k));
  for (int v = 0; v < most; v++) {
    std::string names;
    for (Tuned k : kinds) {
      const int mine = std::min(v, variantCount(k) - 1);
      ASSERT_EQ(selectVariant(k, mine), cudaSuccess);
      names += std::string(" ") + tunedName(k) + "=" + variantName(k, mine);
    }
    SCOPED_TRACE("variant" + names);
    body();
    if (::testing::Test::HasFatalFailure()) break;
  }
  for (Tuned k : kinds) ASSERT_EQ(selectVariant(k, defaultVariant(k)), cudaSuccess);
}

// Element pointers 16-byte aligned (offset 0: the vector paths) and one
// element past that (every path's fallback).
const size_t kElemOffsets[] = {0, 1};

TEST_F(GpuKernels, PackEqualsCpu) {
  uint32_t seed = 1;
  for (ncclDataType_t dt : kTypes) {
    const size_t es = bits::typeSize(dt);
    for (size_t count : kCounts) {
      Bytes in = voteInputs(count, dt, seed++);
      const size_t nw = bits::numWords(count), stride = nw + 3;
      for (ncclSignZeroRule_t zero : kZeroRules) {
        for (size_t off : kElemOffsets) {
          SCOPED_TRACE(describe("pack", dt, count, "zero=" + std::to_string(zero) + " offset=" + std::to_string(off)));
          const size_t words = (size_t)bits::votePlanes(zero) * stride;
          std::vector<uint64_t> want = filledWords(words);
          cpu().pack(in.data(), dt, count, zero, want.data(), stride);
          DeviceBytes src(count * es, off * es, 0), out(words * 8);
          src.upload(in);
          finish(pack(src.get(), dt, count, zero, out.words(), stride, stream_));
          ASSERT_EQ(out.downloadWords(), want);
        }
      }
    }
  }
}

TEST_F(GpuKernels, AddEqualsCpu) {
  struct Widths {
    int a, b, out;
  };
  // wa = 0 (the first vote of a sum), carries lost past wout, uneven widths.
  const Widths kWidths[] = {{1, 1, 1}, {1, 1, 2}, {0, 1, 1}, {3, 2, 4}, {2, 3, 3}, {4, 4, 5}, {5, 1, 5}, {7, 7, 8}};
  std::mt19937_64 rng(2);
  for (size_t count : kCounts) {
    const size_t nw = bits::numWords(count);
    for (const Widths& w : kWidths) {
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(describe("add", ncclFloat32, count,
                              "widths=" + std::to_string(w.a) + "," + std::to_string(w.b) + "->" +
                                  std::to_string(w.out) + (inPlace ? " in place" : "")));
        const size_t sa = nw + 1, sb = nw + 2, so = inPlace ? sa : nw + 3;
        // a has wout planes when the sum goes into it.
        std::vector<uint64_t> a = randomWords((size_t)(inPlace ? w.out : w.a) * sa, rng);
        std::vector<uint64_t> b = randomWords((size_t)w.b * sb, rng);
        std::vector<uint64_t> want = inPlace ? a : filledWords((size_t)w.out * so);
        cpu().add(a.data(), w.a, sa, b.data(), w.b, sb, want.data(), w.out, so, nw);
        DeviceBytes da(a.size() * 8), db(b.size() * 8), dout(inPlace ? 0 : want.size() * 8);
        da.upload(a);
        db.upload(b);
        uint64_t* out = inPlace ? da.words() : dout.words();
        finish(add(da.words(), w.a, sa, db.words(), w.b, sb, out, w.out, so, nw, stream_));
        ASSERT_EQ(inPlace ? da.downloadWords() : dout.downloadWords(), want);
      }
    }
  }
}

TEST_F(GpuKernels, SumVotesEqualsCpu) {
  forEachVariant({Tuned::kSumVotes}, [&] {
    std::mt19937_64 rng(3);
    for (size_t count : kCounts) {
      const size_t nw = bits::numWords(count);
      for (int nslots : {0, 1, 2, 3, 4, 7, 8, 16, 33, 255, 256}) {  // 255: the batched variants' most
        for (int extra : {0, 2}) {
          const int wout = bits::widthFor((uint64_t)nslots) + extra;
          // Gaps of 1 and 2 words, then of 2 and 4: even strides (with an
          // even nw) let the pair variant read and write 16-byte vectors.
          const size_t gap = 1 + (size_t)(extra / 2);
          SCOPED_TRACE(describe("sumVotes", ncclFloat32, count,
                                "slots=" + std::to_string(nslots) + " wout=" + std::to_string(wout)));
          const size_t slotStride = nw + gap, so = nw + 2 * gap;
          std::vector<uint64_t> votes = randomWords((size_t)std::max(nslots, 1) * slotStride, rng);
          std::vector<uint64_t> want = filledWords((size_t)wout * so);
          for (int p = 0; p < wout; p++) std::fill_n(want.begin() + p * so, nw, 0);
          for (int r = 0; r < nslots; r++)
            cpu().add(want.data(), wout, so, votes.data() + r * slotStride, 1, slotStride, want.data(), wout, so, nw);
          DeviceBytes dv(votes.size() * 8), dout(want.size() * 8);
          dv.upload(votes);
          finish(sumVotes(dv.words(), nslots, slotStride, dout.words(), wout, so, nw, stream_));
          ASSERT_EQ(dout.downloadWords(), want);
        }
      }
    }
  });
}

TEST_F(GpuKernels, DecideBitsEqualsCpu) {
  std::mt19937_64 rng(4);
  for (size_t count : kCounts) {
    const size_t nw = bits::numWords(count);
    for (int n = 1; n <= 16; n++) {
      if (count == kLargeCount && n % 5 != 1) continue;  // N = 1, 6, 11, 16 at the largest count
      const int width = bits::widthFor((uint64_t)n);
      std::vector<uint64_t> pos = randomCounter(n, nw, width, rng);
      // M one plane wider than P (a zero plane): widths may differ.
      std::vector<uint64_t> neg = randomCounter(n, nw, width + 1, rng);
      for (bool ternary : {false, true}) {
        const ncclSignZeroRule_t zero = ternary ? ncclSignZeroAbstain : ncclSignZeroPositive;
        for (ncclSignTieRule_t tie : kTieRules) {
          SCOPED_TRACE(describe("decideBits", ncclFloat32, count,
                                "N=" + std::to_string(n) + (ternary ? " ternary" : "") + " tie=" + std::to_string(tie)));
          const size_t so = nw + 1;
          const int nplanes = bits::majorityPlanes(n, zero, tie);
          bits::Counts c{pos.data(), width, nw};
          if (ternary) c = bits::Counts{pos.data(), width, nw, neg.data(), width + 1, nw};
          std::vector<uint64_t> want = filledWords((size_t)nplanes * so);
          cpu().decideBits(c, n, tie, want.data(), so, nw);
          DeviceBytes dp(pos.size() * 8), dn(neg.size() * 8), dout(want.size() * 8);
          dp.upload(pos);
          dn.upload(neg);
          bits::Counts dc{dp.words(), width, nw};
          if (ternary) dc = bits::Counts{dp.words(), width, nw, dn.words(), width + 1, nw};
          finish(decideBits(dc, n, tie, dout.words(), so, nw, stream_));
          ASSERT_EQ(dout.downloadWords(), want);
        }
      }
    }
  }
}

TEST_F(GpuKernels, UnpackEqualsCpu) {
  forEachVariant({Tuned::kUnpack}, [&] {
    std::mt19937_64 rng(5);
    for (size_t count : kCounts) {
      const size_t nw = bits::numWords(count), stride = nw + 1;
      // Random planes: +1 and -1 both set wherever the generator says so (+1
      // wins, as in the CPU's unpack).
      std::vector<uint64_t> planes = randomWords(2 * stride, rng);
      for (ncclDataType_t dt : kTypes) {
        const size_t es = bits::typeSize(dt);
        for (int nplanes : {1, 2}) {
          for (size_t off : kElemOffsets) {
            SCOPED_TRACE(describe("unpack", dt, count,
                                  "planes=" + std::to_string(nplanes) + " offset=" + std::to_string(off)));
            Bytes want(count * es);
            cpu().unpack(planes.data(), nplanes, stride, count, dt, want.data());
            DeviceBytes dp(planes.size() * 8), dst(count * es, off * es);
            dp.upload(planes);
            finish(unpack(dp.words(), nplanes, stride, count, dt, dst.get(), stream_));
            Bytes got = dst.download();
            ASSERT_EQ(test::firstMismatch(got, want), std::string::npos);
          }
        }
      }
    }
  });
}

TEST_F(GpuKernels, AverageEqualsCpu) {
  forEachVariant({Tuned::kAverage}, [&] {
    std::mt19937_64 rng(6);
    for (size_t count : kCounts) {
      const size_t nw = bits::numWords(count);
      for (int n = 1; n <= 16; n++) {
        if (count == kLargeCount && n % 5 != 1) continue;
        const int width = bits::widthFor((uint64_t)n);
        std::vector<uint64_t> pos = randomCounter(n, nw, width, rng), neg = randomCounter(n, nw, width, rng);
        for (bool ternary : {false, true}) {
          for (ncclDataType_t dt : kFloatTypes) {
            const size_t es = bits::typeSize(dt);
            for (size_t off : kElemOffsets) {
              SCOPED_TRACE(describe("average", dt, count,
                                    "N=" + std::to_string(n) + (ternary ? " ternary" : "") +
                                        " offset=" + std::to_string(off)));
              bits::Counts c{pos.data(), width, nw};
              if (ternary) c = bits::Counts{pos.data(), width, nw, neg.data(), width, nw};
              Bytes want(count * es);
              cpu().average(c, n, count, dt, want.data());
              DeviceBytes dp(pos.size() * 8), dn(neg.size() * 8), dst(count * es, off * es);
              dp.upload(pos);
              dn.upload(neg);
              bits::Counts dc{dp.words(), width, nw};
              if (ternary) dc = bits::Counts{dp.words(), width, nw, dn.words(), width, nw};
              finish(average(dc, n, count, dt, dst.get(), stream_));
              Bytes got = dst.download();
              ASSERT_EQ(test::firstMismatch(got, want), std::string::npos);
            }
          }
        }
      }
    }
  });
}

// The fused last step against add, then decideBits + unpack (majority) or
// average, on the CPU. The local counter holds N / 2 ranks' votes, the
// received one the others'.
TEST_F(GpuKernels, AddDecideUnpackEqualsCpu) {
  forEachVariant({Tuned::kFusedMajority, Tuned::kFusedAverage}, [&] {
    std::mt19937_64 rng(7);
    int variant = 0;  // rotates datatype, alignment and planesOut over the matrix
    for (int n = 1; n <= 16; n++) {
      const int n1 = n / 2, n2 = n - n1;
      const int w1 = bits::widthFor((uint64_t)n1), w2 = bits::widthFor((uint64_t)n2), ws = bits::widthFor((uint64_t)n);
      for (size_t count : {(size_t)1, (size_t)65, (size_t)4097, kLargeCount}) {
        if (count == kLargeCount && n % 5 != 1) continue;
        const size_t nw = bits::numWords(count);
        const size_t s1 = nw + 1, s2 = nw + 2, so = nw + 3;
        std::vector<uint64_t> accP = randomCounter(n1, s1, w1, rng), accM = randomCounter(n1, s1, w1, rng);
        std::vector<uint64_t> inP = randomCounter(n2, s2, w2, rng), inM = randomCounter(n2, s2, w2, rng);
        for (ncclSignOp_t op : {ncclSignMajority, ncclSignAverage}) {
          for (ncclSignZeroRule_t zero : kZeroRules) {
            for (ncclSignTieRule_t tie : kTieRules) {
              if (op == ncclSignAverage && tie != ncclSignTieZero) continue;  // no tie in an average
              const ncclDataType_t dt = op == ncclSignMajority ? kTypes[variant % 4] : kFloatTypes[variant % 3];
              const size_t off = (size_t)(variant / 4) % 2, es = bits::typeSize(dt);
              const bool wantPlanes = variant % 3 != 0;
              variant++;
              const bool ternary = zero == ncclSignZeroAbstain;
              SCOPED_TRACE(describe("addDecideUnpack", dt, count,
                                    "N=" + std::to_string(n) + " op=" + std::to_string(op) + " zero=" +
                                        std::to_string(zero) + " tie=" + std::to_string(tie) +
                                        " offset=" + std::to_string(off) + (wantPlanes ? " planesOut" : "")));
              // CPU: the sum, stored; then the result.
              std::vector<uint64_t> sumP((size_t)ws * nw), sumM((size_t)ws * nw);
              cpu().add(accP.data(), w1, s1, inP.data(), w2, s2, sumP.data(), ws, nw, nw);
              cpu().add(accM.data(), w1, s1, inM.data(), w2, s2, sumM.data(), ws, nw, nw);
              bits::Counts sum{sumP.data(), ws, nw};
              if (ternary) sum = bits::Counts{sumP.data(), ws, nw, sumM.data(), ws, nw};
              const int nplanes = op == ncclSignMajority ? bits::majorityPlanes(n, zero, tie) : (ternary ? 2 : 1) * ws;
              std::vector<uint64_t> wantPlanesOut = filledWords((size_t)nplanes * so);
              Bytes want(count * es);
              if (op == ncclSignMajority) {
                cpu().decideBits(sum, n, tie, wantPlanesOut.data(), so, nw);
                cpu().unpack(wantPlanesOut.data(), nplanes, so, count, dt, want.data());
              } else {
                cpu().average(sum, n, count, dt, want.data());
                for (int p = 0; p < ws; p++) {
                  std::copy_n(sumP.begin() + p * nw, nw, wantPlanesOut.begin() + p * so);
                  if (ternary) std::copy_n(sumM.begin() + p * nw, nw, wantPlanesOut.begin() + (ws + p) * so);
                }
              }
              DeviceBytes dAccP(accP.size() * 8), dAccM(accM.size() * 8), dInP(inP.size() * 8), dInM(inM.size() * 8);
              DeviceBytes dPlanes(wantPlanes ? wantPlanesOut.size() * 8 : 0), dst(count * es, off * es);
              dAccP.upload(accP);
              dAccM.upload(accM);
              dInP.upload(inP);
              dInM.upload(inM);
              bits::Counts acc{dAccP.words(), w1, s1}, in{dInP.words(), w2, s2};
              if (ternary) {
                acc = bits::Counts{dAccP.words(), w1, s1, dAccM.words(), w1, s1};
                in = bits::Counts{dInP.words(), w2, s2, dInM.words(), w2, s2};
              }
              finish(addDecideUnpack(acc, in, ws, n, op, zero, tie, wantPlanes ? dPlanes.words() : nullptr, so, count,
                                     dt, dst.get(), stream_));
              Bytes got = dst.download();
              ASSERT_EQ(test::firstMismatch(got, want), std::string::npos);
              if (wantPlanes) {
                ASSERT_EQ(dPlanes.downloadWords(), wantPlanesOut);
              }
            }
          }
        }
      }
    }
  });
}

const int kFieldBits[] = {1, 2, 3, 4, 5, 7, 8, 11, 16, 21, 32, 33, 64};

TEST_F(GpuKernels, PackFieldsEqualsCpu) {
  forEachVariant({Tuned::kPackFields}, [&] {
    uint32_t seed = 8;
    for (ncclDataType_t dt : kTypes) {
      const size_t es = bits::typeSize(dt);
      for (size_t count : kCounts) {
        Bytes in = voteInputs(count, dt, seed++);
        for (int f : kFieldBits) {
          for (ncclSignZeroRule_t zero : kZeroRules) {
            const size_t off = (size_t)(f + zero) % 2;
            SCOPED_TRACE(describe("packFields", dt, count,
                                  "bits=" + std::to_string(f) + " zero=" + std::to_string(zero) +
                                      " offset=" + std::to_string(off)));
            const size_t nfw = bits::fieldWordsFor(count, f), stride = nfw + 1;
            const size_t words = (size_t)bits::votePlanes(zero) * stride;
            std::vector<uint64_t> want = filledWords(words);
            if (count > 0) bits::packFields(cpu(), in.data(), dt, count, zero, f, want.data(), stride);
            DeviceBytes src(count * es, off * es, 0), out(words * 8);
            src.upload(in);
            finish(packFields(src.get(), dt, count, zero, f, out.words(), stride, stream_));
            ASSERT_EQ(out.downloadWords(), want);
          }
        }
      }
    }
  });
}

TEST_F(GpuKernels, FieldsToPlanesEqualsCpu) {
  forEachVariant({Tuned::kFieldsToPlanes}, [&] {
    std::mt19937_64 rng(9);
    for (int f : kFieldBits) {
      for (size_t first : {(size_t)0, (size_t)64, (size_t)192}) {
        for (size_t n : kCounts) {
          const int width = std::min(f, 1 + (int)(n % 7));  // planes of the low bits, as wide as the fields or less
          SCOPED_TRACE(describe("fieldsToPlanes", ncclFloat32, n,
                                "bits=" + std::to_string(f) + " first=" + std::to_string(first) +
                                    " width=" + std::to_string(width)));
          std::vector<uint64_t> words = randomWords(std::max<size_t>(1, bits::fieldWordsFor(first + n, f)), rng);
          const size_t nb = bits::numWords(n), stride = nb + 1;
          std::vector<uint64_t> want = filledWords((size_t)width * stride);
          if (n > 0) bits::fieldsToPlanes(words.data(), f, first, n, want.data(), width, stride);
          DeviceBytes dw(words.size() * 8), out(want.size() * 8);
          dw.upload(words);
          finish(fieldsToPlanes(dw.words(), f, first, n, out.words(), width, stride, stream_));
          ASSERT_EQ(out.downloadWords(), want);
        }
      }
    }
  });
}

// Zero-sized work launches nothing (null pointers are fine); arguments no
// kernel can serve are cudaErrorInvalidValue, not a launch.
// A random decided result: +1, -1 or 0 per element, never both.
void randomResult(size_t nw, std::mt19937_64& rng, std::vector<uint64_t>* planes) {
  planes->assign(2 * nw, 0);
  for (size_t i = 0; i < nw; i++) {
    const uint64_t a = rng(), b = rng();
    (*planes)[i] = a & b;
    (*planes)[nw + i] = ~a & b;
  }
}

// Sizes with whole groups of 5 blocks, partial ones, and none.
const size_t kTritBlocks[] = {1, 4, 5, 6, 10, 13, 1000, (kLargeCount + 63) / 64};

// Decided results, and planes with elements both +1 and -1 (coded as +1).
TEST_F(GpuKernels, EncodeTritsEqualsCpu) {
  forEachVariant({Tuned::kEncodeTrits}, [&] {
    std::mt19937_64 rng(11);
    for (size_t nw : kTritBlocks)
      for (int decided = 0; decided < 2; decided++) {
        std::vector<uint64_t> planes = randomWords(2 * nw, rng);
        if (decided) randomResult(nw, rng, &planes);
        DeviceBytes in(16 * nw);
        in.upload(planes);
        DeviceBytes out(bits::tritBytes(nw));
        finish(encodeTrits(in.words(), in.words() + nw, nw, static_cast<uint8_t*>(out.get()), stream_));
        Bytes want(bits::tritBytes(nw));
        cpu().encodeTrits(planes.data(), planes.data() + nw, nw, want.data());
        EXPECT_EQ(test::firstMismatch(out.download(), want), std::string::npos) << "nblocks " << nw;
      }
  });
}

TEST_F(GpuKernels, DecodeTritsEqualsCpuAndFlagsMalformedBytes) {
  forEachVariant({Tuned::kDecodeTrits}, [&] {
    std::mt19937_64 rng(12);
    for (size_t nw : kTritBlocks) {
      std::vector<uint64_t> planes;
      randomResult(nw, rng, &planes);
      Bytes coded(bits::tritBytes(nw));
      cpu().encodeTrits(planes.data(), planes.data() + nw, nw, coded.data());
      // Valid bytes, then one byte above 242 in a group (or, with no group, a
      // tail element both +1 and -1).
      for (int malformed = 0; malformed < 2; malformed++) {
        Bytes bytes = coded;
        if (malformed && nw >= bits::kTritGroupBlocks) bytes[rng() % (64 * (nw / 5))] = (uint8_t)(243 + rng() % 13);
        if (malformed && nw < bits::kTritGroupBlocks) {
          bytes[0] |= 1;
          bytes[8 * nw] |= 1;
        }
        DeviceBytes in(bytes.size());
        in.upload(bytes);
        DeviceBytes out(16 * nw);
        DeviceBytes bad(4);
        const uint32_t zero = 0;
        bad.upload(&zero);
        finish(decodeTrits(static_cast<const uint8_t*>(in.get()), nw, out.words(), out.words() + nw,
                           static_cast<uint32_t*>(bad.get()), 7, stream_));
        uint32_t flag = 0;
        const Bytes b = bad.download();
        memcpy(&flag, b.data(), 4);
        EXPECT_EQ(flag, malformed ? 7u : 0u) << "nblocks " << nw;
        if (!malformed) {
          EXPECT_EQ(out.downloadWords(), planes) << "nblocks " << nw;
        }
      }
    }
  });
}

// The variant table: names for every variant, defaults in range, and a
// variant out of range refused without changing the choice.
TEST_F(GpuKernels, VariantTable) {
  for (int i = 0; i < kTunedKernels; i++) {
    const Tuned k = (Tuned)i;
    ASSERT_NE(tunedName(k), nullptr);
    ASSERT_GE(variantCount(k), 1) << tunedName(k);
    for (int v = 0; v < variantCount(k); v++) EXPECT_NE(variantName(k, v), nullptr) << tunedName(k);
    EXPECT_EQ(variantName(k, variantCount(k)), nullptr);
    EXPECT_GE(defaultVariant(k), 0);
    EXPECT_LT(defaultVariant(k), variantCount(k));
    EXPECT_EQ(currentVariant(k), defaultVariant(k));
    EXPECT_EQ(selectVariant(k, variantCount(k)), cudaErrorInvalidValue);
    EXPECT_EQ(selectVariant(k, -1), cudaErrorInvalidValue);
    EXPECT_EQ(currentVariant(k), defaultVariant(k));
  }
}

TEST_F(GpuKernels, ArgumentsAndEmptyWork) {
  EXPECT_EQ(pack(nullptr, ncclFloat32, 0, ncclSignZeroPositive, nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(add(nullptr, 1, 0, nullptr, 1, 0, nullptr, 1, 0, 0, stream_), cudaSuccess);
  EXPECT_EQ(unpack(nullptr, 1, 0, 0, ncclFloat16, nullptr, stream_), cudaSuccess);
  EXPECT_EQ(average(bits::Counts{nullptr, 1, 0}, 3, 0, ncclBfloat16, nullptr, stream_), cudaSuccess);
  DeviceBytes buf(4096);
  uint64_t* w = buf.words();
  EXPECT_EQ(pack(w, ncclFloat64, 10, ncclSignZeroPositive, w, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(pack(w, ncclFloat32, 10, ncclSignNumZeroRules, w, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(average(bits::Counts{w, 1, 1}, 3, 10, ncclInt8, w, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(unpack(w, 3, 1, 10, ncclFloat32, w, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(unpack(w, 1, 1, 10, ncclInt32, w, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(sumVotes(w, 4, 1, w, 2, 1, 1, stream_), cudaErrorInvalidValue);  // 4 votes need 3 planes
  EXPECT_EQ(decideBits(bits::Counts{w, 1, 1}, 0, ncclSignTieZero, w, 1, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(packFields(w, ncclFloat32, 10, ncclSignZeroPositive, 0, w, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(fieldsToPlanes(w, 65, 0, 10, w, 1, 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(encodeTrits(nullptr, nullptr, 0, nullptr, stream_), cudaSuccess);
  EXPECT_EQ(decodeTrits(nullptr, 0, nullptr, nullptr, nullptr, 1, stream_), cudaSuccess);
  EXPECT_EQ(encodeTrits(w, w, 5, reinterpret_cast<uint8_t*>(w) + 1, stream_), cudaErrorInvalidValue);
  EXPECT_EQ(decodeTrits(reinterpret_cast<uint8_t*>(w), 5, w, w, nullptr, 1, stream_), cudaErrorInvalidValue);
  // The fused step's zero rule must match the counters it is given.
  bits::Counts binary{w, 1, 1}, ternary{w, 1, 1, w, 1, 1};
  EXPECT_EQ(addDecideUnpack(binary, binary, 2, 2, ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero, nullptr, 1,
                            10, ncclFloat32, w, stream_),
            cudaErrorInvalidValue);
  EXPECT_EQ(addDecideUnpack(ternary, binary, 2, 2, ncclSignMajority, ncclSignZeroAbstain, ncclSignTieZero, nullptr, 1,
                            10, ncclFloat32, w, stream_),
            cudaErrorInvalidValue);
  finish(cudaSuccess);
}

}  // namespace
}  // namespace kernels
}  // namespace signlion
