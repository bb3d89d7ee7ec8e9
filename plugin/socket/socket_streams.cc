// Data streams (socket_comm.h): how a payload is dealt over them, and who
// moves its bytes: the caller's thread inside isend/irecv/test as far as
// the sockets take them at once, the comm's helper threads the rest.
#include "socket/socket_comm.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <thread>

#include "common/checks.h"
#include "common/clock.h"

namespace signlion {
namespace net {
namespace sock {

namespace {

// Moves bytes of task t on stream st until it is done, the socket would
// block or `budget` bytes moved. Returns bytes moved; -1 on error (recorded in
// the comm).
ssize_t progressTask(Comm* c, Stream* st, StreamTask* t, size_t budget, bool* taskDone) {
  ssize_t moved = 0;
  *taskDone = false;
  while (t->nextChunk * t->chunk < t->size) {
    if ((size_t)moved >= budget) return moved;
    // A failed comm's buffers may be gone (cancelForDeregistration): not
    // one more call on them once the error is seen.
    if (c->error.load(std::memory_order_relaxed) != ncclSuccess) return -1;
    size_t begin = t->nextChunk * t->chunk;
    size_t len = std::min(t->chunk, t->size - begin);
    char* p = t->buf + begin + t->off;
    size_t want = len - t->off;
    ssize_t r = c->isSend ? send(st->fd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(st->fd, p, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moved;
    if (r <= 0) {
      if (c->isSend)
        sendFailed(c, errno, "send on data stream");
      else
        setSysError(c, r == 0 ? 0 : errno, "recv on data stream");
      return -1;
    }
    moved += r;
    t->off += (size_t)r;
    if (t->off == len) {
      t->off = 0;
      t->nextChunk += t->step;
    }
  }
  *taskDone = true;
  return moved;
}

// Moves stream st's tasks, front first, until the socket would block or the
// queue is empty. A helper waits for ioMu; the caller's thread only tries it
// (a helper busy on the stream is progress already) and moves at most one
// chunk per stream per call, so one test() never runs long, however fast the
// peer sends. Returns true if bytes moved or a task completed.
bool progressStream(Comm* c, Stream* st, bool byHelper) {
  std::unique_lock<std::mutex> io(st->ioMu, std::defer_lock);
  if (byHelper)
    io.lock();
  else if (!io.try_lock())
    return false;
  bool progress = false;
  size_t budget = byHelper ? SIZE_MAX : c->chunkSize;
  while (budget > 0 && c->error.load(std::memory_order_relaxed) == ncclSuccess &&
         !c->peerClosed.load(std::memory_order_relaxed)) {
    StreamTask* t;
    {
      std::lock_guard<std::mutex> q(st->qMu);
      if (st->tasks.empty()) break;
      t = &st->tasks.front();
    }
    bool done = false;
    ssize_t moved = progressTask(c, st, t, budget, &done);
    if (moved < 0) break;
    budget -= std::min(budget, (size_t)moved);
    if (moved > 0) {
      progress = true;
      (c->isSend ? c->bytesSent : c->bytesRecv).fetch_add((uint64_t)moved, std::memory_order_relaxed);
    }
    if (!done) break;
    Request* req = t->req;
    size_t bytes = t->share;
    {
      std::lock_guard<std::mutex> q(st->qMu);
      if (t->urgent) c->urgentTasks.fetch_sub(1, std::memory_order_release);
      st->tasks.pop_front();
      st->queued.fetch_sub(1, std::memory_order_release);
      c->queuedTasks.fetch_sub(1, std::memory_order_release);
    }
    req->pending.fetch_sub(bytes, std::memory_order_acq_rel);  // last touch of req
    if (byHelper) wakeCaller(c);                               // the caller may sleep in commWait
    progress = true;
  }
  if (progress) c->dataProgressMs.store(nowMs(), std::memory_order_relaxed);
  return progress;
}

}  // namespace

void callerProgressStreams(Comm* c) {
  if (c->queuedTasks.load(std::memory_order_acquire) == 0) return;  // small messages: no stream to visit
  c->callerVisitUs.store(nowUs(), std::memory_order_relaxed);
  for (Stream& st : c->streams)
    if (st.queued.load(std::memory_order_acquire) > 0) progressStream(c, &st, false);
}

namespace {

// Hands the streams the caller could not finish to their helpers.
void wakeHelpers(Comm* c) {
  for (auto& h : c->helpers) {
    bool busy = false;
    for (int s : h->streams) busy |= c->streams[s].queued.load(std::memory_order_acquire) > 0;
    if (!busy) continue;
    { std::lock_guard<std::mutex> lk(h->mu); }  // a helper between its check and its wait sees the task
    h->cv.notify_one();
  }
}

void helperLoop(Comm* c, Helper* h) {
  std::vector<pollfd> pfds;
  std::vector<int> which;
  int64_t lastProgress = nowMs();
  int64_t backoffUs = 0;  // the next wait of a helper leaving its streams to the caller
  auto busy = [&] {
    if (c->error.load(std::memory_order_relaxed) != ncclSuccess || c->peerClosed.load(std::memory_order_relaxed))
      return false;
    for (int s : h->streams)
      if (c->streams[s].queued.load(std::memory_order_acquire) > 0) return true;
    return false;
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(h->mu);
      if (!h->stop && !busy()) {
        h->cv.wait_for(lk, std::chrono::milliseconds(kPollMs), [&] { return h->stop || busy(); });
        lastProgress = nowMs();  // idle time is not a stall
      }
      if (h->stop) return;
      if (!busy()) {
        backoffUs = 0;
        continue;
      }
    }
    // Payloads up to kCallerOnlyMax are the caller's while it keeps visiting
    // the streams; a helper takes over kCallerGraceUs after its last visit,
    // or once no byte moved for SIGNLION_SOCKET_TIMEOUT (then its poll below
    // finds the stall, which a caller that only tests would never report).
    if (c->urgentTasks.load(std::memory_order_acquire) == 0 &&
        nowMs() - c->dataProgressMs.load(std::memory_order_relaxed) <= socketTimeoutMs()) {
      int64_t idleUs = nowUs() - c->callerVisitUs.load(std::memory_order_relaxed);
      if (idleUs < kCallerGraceUs) {
        std::unique_lock<std::mutex> lk(h->mu);
        h->cv.wait_for(lk, std::chrono::microseconds(std::max(kCallerGraceUs - idleUs, backoffUs)),
                       [&] { return h->stop || c->urgentTasks.load(std::memory_order_acquire) > 0; });
        backoffUs = std::min(std::max(2 * backoffUs, kCallerGraceUs), kCallerGraceMaxUs);
        continue;
      }
    }
    backoffUs = 0;
    pfds.clear();
    which.clear();
    for (int s : h->streams) {
      if (c->streams[s].queued.load(std::memory_order_acquire) == 0) continue;
      // A sender also watches for the peer's bye (or reset) against the data.
      pfds.push_back({c->streams[s].fd, (short)(c->isSend ? POLLOUT | POLLIN : POLLIN), 0});
      which.push_back(s);
    }
    if (pfds.empty()) continue;
    int r = poll(pfds.data(), pfds.size(), kPollMs);
    if (r < 0 && errno != EINTR) {
      setSysError(c, errno, "poll");
      continue;
    }
    bool progress = false;
    for (size_t i = 0; r > 0 && i < pfds.size(); i++) {
      if (c->isSend && (pfds[i].revents & POLLIN) && peerSaidBye(c)) break;
      if (pfds[i].revents != 0) progress |= progressStream(c, &c->streams[which[i]], true);
    }
    int64_t now = nowMs();
    if (progress) {
      lastProgress = now;
    } else if (now - std::max(lastProgress, c->dataProgressMs.load(std::memory_order_relaxed)) > socketTimeoutMs() &&
               busy() && !(c->isSend && peerSaidBye(c))) {
      setError(c, ncclRemoteError, "no progress on a data stream within SIGNLION_SOCKET_TIMEOUT");
    }
  }
}

}  // namespace

// The caller moves what the sockets take at once; helpers are woken for the rest.
void enqueueStreams(Comm* c, uint64_t seq, char* buf, size_t size, Request* req) {
  size_t nchunks = (size + c->chunkSize - 1) / c->chunkSize;
  if (nchunks == 0) return;
  const bool urgent = size > kCallerOnlyMax;
  size_t n = (size_t)c->nsocks;
  size_t start = seq % n;
  for (size_t s = 0; s < n; s++) {
    size_t first = (s + n - start) % n;  // first chunk index carried by stream s
    if (first >= nchunks) continue;
    size_t share = 0;
    for (size_t k = first; k < nchunks; k += n) share += std::min(c->chunkSize, size - k * c->chunkSize);
    Stream& st = c->streams[s];
    std::lock_guard<std::mutex> q(st.qMu);
    bool queued = st.tasks.push_back({buf, size, c->chunkSize, first, n, 0, share, req, urgent});
    if (!queued) {  // cannot happen: the request table bounds the tasks
      setError(c, ncclInternalError, "stream task queue overflow");
      return;
    }
    if (urgent) c->urgentTasks.fetch_add(1, std::memory_order_release);
    st.queued.fetch_add(1, std::memory_order_release);
    c->queuedTasks.fetch_add(1, std::memory_order_release);
  }
  callerProgressStreams(c);
  // A medium message is left to the caller, whose test() calls (and
  // commWait, which polls the streams with queued tasks) finish it: a helper
  // moving it at once cost a thread hand-off per message and helpers racing
  // the caller for two cores, 256 KiB ping-pong 1.45x the plain socket
  // instead of 1.1-1.2x. The helpers are still told: one takes over
  // kCallerGraceUs after the caller's last visit, so a caller that waits
  // elsewhere (on the reply's receive, say) costs that much, not an idle
  // helper's kPollMs (a 256 KiB ping-pong took 24 ms instead of 1.1 ms).
  if (urgent || c->queuedTasks.load(std::memory_order_acquire) > 0) wakeHelpers(c);
}

ncclResult_t startHelpers(Comm* c, int nthreads) {
  nthreads = std::max(1, std::min(nthreads, c->nsocks));
  for (int t = 0; t < nthreads; t++) c->helpers.emplace_back(new Helper());
  for (int s = 0; s < c->nsocks; s++) c->helpers[s % nthreads]->streams.push_back(s);
  for (auto& h : c->helpers) {
    try {
      h->thread = std::thread(helperLoop, c, h.get());
    } catch (const std::exception& e) {
      WARN("NET/signlion: cannot start helper thread: %s", e.what());
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

bool dropStreamTasks(Comm* c, int64_t limitMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limitMs);
  bool all = true;
  for (Stream& st : c->streams) {
    // A helper holds ioMu for its send/recv calls on a non-blocking socket,
    // which end at once on a failed comm (progressTask): polled, not a timed
    // lock, which ThreadSanitizer cannot follow (pthread_mutex_clocklock).
    std::unique_lock<std::mutex> io(st.ioMu, std::try_to_lock);
    while (!io.owns_lock() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      io.try_lock();
    }
    if (!io.owns_lock()) {
      all = false;
      continue;
    }
    std::lock_guard<std::mutex> q(st.qMu);
    while (!st.tasks.empty()) {
      StreamTask& t = st.tasks.front();
      t.req->pending.fetch_sub(t.share, std::memory_order_acq_rel);
      if (t.urgent) c->urgentTasks.fetch_sub(1, std::memory_order_release);
      st.tasks.pop_front();
      st.queued.fetch_sub(1, std::memory_order_release);
      c->queuedTasks.fetch_sub(1, std::memory_order_release);
    }
  }
  return all;
}

}  // namespace sock
}  // namespace net
}  // namespace signlion
