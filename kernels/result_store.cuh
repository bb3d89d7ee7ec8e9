// Writing results as the datatype: the majority's +1 / -1 / 0 from result
// planes (unpack, and the fused step), and count / N (average, and the fused
// step). Both store 16-byte vectors when dst is 16-byte aligned and elements
// otherwise (coalesced either way), and nothing at or past count.
#pragma once

#include <type_traits>

#include "kernels/launch.cuh"
#include "bits/float16.h"
#include "kernels/warp_layout.h"

namespace signlion {
namespace kernels {

// Elements of a warp's majority chunk: one result half-word per lane.
constexpr size_t kChunkElems = 32 * 32;

template <typename E>
SIGNLION_DEVICE void storeElem(char* dst, size_t e, uint32_t raw) {
  reinterpret_cast<typename E::Raw*>(dst)[e] = (typename E::Raw)raw;
}

// The V elements from e as one vector, or those below count one by one.
template <typename E>
SIGNLION_DEVICE void storeVector(char* dst, size_t e, size_t count, const uint32_t (&v)[4]) {
  if (e + E::kVec <= count) {
    uint4 x;
    x.x = v[0];
    x.y = v[1];
    x.z = v[2];
    x.w = v[3];
    *reinterpret_cast<uint4*>(dst + e * E::kBytes) = x;
    return;
  }
  for (int k = 0; e + k < count; k++) storeElem<E>(dst, e + k, E::get(v, k));
}

// The warp writes the majority result of the kChunkElems elements from
// `first`, whose result half-words the lanes hold (lane l: half-word l of the
// chunk; r0 = +1 plane, r1 = -1 plane when twoPlanes, else -1 = not +1).
// Warp-uniform. Each round a shuffle brings every lane the half-word that
// holds its elements, so the planes are read once, coalesced.
template <typename E>
SIGNLION_DEVICE void storeMajorityChunk(uint32_t r0, uint32_t r1, bool twoPlanes, size_t first, size_t count,
                                        char* dst, bool vec) {
  const int lane = (int)laneId();
  if (vec) {
    using S = LaneSlice<E::kVec>;
    // Round j: lane l writes vector 32j + l, bits [shift, shift + V) of the
    // chunk's half-word jV + word(l).
    for (int j = 0; j < S::kLanesPerWord; j++) {
      const int src = j * E::kVec + S::word(lane);
      const uint32_t pos = (warpShfl(r0, src) >> S::shift(lane)) & S::mask();
      const uint32_t neg = twoPlanes ? (warpShfl(r1, src) >> S::shift(lane)) & S::mask() : ~pos & S::mask();
      const size_t e = first + (size_t)(j * 32 + lane) * E::kVec;
      if (e < count) {
        uint32_t v[4];
        resultVector<E>(pos, neg, v);
        storeVector<E>(dst, e, count, v);
      }
    }
  } else {
    for (int j = 0; j < 32; j++) {
      const uint32_t pos = (warpShfl(r0, j) >> lane) & 1;
      const uint32_t neg = twoPlanes ? (warpShfl(r1, j) >> lane) & 1 : pos ^ 1;
      const size_t e = first + (size_t)j * 32 + lane;
      if (e < count) storeElem<E>(dst, e, pos ? E::kOne : neg ? E::kMinusOne : 0u);
    }
  }
}

// (float)sum / (float)nranks rounded once, then to the float datatype.
template <typename E>
SIGNLION_DEVICE uint32_t averageRaw(int sum, int nranks) {
  const float v = divide(intToFloat(sum), intToFloat(nranks));
  if constexpr (std::is_same<E, F32Traits>::value) {
    return floatRaw(v);
  } else if constexpr (std::is_same<E, F16Traits>::value) {
    return halfRaw(v);
  } else {
    static_assert(std::is_same<E, Bf16Traits>::value, "an average is written as fp32, fp16 or bf16");
    return bf16Raw(v);
  }
}

// Every thread of the grid writes averages of its share of [0, count):
// sums(e, s) fills s[k] with the vote sum of element e + k (s an int[N], N =
// V on the vector path, 1 for the elements after it or all of them when dst
// is not 16-byte aligned).
template <typename E, typename Sums>
SIGNLION_DEVICE void storeAverages(Sums sums, int nranks, size_t count, char* dst, bool vec) {
  constexpr int V = E::kVec;
  size_t first = 0;
  if (vec) {
    const size_t nvec = count / V;
    for (size_t i = globalThread(); i < nvec; i += threadCount()) {
      int s[V];
      sums(i * V, s);
      uint32_t v[4] = {0, 0, 0, 0};
      SIGNLION_UNROLL
      for (int k = 0; k < V; k++) E::put(v, k, averageRaw<E>(s[k], nranks));
      storeVector<E>(dst, i * V, count, v);
    }
    first = nvec * V;
  }
  for (size_t e = first + globalThread(); e < count; e += threadCount()) {
    int s[1];
    sums(e, s);
    storeElem<E>(dst, e, averageRaw<E>(s[0], nranks));
  }
}

// Counter planes a warp-chunk average keeps in registers, per counter: the
// sums the table below holds need at most 6.
constexpr int kAveragePlanes = 6;

// Adds kSign times the counts of V elements (bits [shift, shift + V) of the
// chunk's half-word src) to c, from the chunk's planes that the lanes hold
// (lane l: half-word l of each plane); planes at or past width are not read.
// P is added and M subtracted into one array, so that a lane keeps V sums,
// not 2V counts. Warp-uniform: every lane shuffles every plane.
template <int kSign, int V, int kPlanes>
SIGNLION_DEVICE void addChunkCounts(const uint32_t (&planes)[kPlanes], int width, int src, int shift, int (&c)[V]) {
  SIGNLION_UNROLL
  for (int q = 0; q < kPlanes; q++) {
    if (q >= width) break;
    const uint32_t b = warpShfl(planes[q], src) >> shift;
    SIGNLION_UNROLL
    for (int k = 0; k < V; k++) c[k] += kSign * ((int)((b >> k) & 1) << q);
  }
}

// The results of every sum a warp chunk's counters can make, indexed by P
// without M (sum 2P - N) and by P - M - low with M: at most 64 entries. The
// launcher fills it on the host with the CPU's arithmetic (the reference the
// kernels' own conversions are tested against, bit for bit) and passes it by
// value, so the kernel divides nothing (a division's slow path is a call,
// across which a warp chunk's planes would go to the stack).
struct AverageTableEntries {
  uint32_t e[64];
  int low;    // with M: the sum of entry 0
  bool wide;  // entries past 31 are used
};

// averageRaw<E> on the host: (float)sum / (float)nranks, rounded once to
// nearest even, then to the datatype as bits:: converts on the CPU.
template <typename E>
inline uint32_t averageRawOnHost(int sum, int nranks) {
  const float v = (float)sum / (float)nranks;
  if constexpr (std::is_same<E, F32Traits>::value) {
    return bits::floatBits(v);
  } else if constexpr (std::is_same<E, F16Traits>::value) {
    return bits::floatToHalf(v);
  } else {
    static_assert(std::is_same<E, Bf16Traits>::value, "an average is written as fp32, fp16 or bf16");
    return bits::floatToBf16(v);
  }
}

// The table for counters P (width wp) and, when ternary, M (width wm): false,
// and *t unset, when it cannot hold every sum they can make (P, M < 2^width).
template <typename E>
inline bool makeAverageTable(int wp, int wm, bool ternary, int nranks, AverageTableEntries* t) {
  if (wp > kAveragePlanes || (ternary && wm > kAveragePlanes)) return false;
  const int pMax = (1 << wp) - 1, low = ternary ? -((1 << wm) - 1) : 0;
  const int entries = ternary ? pMax - low + 1 : pMax + 1;
  if (entries > 64) return false;
  for (int i = 0; i < 64; i++) t->e[i] = averageRawOnHost<E>(ternary ? low + i : 2 * i - nranks, nranks);
  t->low = low;
  t->wide = entries > 32;
  return true;
}

// The table spread over a warp: entry i in register i / 32 of lane i % 32.
struct AverageTable {
  uint32_t lo, hi;
  int low;
  bool wide;
};

SIGNLION_DEVICE AverageTable spreadAverageTable(const AverageTableEntries& t) {
  const unsigned lane = laneId();
  AverageTable r{0, 0, t.low, t.wide};
  SIGNLION_UNROLL
  for (unsigned i = 0; i < 32; i++) {  // constant indices: the entries stay in the parameter space
    if (lane == i) {
      r.lo = t.e[i];
      r.hi = t.e[32 + i];
    }
  }
  return r;
}

// Entry i of the table (i < 64; < 32 unless wide): one shuffle, or two.
// Warp-uniform.
SIGNLION_DEVICE uint32_t lookupAverage(const AverageTable& t, int i) {
  const uint32_t lo = warpShfl(t.lo, i & 31);
  if (!t.wide) return lo;
  const uint32_t hi = warpShfl(t.hi, i & 31);
  return i < 32 ? lo : hi;
}

// The warp writes the averages of the kChunkElems elements from `first`, as
// storeAverages does, from the chunk's counter planes the lanes hold: P
// (width wp) and, when ternary, M (width wm), each <= kAveragePlanes; the
// results come from the table that makeAverageTable made for these counters.
// Warp-uniform. The planes are read once, coalesced,
// by the caller; shuffles bring each lane the bits of its elements, so every
// store of the warp is coalesced too.
template <typename E>
SIGNLION_DEVICE void storeAverageChunk(const uint32_t (&sp)[kAveragePlanes], int wp, const uint32_t (&sm)[kAveragePlanes],
                                       int wm, bool ternary, const AverageTable& table, size_t first,
                                       size_t count, char* dst, bool vec) {
  const int lane = (int)laneId();
  if (vec) {
    constexpr int V = E::kVec;
    using S = LaneSlice<V>;
    for (int j = 0; j < S::kLanesPerWord; j++) {
      const int src = j * V + S::word(lane);
      int d[V];  // P, or P - M - low: the table's index
      SIGNLION_UNROLL
      for (int k = 0; k < V; k++) d[k] = ternary ? -table.low : 0;
      addChunkCounts<1>(sp, wp, src, S::shift(lane), d);
      if (ternary) addChunkCounts<-1>(sm, wm, src, S::shift(lane), d);
      uint32_t v[4] = {0, 0, 0, 0};
      SIGNLION_UNROLL
      for (int k = 0; k < V; k++) E::put(v, k, lookupAverage(table, d[k]));
      const size_t e = first + (size_t)(j * 32 + lane) * V;
      if (e < count) storeVector<E>(dst, e, count, v);
    }
  } else {
    for (int j = 0; j < 32; j++) {
      int d[1] = {ternary ? -table.low : 0};
      addChunkCounts<1>(sp, wp, j, lane, d);
      if (ternary) addChunkCounts<-1>(sm, wm, j, lane, d);
      const uint32_t raw = lookupAverage(table, d[0]);
      const size_t e = first + (size_t)j * 32 + lane;
      if (e < count) storeElem<E>(dst, e, raw);
    }
  }
}

}  // namespace kernels
}  // namespace signlion
