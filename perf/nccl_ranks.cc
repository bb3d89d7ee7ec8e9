#include "nccl_ranks.h"

#include <cuda_runtime_api.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

namespace signlion {
namespace perf {

namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool writeAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t k = write(fd, p, bytes);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    bytes -= (size_t)k;
  }
  return true;
}

bool readAll(int fd, void* data, size_t bytes, int timeoutMs) {
  char* p = static_cast<char*>(data);
  for (int64_t end = nowMs() + timeoutMs; bytes > 0;) {
    pollfd pf{fd, POLLIN, 0};
    int left = (int)(end - nowMs());
    if (left <= 0 || poll(&pf, 1, left) != 1) return false;
    ssize_t k = read(fd, p, bytes);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    bytes -= (size_t)k;
  }
  return true;
}

// Waits for pid until the deadline, then kills it. The exit code, 128 +
// signal, or -1 when it had to be killed.
int reap(pid_t pid, int64_t deadlineMs) {
  int status = 0;
  while (nowMs() < deadlineMs) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (got < 0 && errno != EINTR) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// One rank, in its child process. idIn: where rank r > 0 reads the id;
// idOut: where rank 0 writes it, once per other rank.
int rankMain(const NcclRanksOptions& o, int rank, int idIn, const std::vector<int>& idOut,
             const std::function<int(int, int, ncclComm_t)>& body) {
  if (o.devices < o.nranks) {
    std::string host = o.hostIdPrefix + "-" + std::to_string(rank);
    setenv("NCCL_HOSTID", host.c_str(), 1);
  }
  if (!o.netPlugin.empty()) setenv("NCCL_NET_PLUGIN", o.netPlugin.c_str(), 1);
  cudaError_t err = cudaSetDevice(rank % o.devices);
  if (err != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaSetDevice(%d): %s\n", rank, rank % o.devices, cudaGetErrorString(err));
    return 3;
  }
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) {
      fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetErrorString(res));
      return 3;
    }
    for (int fd : idOut)
      if (!writeAll(fd, &id, sizeof(id))) return 3;
  } else if (!readAll(idIn, &id, sizeof(id), o.timeoutSec * 1000)) {
    fprintf(stderr, "rank %d: no ncclUniqueId from rank 0\n", rank);
    return 3;
  }
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, o.nranks, id, rank);
  if (res != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(res));
    return 3;
  }
  int rc = body(rank, o.nranks, comm);
  ncclCommDestroy(comm);
  return rc;
}

}  // namespace

int probeCudaDevices(std::string* why) {
  int p[2];
  if (pipe(p) != 0) {
    *why = std::string("pipe: ") + strerror(errno);
    return 0;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    char msg[256];
    snprintf(msg, sizeof(msg), "%d %s", err == cudaSuccess ? n : 0,
             err == cudaSuccess ? (n ? "" : "no CUDA device") : cudaGetErrorString(err));
    _exit(writeAll(p[1], msg, strlen(msg) + 1) ? 0 : 1);
  }
  close(p[1]);
  char msg[256] = {0};
  size_t got = 0;
  while (pid > 0 && got < sizeof(msg) - 1) {
    ssize_t k = read(p[0], msg + got, sizeof(msg) - 1 - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(p[0]);
  if (pid > 0) reap(pid, nowMs() + 60000);
  int n = 0, used = 0;
  if (pid < 0 || sscanf(msg, "%d %n", &n, &used) < 1) {
    *why = "the CUDA probe process failed";
    return 0;
  }
  *why = msg + used;
  return n;
}

std::vector<int> runNcclRanks(const NcclRanksOptions& o,
                              const std::function<int(int rank, int nranks, ncclComm_t comm)>& body) {
  // One pipe per rank > 0; rank 0 holds every write end.
  std::vector<int> readFd(o.nranks, -1), writeFd(o.nranks, -1);
  for (int r = 1; r < o.nranks; r++) {
    int p[2];
    if (pipe(p) != 0) return std::vector<int>(o.nranks, 3);
    readFd[r] = p[0];
    writeFd[r] = p[1];
  }
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<int> out;
      for (int q = 1; q < o.nranks; q++) {
        if (r == 0)
          out.push_back(writeFd[q]);
        else
          close(writeFd[q]);
        if (q != r) close(readFd[q]);
      }
      int rc = rankMain(o, r, r > 0 ? readFd[r] : -1, out, body);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  for (int r = 1; r < o.nranks; r++) {
    close(readFd[r]);
    close(writeFd[r]);
  }
  // A rank that fails leaves the others blocked in NCCL: give them a few
  // seconds to fail on their own, then kill them.
  constexpr int64_t kGraceMs = 10000;
  std::vector<int> codes(o.nranks, 3);
  std::vector<bool> done(o.nranks, false);
  int64_t killAt = nowMs() + (int64_t)o.timeoutSec * 1000;
  for (int left = o.nranks; left > 0;) {
    for (int r = 0; r < o.nranks; r++) {
      if (done[r]) continue;
      int status = 0;
      if (pids[r] > 0 && waitpid(pids[r], &status, WNOHANG) != pids[r]) {
        if (nowMs() < killAt) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        codes[r] = -1;
      } else if (pids[r] > 0) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      done[r] = true;
      left--;
      if (codes[r] != 0) killAt = std::min(killAt, nowMs() + kGraceMs);
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

}  // namespace perf
}  // namespace signlion
