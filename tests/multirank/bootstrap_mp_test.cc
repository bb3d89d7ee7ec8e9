// The bootstrap across processes on loopback: the test process is the root,
// forked children are the ranks (forked before any thread exists; the id
// reaches them through a pipe, as a launcher would share it).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "common/param.h"
#include "host/bootstrap.h"

namespace signlion {
namespace host {
namespace {

constexpr int kRanks = 3;
constexpr int kTimeoutMs = 10000;

// Child exit codes.
enum : int { kOk = 0, kNoId = 10, kCreateFailed = 11, kGatherFailed = 12, kWrongBytes = 13, kBarrier = 14 };

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint8_t pattern(int rank, size_t i, size_t bytes) { return (uint8_t)(rank * 29 + i * 3 + (i >> 9) + bytes); }

enum class Ending { kBarrier, kLastRankDies };

// One rank's life in a child process; returns its exit code.
int rankMain(int idFd, int rank, Ending ending) {
  ncclSignUniqueId id;
  size_t got = 0;
  for (int64_t end = nowMs() + kTimeoutMs; got < sizeof(id) && nowMs() < end;) {
    pollfd p{idFd, POLLIN, 0};
    if (poll(&p, 1, 100) != 1) continue;
    ssize_t k = read(idFd, (char*)&id + got, sizeof(id) - got);
    if (k <= 0) return kNoId;
    got += (size_t)k;
  }
  if (got < sizeof(id)) return kNoId;
  std::unique_ptr<Bootstrap> b;
  if (Bootstrap::create(id, rank, kRanks, kTimeoutMs, &b) != ncclSuccess) return kCreateFailed;
  for (size_t bytes : {size_t(1), size_t(100), size_t(64 << 10)}) {
    std::vector<uint8_t> buf(bytes * kRanks, 0xEE);
    for (size_t i = 0; i < bytes; i++) buf[rank * bytes + i] = pattern(rank, i, bytes);
    if (b->allGather(buf.data(), bytes) != ncclSuccess) return kGatherFailed;
    for (int s = 0; s < kRanks; s++)
      for (size_t i = 0; i < bytes; i++)
        if (buf[s * bytes + i] != pattern(s, i, bytes)) return kWrongBytes;
  }
  if (ending == Ending::kLastRankDies) {
    if (rank == kRanks - 1) raise(SIGKILL);
    // The survivors' barrier must fail (not hang) once a rank is gone.
    return b->barrier() == ncclSuccess ? kBarrier : kOk;
  }
  return b->barrier() == ncclSuccess ? kOk : kBarrier;
}

// Waits for pid at most limitMs; kills it if still running. Returns the exit
// code, 128 + signal, or -1 when it had to be killed.
int reap(pid_t pid, int64_t limitMs) {
  int status = 0;
  for (int64_t end = nowMs() + limitMs; nowMs() < end;) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// Forks the ranks, starts the root, hands out the id; returns each rank's exit code.
std::vector<int> runRanks(Ending ending) {
  setenv("SIGNLION_SOCKET_IFNAME", "lo", 1);
  paramResetCache();
  std::vector<pid_t> pids;
  std::vector<int> writeFds;
  for (int r = 0; r < kRanks; r++) {
    int p[2];
    if (pipe(p) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[1]);
      for (int w : writeFds) close(w);
      _exit(rankMain(p[0], r, ending));
    }
    close(p[0]);
    if (pid < 0) {
      close(p[1]);
      break;
    }
    pids.push_back(pid);
    writeFds.push_back(p[1]);
  }
  ncclSignUniqueId id;
  bool made = (int)pids.size() == kRanks && bootstrapCreateRoot(&id, kTimeoutMs) == ncclSuccess;
  for (int w : writeFds) {
    if (made && write(w, &id, sizeof(id)) != (ssize_t)sizeof(id)) made = false;
    close(w);  // without an id the child gives up at once
  }
  EXPECT_TRUE(made);
  std::vector<int> codes;
  for (pid_t pid : pids) codes.push_back(reap(pid, 2 * kTimeoutMs));
  for (int64_t end = nowMs() + 5000; bootstrapRootsRunning() > 0 && nowMs() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(bootstrapRootsRunning(), 0);
  return codes;
}

TEST(BootstrapMultiProcess, ThreeProcessesGatherAndBarrier) {
  std::vector<int> codes = runRanks(Ending::kBarrier);
  ASSERT_EQ((int)codes.size(), kRanks);
  for (int r = 0; r < kRanks; r++) EXPECT_EQ(codes[r], kOk) << "rank " << r;
}

TEST(BootstrapMultiProcess, KilledRankMakesTheOthersFailFast) {
  int64_t t0 = nowMs();
  std::vector<int> codes = runRanks(Ending::kLastRankDies);
  ASSERT_EQ((int)codes.size(), kRanks);
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
  EXPECT_LT(nowMs() - t0, kTimeoutMs / 2);  // a closed link, not the timeout
}

}  // namespace
}  // namespace host
}  // namespace signlion
