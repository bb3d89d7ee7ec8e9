// NCCL's communication played by ranks as threads, for tests of the NCCL
// executor without NCCL: point-to-point messages matched in posting order
// per (sender, receiver), as NCCL matches a peer's operations in a group,
// and collectives over a barrier.
//
// Every call takes the caller's lock on mutex(), held, and may wait on it: a
// test can hold it for a rank's whole run (one rank runs at a time, as the
// SIMT emulator needs) or only around each call.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace signlion {
namespace test {

class FakeFabric {
 public:
  using Lock = std::unique_lock<std::mutex>;
  explicit FakeFabric(int nranks) : n_(nranks), mail_(nranks * nranks), slots_(nranks), posted_(nranks, 0) {}

  int size() const { return n_; }
  std::mutex& mutex() { return mu_; }

  // A buffered send: the bytes are copied now (the first set to 0xff when
  // the message has corruptSize bytes).
  void post(Lock& held, int from, int to, const void* data, size_t bytes);
  // Tests of corrupt peer data: messages of `bytes` bytes (0: none) are
  // delivered with their first byte 0xff. Set before the ranks run.
  void corruptSize(size_t bytes) { corruptSize_ = bytes; }
  // The next message from `from` to `to`, once it is there. Counts a
  // mismatch (see mismatches()) when its size is not `bytes`.
  void take(Lock& held, int from, int to, void* data, size_t bytes);
  // recv: nranks blocks of `bytes`, rank r's at r * bytes; send may be this
  // rank's block of recv.
  void allGather(Lock& held, int rank, const void* send, void* recv, size_t bytes);
  void allReduceSum(Lock& held, int rank, const uint64_t* send, uint64_t* recv, size_t words);
  // ncclCommSplit's grouping, collective: the ranks that pass this color,
  // ordered by (key, rank) (*members, in fabric ranks), and this rank's
  // index among them.
  void split(Lock& held, int rank, int color, int key, std::vector<int>* members, int* index);

  // After the ranks are done: every message was taken, and with its size.
  bool drained() const;
  int mismatches() const { return mismatches_; }
  // Bytes rank `from` has posted point to point (what NCCL would send for
  // it), since construction; after the ranks are done.
  uint64_t bytesPosted(int from) const { return posted_[from]; }

 private:
  void barrier(Lock& held);

  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::vector<char>>> mail_;  // [from * n + to]
  std::vector<std::vector<char>> slots_;             // collectives: one per rank
  int arrived_ = 0;
  uint64_t generation_ = 0;
  int mismatches_ = 0;
  std::vector<uint64_t> posted_;  // per sender
  size_t corruptSize_ = 0;
};

}  // namespace test
}  // namespace signlion
