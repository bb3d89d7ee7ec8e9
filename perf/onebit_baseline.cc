#include "onebit_baseline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/checks.h"
#include "common/clock.h"
#include "host/net.h"
#include "host/send_pacing.h"
#include "net_common.h"
#include "onebit_reference.h"

namespace signlion {
namespace perf {

namespace {

// kSigns[byte][b]: +1 or -1, the sign bit b of `byte` stands for. A
// product with it flips a float's sign exactly, so v * kSigns[..] equals
// (bit ? v : -v) bit for bit, in loops the compiler vectorizes.
struct SignTable {
  float v[256][8];
  SignTable() {
    for (int byte = 0; byte < 256; byte++)
      for (int b = 0; b < 8; b++) v[byte][b] = ((byte >> b) & 1) ? 1.0f : -1.0f;
  }
};
const SignTable kSigns;

// The signs of x[8k .. 8k+8) as one byte, bit b for element 8k + b, 1 for
// x >= 0 (onebitPositive: -0 and +0 included).
inline unsigned signByte(const float* v) {
#ifdef __SSE2__
  const __m128 zero = _mm_setzero_ps();
  return (unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(v), zero)) |
         ((unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(v + 4), zero)) << 4);
#else
  unsigned byte = 0;
  for (int b = 0; b < 8; b++) byte |= (unsigned)onebitPositive(v[b]) << b;
  return byte;
#endif
}

// Packs the signs of x[0..n) (n a multiple of 8) and writes
// err[i] = x[i] - scale * sign(x[i]).
void errorAndSigns(const float* __restrict x, size_t n, float scale, float* __restrict err,
                   uint8_t* __restrict bits) {
  for (size_t k = 0; k < n / 8; k++) {
    const float* v = x + 8 * k;
    const unsigned byte = signByte(v);
    bits[k] = (uint8_t)byte;
    const float* sg = kSigns.v[byte];
    for (int b = 0; b < 8; b++) err[8 * k + b] = v[b] - scale * sg[b];
  }
}

// acc[i] += (bit i ? share : -share) for i < n (n a multiple of 8).
void addScaledSigns(const uint8_t* __restrict bits, size_t n, float share, float* __restrict acc) {
  for (size_t k = 0; k < n / 8; k++) {
    const float* sg = kSigns.v[bits[k]];
    for (int b = 0; b < 8; b++) acc[8 * k + b] += share * sg[b];
  }
}

// out[i] = (bit i ? scale : -scale) for i < n.
void scaledSigns(const uint8_t* __restrict bits, size_t n, float scale, float* __restrict out) {
  size_t k = 0;
  for (; k < n / 8; k++) {
    const float* sg = kSigns.v[bits[k]];
    for (int b = 0; b < 8; b++) out[8 * k + b] = scale * sg[b];
  }
  for (size_t i = 8 * k; i < n; i++) out[i] = scale * kSigns.v[bits[k]][i - 8 * k];
}

}  // namespace

ncclResult_t OnebitBaseline::create(int nranks, int rank, const char* plugin, int timeoutMs,
                                    const OnebitExchange& exchange, std::unique_ptr<OnebitBaseline>* out) {
  if (out == nullptr) {
    WARN("OnebitBaseline::create: out must not be NULL");
    return ncclInvalidArgument;
  }
  if (nranks < 1 || nranks > kOnebitMaxRanks || rank < 0 || rank >= nranks || timeoutMs < 1) {
    WARN("OnebitBaseline::create: nranks %d, rank %d, timeoutMs %d: need 1 <= nranks <= %d, 0 <= rank < nranks "
         "and timeoutMs >= 1",
         nranks, rank, timeoutMs, kOnebitMaxRanks);
    return ncclInvalidArgument;
  }
  std::unique_ptr<OnebitBaseline> b(new OnebitBaseline());
  b->nranks_ = nranks;
  b->rank_ = rank;
  b->timeoutMs_ = timeoutMs;
  NCCLCHECK(b->connect(plugin, exchange));
  *out = std::move(b);
  return ncclSuccess;
}

// One listen per peer (so each accepted comm is known to be that peer's),
// the handles traded through `exchange`, then connect and accept run
// non-blocking until every link is up, as the host communicator's links do.
ncclResult_t OnebitBaseline::connect(const char* plugin, const OnebitExchange& exchange) {
  const int n = nranks_;
  sendComms_.assign(n, nullptr);
  recvComms_.assign(n, nullptr);
  sendReqs_.assign(n, nullptr);
  recvReqs_.assign(n, nullptr);
  waitOn_.reserve(2 * (size_t)n);
  if (n == 1) return ncclSuccess;
  NCCLCHECK(host::Net::open(plugin, &net_));
  const ncclNet_v11_t& api = net_->api();
  // Row r: rank r's handles, slot p for peer p.
  const size_t row = (size_t)n * NCCL_NET_HANDLE_MAXSIZE;
  std::vector<char> table((size_t)n * row, 0);
  std::vector<void*> listens(n, nullptr);
  ncclResult_t res = ncclSuccess;
  std::vector<char> mine(row, 0);
  int64_t deadline;
  size_t pending;
  for (int p = 0; p < n; p++)
    if (p != rank_)
      NCCLCHECKGOTO(api.listen(net_->ctx(), net_->dev(), mine.data() + (size_t)p * NCCL_NET_HANDLE_MAXSIZE,
                               &listens[p]),
                    res, done);
  if (!exchange(mine.data(), row, table.data())) {
    WARN("OnebitBaseline: rank %d: trading the listen handles failed", rank_);
    res = ncclRemoteError;
    goto done;
  }
  deadline = nowMs() + timeoutMs_;
  pending = 2 * (size_t)(n - 1);
  while (pending > 0) {
    const size_t before = pending;
    for (int p = 0; p < n; p++) {
      if (p == rank_) continue;
      if (sendComms_[p] == nullptr) {
        char* h = table.data() + (size_t)p * row + (size_t)rank_ * NCCL_NET_HANDLE_MAXSIZE;
        NCCLCHECKGOTO(api.connect(net_->ctx(), net_->dev(), h, &sendComms_[p], nullptr), res, done);
        if (sendComms_[p] != nullptr) pending--;
      }
      if (recvComms_[p] == nullptr) {
        NCCLCHECKGOTO(api.accept(listens[p], &recvComms_[p], nullptr), res, done);
        if (recvComms_[p] != nullptr) pending--;
      }
    }
    if (pending == before) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (pending > 0 && nowMs() > deadline) {
      WARN("OnebitBaseline: rank %d: links to %d peers not all up after %d ms", rank_, n - 1, timeoutMs_);
      res = ncclRemoteError;
      goto done;
    }
  }
done:
  for (void* l : listens)
    if (l != nullptr) api.closeListen(l);
  return res;
}

void OnebitBaseline::paceLinks(int64_t linkMbits) {
  if (!net_ || nranks_ < 2) return;
  const uint64_t each = host::pacedLinkBytesPerSec(linkMbits) / (uint64_t)(nranks_ - 1);
  for (void* c : sendComms_)
    if (c != nullptr) (void)net_->setSendPacing(c, each);
}

OnebitBaseline::~OnebitBaseline() {
  if (!net_) return;
  const ncclNet_v11_t& api = net_->api();
  for (void* c : sendComms_)
    if (c != nullptr) api.closeSend(c);
  for (void* c : recvComms_)
    if (c != nullptr) api.closeRecv(c);
}

void OnebitBaseline::abort() {
  if (!net_) return;
  for (void* c : sendComms_) net_->abortComm(c);
  for (void* c : recvComms_) net_->abortComm(c);
}

uint64_t OnebitBaseline::wireBytesSent(int peer) const {
  uint64_t total = 0;
  for (int p = 0; p < nranks_; p++) {
    uint64_t s = 0, r = 0;
    // What the communicator's counter counts: its send comms' bytes.
    if ((peer < 0 || p == peer) && sendComms_[p] != nullptr && net_->wireBytes(sendComms_[p], &s, &r)) total += s;
  }
  return total;
}

void OnebitBaseline::resize(size_t count) {
  count_ = count;
  padded_ = onebitPaddedCount(count, nranks_);
  chunk_ = padded_ / (size_t)nranks_;
  slot_ = sizeof(float) + chunk_ / 8;
  // assign keeps the capacity: a count no larger than a former one allocates nothing.
  m_.assign(padded_, 0.0f);
  workerError_.assign(padded_, 0.0f);
  combined_.assign(chunk_, 0.0f);
  serverError_.assign(chunk_, 0.0f);
  send_.assign((size_t)nranks_ * slot_, 0);
  recv_.assign((size_t)nranks_ * slot_, 0);
}

void OnebitBaseline::resetErrors() {
  std::fill(workerError_.begin(), workerError_.end(), 0.0f);
  std::fill(serverError_.begin(), serverError_.end(), 0.0f);
}

ncclResult_t OnebitBaseline::exchangeWithPeers(const std::function<const uint8_t*(int)>& sendOf, size_t bytes) {
  const int n = nranks_;
  const ncclNet_v11_t& api = net_->api();
  std::fill(sendReqs_.begin(), sendReqs_.end(), nullptr);
  std::fill(recvReqs_.begin(), recvReqs_.end(), nullptr);
  int left = 2 * (n - 1);
  int posted = 0;  // sends and receives posted so far, in pairwise order
  const int64_t deadline = nowMs() + timeoutMs_;
  while (left > 0) {
    bool moved = false;
    // Post in pairwise order: step k receives from rank - k, sends to rank + k.
    while (posted < 2 * (n - 1)) {
      const int k = posted / 2 + 1;
      const bool isSend = posted % 2 == 1;
      const int peer = isSend ? (rank_ + k) % n : (rank_ - k + n) % n;
      void* req = nullptr;
      if (isSend) {
        NCCLCHECK(api.isend(sendComms_[peer], const_cast<uint8_t*>(sendOf(peer)), bytes, 0, nullptr, nullptr, &req));
      } else {
        void* data = recv_.data() + (size_t)peer * slot_;
        size_t size = bytes;
        int tag = 0;
        void* mh = nullptr;
        NCCLCHECK(api.irecv(recvComms_[peer], 1, &data, &size, &tag, &mh, nullptr, &req));
      }
      if (req == nullptr) break;  // retried on the next pass
      (isSend ? sendReqs_ : recvReqs_)[peer] = req;
      if (isSend) payloadSent_ += bytes;
      posted++;
      moved = true;
    }
    for (int isSend = 0; isSend < 2; isSend++) {
      std::vector<void*>& reqs = isSend ? sendReqs_ : recvReqs_;
      for (int p = 0; p < n; p++) {
        if (reqs[p] == nullptr) continue;
        int done = 0, got = 0;
        NCCLCHECK(api.test(reqs[p], &done, &got));
        if (!done) continue;
        reqs[p] = nullptr;
        left--;
        moved = true;
        if (!isSend && (size_t)got != bytes) {
          WARN("OnebitBaseline: rank %d: %d bytes from rank %d where %zu were due", rank_, got, p, bytes);
          return ncclRemoteError;
        }
      }
    }
    if (left > 0 && !moved) {
      if (nowMs() > deadline) {
        WARN("OnebitBaseline: rank %d: %d transfers not done after %d ms", rank_, left, timeoutMs_);
        return ncclRemoteError;
      }
      waitOn_.clear();
      for (int p = 0; p < n; p++) {
        if (sendReqs_[p] != nullptr) waitOn_.push_back(sendComms_[p]);
        if (recvReqs_[p] != nullptr) waitOn_.push_back(recvComms_[p]);
      }
      if (!waitOn_.empty()) net_->waitAny(waitOn_.data(), waitOn_.size(), 1);
    }
  }
  return ncclSuccess;
}

ncclResult_t OnebitBaseline::allReduce(const float* in, float* out, size_t count) {
  if (count == 0) return ncclSuccess;
  if (in == nullptr || out == nullptr) {
    WARN("OnebitBaseline::allReduce: %s is NULL with count %zu", in == nullptr ? "in" : "out", count);
    return ncclInvalidArgument;
  }
  if (count != count_) resize(count);
  const int n = nranks_;
  // 1. The worker's compensated tensor, its scale and error.
  // (One pass: the sum behind the scale is taken as m is written.)
  // in may be out, never m_ or workerError_: restrict lets the loops vectorize.
  OnebitSquares workerSquares;
  const size_t whole = count / 8 * 8;
  {
    const float* __restrict x = in;
    const float* __restrict e = workerError_.data();
    float* __restrict m = m_.data();
    for (size_t i = 0; i < whole; i += 8) {
      for (int l = 0; l < 8; l++) m[i + l] = x[i + l] + e[i + l];
      workerSquares.add8(m + i);
    }
    for (size_t i = whole; i < padded_; i += 8) {
      for (size_t l = 0; l < 8; l++) m[i + l] = (i + l < count ? x[i + l] : 0.0f) + e[i + l];
      workerSquares.add8(m + i);
    }
  }
  const float scale = workerSquares.scale(padded_);
  // 2. Chunk j's signs and the scale, for rank j (this rank's own stays here).
  for (int j = 0; j < n; j++) {
    uint8_t* msg = send_.data() + (size_t)j * slot_;
    memcpy(msg, &scale, sizeof(float));
    const size_t at = (size_t)j * chunk_;
    errorAndSigns(m_.data() + at, chunk_, scale, workerError_.data() + at, msg + sizeof(float));
  }
  memcpy(recv_.data() + (size_t)rank_ * slot_, send_.data() + (size_t)rank_ * slot_, slot_);
  if (n > 1) NCCLCHECK(exchangeWithPeers([&](int p) { return send_.data() + (size_t)p * slot_; }, slot_));
  // 3. The owner combines its chunk's N scaled signs, in rank order.
  std::fill(combined_.begin(), combined_.end(), 0.0f);
  for (int r = 0; r < n; r++) {
    const uint8_t* msg = recv_.data() + (size_t)r * slot_;
    float s;
    memcpy(&s, msg, sizeof(float));
    addScaledSigns(msg + sizeof(float), chunk_, s * (1.0f / (float)n), combined_.data());
  }
  OnebitSquares ownerSquares;
  {
    float* __restrict c = combined_.data();
    const float* __restrict e = serverError_.data();
    for (size_t k = 0; k < chunk_; k += 8) {
      for (int l = 0; l < 8; l++) c[k + l] += e[k + l];
      ownerSquares.add8(c + k);
    }
  }
  const float ownerScale = ownerSquares.scale(chunk_);
  // 4. The owner's signs and scale to every rank (one message, sent N-1 times).
  uint8_t* mineOut = send_.data() + (size_t)rank_ * slot_;
  memcpy(mineOut, &ownerScale, sizeof(float));
  errorAndSigns(combined_.data(), chunk_, ownerScale, serverError_.data(), mineOut + sizeof(float));
  memcpy(recv_.data() + (size_t)rank_ * slot_, mineOut, slot_);
  if (n > 1) NCCLCHECK(exchangeWithPeers([&](int) { return mineOut; }, slot_));
  for (int j = 0; j < n; j++) {
    const uint8_t* msg = recv_.data() + (size_t)j * slot_;
    float s;
    memcpy(&s, msg, sizeof(float));
    const size_t begin = (size_t)j * chunk_;
    const size_t end = std::min(begin + chunk_, count);
    if (begin < end) scaledSigns(msg + sizeof(float), end - begin, s, out + begin);
  }
  return ncclSuccess;
}

}  // namespace perf
}  // namespace signlion
