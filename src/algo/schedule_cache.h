// The schedules of a communicator's recent calls, so that a warm communicator
// builds none; shared by the host and the NCCL communicators.
//
// Keyed by what the caller asked for (requested algorithm, blocks, op and
// rules), not by what the cost model chose, so a hit costs no model
// evaluation. At most kCapacity entries, one per distinct message size: an
// optimizer with many buckets (parameter groups) must find every one warm.
// Beyond that the oldest entry is replaced. Not thread-safe: the owning
// communicator serializes its calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "algo/cost_model.h"
#include "algo/schedule.h"
#include "common/checks.h"

namespace signlion {
namespace algo {

struct NoExtra {};

// Extra: what an executor derives from a schedule and wants cached with it
// (the NCCL executor's plan).
template <class Extra = NoExtra>
class ScheduleCache {
 public:
  static constexpr size_t kCapacity = 64;

  struct Entry {
    Schedule schedule;
    Extra extra;
  };

  // The entry for these arguments: cached, or made now (chooseAlgorithm, then
  // buildSchedule, then finish(&entry) to fill `extra`; nothing is cached
  // when one of them fails). The pointer is valid until the next get() or
  // clear(): entries never move otherwise (the storage is reserved once).
  // `topo` (nullptr: unknown) must be the same for every get() of a cache.
  template <class Finish>
  ncclResult_t get(int nranks, int rank, int64_t nblocks, const OpSpec& spec, ncclSignAlgo_t requested,
                   unsigned available, const CostModel& model, Finish finish, const Entry** out,
                   const Topology* topo = nullptr) {
    for (const Slot& s : slots_) {
      if (s.requested == requested && s.nblocks == nblocks && s.spec.op == spec.op &&
          s.spec.zeroRule == spec.zeroRule && s.spec.tieRule == spec.tieRule) {
        *out = &s.entry;
        return ncclSuccess;
      }
    }
    ncclSignAlgo_t chosen;
    NCCLCHECK(chooseAlgorithm(nranks, static_cast<uint64_t>(nblocks) * kBlockElems, spec, available, requested, model,
                              &chosen, topo));
    Slot made{requested, nblocks, spec, {}};
    NCCLCHECK(buildSchedule(chosen, nranks, rank, nblocks, spec, &made.entry.schedule, topo));
    NCCLCHECK(finish(&made.entry));
    if (slots_.capacity() < kCapacity) slots_.reserve(kCapacity);
    Slot* slot;
    if (slots_.size() < kCapacity) {
      slots_.push_back(std::move(made));
      slot = &slots_.back();
    } else {
      slot = &slots_[nextEvict_++ % kCapacity];
      *slot = std::move(made);
    }
    *out = &slot->entry;
    return ncclSuccess;
  }

  void clear() {
    slots_.clear();
    nextEvict_ = 0;
  }
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    ncclSignAlgo_t requested;
    int64_t nblocks;
    OpSpec spec;
    Entry entry;
  };
  std::vector<Slot> slots_;
  size_t nextEvict_ = 0;
};

}  // namespace algo
}  // namespace signlion
