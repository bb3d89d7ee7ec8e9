#include "common/fake_fabric.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace signlion {
namespace test {

void FakeFabric::post(Lock&, int from, int to, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  mail_[from * n_ + to].emplace_back(p, p + bytes);
  posted_[from] += bytes;
  if (bytes != 0 && bytes == corruptSize_) mail_[from * n_ + to].back()[0] = static_cast<char>(0xff);
  cv_.notify_all();
}

void FakeFabric::take(Lock& held, int from, int to, void* data, size_t bytes) {
  auto& box = mail_[from * n_ + to];
  cv_.wait(held, [&] { return !box.empty(); });
  if (box.front().size() != bytes) mismatches_++;
  memcpy(data, box.front().data(), std::min(bytes, box.front().size()));
  box.pop_front();
}

void FakeFabric::barrier(Lock& held) {
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    generation_++;
    cv_.notify_all();
  } else {
    cv_.wait(held, [&] { return generation_ != gen; });
  }
}

void FakeFabric::allGather(Lock& held, int rank, const void* send, void* recv, size_t bytes) {
  slots_[rank].assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
  barrier(held);
  for (int r = 0; r < n_; r++) memcpy(static_cast<char*>(recv) + r * bytes, slots_[r].data(), bytes);
  barrier(held);  // the slots are reused by the next collective
}

void FakeFabric::allReduceSum(Lock& held, int rank, const uint64_t* send, uint64_t* recv, size_t words) {
  slots_[rank].assign(reinterpret_cast<const char*>(send), reinterpret_cast<const char*>(send + words));
  barrier(held);
  std::vector<uint64_t> sum(words, 0);
  for (int r = 0; r < n_; r++) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(slots_[r].data());
    for (size_t i = 0; i < words; i++) sum[i] += w[i];
  }
  barrier(held);
  memcpy(recv, sum.data(), words * 8);
}

void FakeFabric::split(Lock& held, int rank, int color, int key, std::vector<int>* members, int* index) {
  const int64_t mine[2] = {color, key};
  std::vector<int64_t> all(2 * (size_t)n_);
  allGather(held, rank, mine, all.data(), sizeof(mine));
  std::vector<std::pair<int64_t, int>> same;  // (key, rank)
  for (int r = 0; r < n_; r++)
    if (all[2 * r] == color) same.push_back({all[2 * r + 1], r});
  std::sort(same.begin(), same.end());
  members->clear();
  for (const auto& m : same) {
    if (m.second == rank) *index = (int)members->size();
    members->push_back(m.second);
  }
}

bool FakeFabric::drained() const {
  for (const auto& box : mail_)
    if (!box.empty()) return false;
  return mismatches_ == 0;
}

}  // namespace test
}  // namespace signlion
