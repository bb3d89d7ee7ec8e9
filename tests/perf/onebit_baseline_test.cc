// sign_allreduce_perf's 1-bit compressed all-reduce baseline (DeepSpeed's
// pattern, perf/onebit_baseline.h): ranks as threads, each with its own links
// over the socket transport on loopback, against the plain reference
// (perf/onebit_reference.h) bit for bit, and its bytes on the wire against
// the pattern's formula.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "onebit_baseline.h"
#include "onebit_reference.h"

namespace signlion {
namespace perf {
namespace {

// The handle trade among threads: every rank's bytes, in rank order.
class ThreadExchange {
 public:
  explicit ThreadExchange(int n) : n_(n) {}
  bool trade(int rank, const void* mine, size_t bytes, void* all) {
    std::unique_lock<std::mutex> lk(mu_);
    if (table_.size() != (size_t)n_ * bytes) table_.assign((size_t)n_ * bytes, 0);
    memcpy(table_.data() + (size_t)rank * bytes, mine, bytes);
    if (++arrived_ == n_) {
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return arrived_ == n_; });
    }
    memcpy(all, table_.data(), table_.size());
    return true;
  }

 private:
  int n_, arrived_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> table_;
};

// Rank r's input of call `call`: a mix of magnitudes, zeros and -0 (the sign
// rule's edge: +1), different per rank, call and element.
void fillInput(float* buf, size_t count, int rank, int call) {
  uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1) + 0xBF58476D1CE4E5B9ull * (uint64_t)(call + 1);
  for (size_t i = 0; i < count; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const uint32_t v = (uint32_t)(s >> 32);
    if (v % 11 == 0) {
      buf[i] = (v & 1) ? -0.0f : 0.0f;
    } else {
      buf[i] = ((float)(v % 20011) - 10005.0f) * (1.0f / 4096.0f);
    }
  }
}

constexpr int kCalls = 3;  // error feedback carries the first calls' errors into the last

struct RankRun {
  std::vector<std::vector<float>> outputs;  // per count, per call: count values
  std::vector<uint64_t> payload, wire;      // per count: bytes sent over its calls
  ncclResult_t res = ncclSuccess;
};

// Runs every count kCalls times on n ranks (call 1 in place).
std::vector<RankRun> runRanks(int n, const std::vector<size_t>& counts) {
  ThreadExchange exchange(n);
  std::vector<RankRun> runs(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      RankRun& run = runs[r];
      std::unique_ptr<OnebitBaseline> b;
      run.res = OnebitBaseline::create(
          n, r, nullptr, 60000,
          [&](const void* mine, size_t bytes, void* all) { return exchange.trade(r, mine, bytes, all); }, &b);
      if (run.res != ncclSuccess) return;
      for (size_t count : counts) {
        b->resetErrors();
        const uint64_t p0 = b->payloadBytesSent(), w0 = b->wireBytesSent();
        std::vector<float> in(count);
        for (int call = 0; call < kCalls; call++) {
          std::vector<float> out(count, 1234.5f);
          fillInput(in.data(), count, r, call);
          if (call == 1) {
            out = in;
            run.res = b->allReduce(out.data(), out.data(), count);
          } else {
            run.res = b->allReduce(in.data(), out.data(), count);
          }
          if (run.res != ncclSuccess) return;
          run.outputs.push_back(std::move(out));
        }
        run.payload.push_back(b->payloadBytesSent() - p0);
        run.wire.push_back(b->wireBytesSent() - w0);
      }
    });
  }
  for (auto& t : threads) t.join();
  return runs;
}

// The reference's outputs of calls 0..kCalls-1 of `count` on n ranks.
std::vector<std::vector<float>> referenceOutputs(int n, size_t count) {
  OnebitReference ref(n, count, true);
  std::vector<std::vector<float>> all;
  for (int call = 0; call < kCalls; call++) {
    std::vector<float> out(count, 0.0f);
    ref.step([&](int r, float* buf) { fillInput(buf, count, r, call); }, out.data());
    all.push_back(out);
  }
  return all;
}

// Counts: below one byte per chunk, not divisible by 8N or 64N, exact
// multiples, and a few thousand elements.
std::vector<size_t> countsFor(int n) {
  return {1, 5, 8, (size_t)8 * n, (size_t)8 * n + 1, (size_t)64 * n - 1, (size_t)64 * n, (size_t)64 * n + 13, 1000,
          4099};
}

TEST(OnebitBaseline, EqualsTheReferenceBitForBit) {
  for (int n = 2; n <= 5; n++) {
    SCOPED_TRACE("nranks " + std::to_string(n));
    const std::vector<size_t> counts = countsFor(n);
    std::vector<RankRun> runs = runRanks(n, counts);
    for (int r = 0; r < n; r++) ASSERT_EQ(runs[r].res, ncclSuccess) << "rank " << r;
    for (size_t c = 0; c < counts.size(); c++) {
      const std::vector<std::vector<float>> expected = referenceOutputs(n, counts[c]);
      for (int call = 0; call < kCalls; call++) {
        for (int r = 0; r < n; r++) {
          const std::vector<float>& got = runs[r].outputs[c * kCalls + call];
          ASSERT_EQ(got.size(), counts[c]);
          ASSERT_EQ(memcmp(got.data(), expected[call].data(), counts[c] * sizeof(float)), 0)
              << "count " << counts[c] << " call " << call << " rank " << r << " first element " << got[0]
              << " vs " << expected[call][0];
        }
      }
      for (int r = 0; r < n; r++)
        EXPECT_EQ(runs[r].payload[c], (uint64_t)kCalls * onebitPayloadBytes(counts[c], n))
            << "count " << counts[c] << " rank " << r;
    }
  }
}

// The reference itself, on a case worked by hand: 2 ranks, 16 elements
// (chunks of 8), no error: rank 0 all +1, rank 1 all -2. Scales 1 and 2;
// each element combines +1/2 - 2/2 = -0.5, so every output is -0.5.
TEST(OnebitBaseline, ReferenceByHand) {
  OnebitReference ref(2, 16, false);
  std::vector<float> out(16, 0.0f);
  ref.step([](int r, float* buf) { std::fill(buf, buf + 16, r == 0 ? 1.0f : -2.0f); }, out.data());
  for (float v : out) EXPECT_EQ(v, -0.5f);
}

// Bytes the transport put on the wire per element: 2(N-1)/N (1 + 32N/count),
// the signs plus a scale per message, within 1 % (its 16-byte message
// headers and the padding to 8N elements are the rest).
TEST(OnebitBaseline, WireBitsPerElementMatchTheFormula) {
  for (int n = 2; n <= 5; n++) {
    SCOPED_TRACE("nranks " + std::to_string(n));
    const std::vector<size_t> counts = {(size_t)1 << 16, 100003};
    std::vector<RankRun> runs = runRanks(n, counts);
    for (int r = 0; r < n; r++) ASSERT_EQ(runs[r].res, ncclSuccess) << "rank " << r;
    for (size_t c = 0; c < counts.size(); c++) {
      const double count = (double)counts[c];
      const double formula = 2.0 * (n - 1) / n * (1.0 + 32.0 * n / count);
      for (int r = 0; r < n; r++) {
        const double bits = (double)runs[r].wire[c] * 8.0 / kCalls / count;
        EXPECT_NEAR(bits / formula, 1.0, 0.01) << "count " << counts[c] << " rank " << r << ": " << bits
                                               << " bits per element, formula " << formula;
      }
    }
  }
}

TEST(OnebitBaseline, BadArgumentsAreErrors) {
  std::unique_ptr<OnebitBaseline> b;
  auto never = [](const void*, size_t, void*) { return false; };
  EXPECT_EQ(OnebitBaseline::create(0, 0, nullptr, 1000, never, &b), ncclInvalidArgument);
  EXPECT_EQ(OnebitBaseline::create(2, 2, nullptr, 1000, never, &b), ncclInvalidArgument);
  EXPECT_EQ(OnebitBaseline::create(kOnebitMaxRanks + 1, 0, nullptr, 1000, never, &b), ncclInvalidArgument);
  EXPECT_EQ(OnebitBaseline::create(2, 0, nullptr, 0, never, &b), ncclInvalidArgument);
  EXPECT_EQ(OnebitBaseline::create(2, 0, nullptr, 1000, never, nullptr), ncclInvalidArgument);
  // One rank: no links; null buffers with a count are an error.
  ASSERT_EQ(OnebitBaseline::create(1, 0, nullptr, 1000, never, &b), ncclSuccess);
  EXPECT_EQ(b->allReduce(nullptr, nullptr, 4), ncclInvalidArgument);
}

}  // namespace
}  // namespace perf
}  // namespace signlion
