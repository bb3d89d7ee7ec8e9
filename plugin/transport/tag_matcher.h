// Receive matching, transport-independent: which posted receive slot a
// message from the peer lands in. A transport (socket today, UCX later)
// feeds it the receives as they are posted and the messages as they arrive
// (in the order the sender posted them) and moves the bytes itself.
//
// The rule (ncclNet's, and MPI's for one source):
//   - a message goes to the oldest posted receive (single or grouped) that
//     has an open slot holding its tag; within a grouped receive, to the
//     first such slot;
//   - messages with the same tag fill those slots in the order the sender
//     posted them;
//   - a message no open slot holds is kept, and the next receive posted with
//     a slot for its tag claims it (the oldest kept message of that tag first).
// Tags of different receives may interleave freely: matching never looks at
// the oldest receive only.
//
// Both tables are fixed arrays (a comm has at most kMaxPosted receives
// outstanding; kept messages are bounded by kMaxKept, the transport stops
// reading from the peer while the table is full), so a warm comm never
// allocates. Not thread-safe: one thread (the caller's, inside
// irecv/test) drives a comm's matching.
#pragma once

#include <cstddef>
#include <cstdint>

namespace signlion {
namespace net {

// Recv: the transport's receive request; Msg: what it keeps about a message
// (size, where its payload waits, ...).
template <typename Recv, typename Msg, size_t kMaxPosted, size_t kMaxKept, int kMaxSlots>
class TagMatcher {
  static_assert(kMaxSlots <= 32, "open slots are a 32-bit mask");

 public:
  // A kept message: unclaimed (recv == nullptr) or claimed by slot `slot`
  // of `recv` and still held by the transport (e.g. its payload is not
  // delivered yet, or must wait for older messages: see keep()).
  struct Kept {
    int tag;
    Recv* recv;
    int slot;
    Msg msg;
  };

  bool postedFull() const { return nposted_ == kMaxPosted; }
  bool keptFull() const { return nkept_ == kMaxKept; }
  size_t keptCount() const { return nkept_; }
  bool anyPosted() const { return nposted_ > 0; }
  // Kept messages, oldest first (index 0 arrived first).
  Kept& kept(size_t i) { return kept_[i]; }

  // Posts receive r with n slots of the given tags. Each slot first claims
  // the oldest unclaimed kept message with its tag (onClaim(kept) is called
  // for each, the kept entry's recv/slot already set, in slot order); slots
  // left open wait for messages. Returns false when kMaxPosted receives are
  // already open (the caller's request table prevents it).
  template <typename OnClaim>
  bool post(Recv* r, int n, const int* tags, OnClaim&& onClaim) {
    uint32_t open = 0;
    for (int i = 0; i < n; i++) {
      Kept* k = oldestUnclaimed(tags[i]);
      if (k == nullptr) {
        open |= 1u << i;
        continue;
      }
      k->recv = r;
      k->slot = i;
      onClaim(*k);
    }
    if (open == 0) return true;
    if (postedFull()) return false;
    Posted& p = posted_[nposted_++];
    p.recv = r;
    p.open = open;
    for (int i = 0; i < n; i++) p.tags[i] = tags[i];
    return true;
  }

  // A message with `tag` arrived: the oldest posted receive with an open
  // slot of that tag claims it (the slot closes). Returns false when none
  // holds it: the transport keeps the message with keep().
  bool claim(int tag, Recv** r, int* slot) {
    for (size_t p = 0; p < nposted_; p++) {
      uint32_t open = posted_[p].open;
      for (int i = 0; open != 0; i++, open >>= 1) {
        if ((open & 1) == 0 || posted_[p].tags[i] != tag) continue;
        *r = posted_[p].recv;
        *slot = i;
        posted_[p].open &= ~(1u << i);
        if (posted_[p].open == 0) erasePosted(p);
        return true;
      }
    }
    return false;
  }

  // Keeps a message: unclaimed (r == nullptr), or claimed but not finished
  // by the transport yet. Returns nullptr when kMaxKept are kept (the
  // transport leaves the message unread until some are released).
  Kept* keep(int tag, const Msg& msg, Recv* r = nullptr, int slot = -1) {
    if (keptFull()) return nullptr;
    Kept& k = kept_[nkept_++];
    k.tag = tag;
    k.recv = r;
    k.slot = slot;
    k.msg = msg;
    return &k;
  }
  // Forgets kept message i (delivered or dropped); later ones move up.
  void release(size_t i) {
    // nkept_ never passes kMaxKept (keep() refuses); saying so here lets the
    // compiler see the loop stays inside kept_ (gcc's -Warray-bounds did not).
    const size_t n = nkept_ < kMaxKept ? nkept_ : kMaxKept;
    for (size_t j = i + 1; j < n; j++) kept_[j - 1] = kept_[j];
    nkept_--;
  }

 private:
  struct Posted {
    Recv* recv;
    uint32_t open;  // bit i: slot i still waits for a message
    int tags[kMaxSlots];
  };

  Kept* oldestUnclaimed(int tag) {
    for (size_t i = 0; i < nkept_; i++)
      if (kept_[i].recv == nullptr && kept_[i].tag == tag) return &kept_[i];
    return nullptr;
  }
  void erasePosted(size_t p) {
    for (size_t j = p + 1; j < nposted_; j++) posted_[j - 1] = posted_[j];
    nposted_--;
  }

  Posted posted_[kMaxPosted];
  size_t nposted_ = 0;
  Kept kept_[kMaxKept];
  size_t nkept_ = 0;
};

}  // namespace net
}  // namespace signlion
