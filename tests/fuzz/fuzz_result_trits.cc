// The decided result as a peer sends it, 5 elements per byte
// (src/bits/trits.h): a range's block count, then its coded bytes, decoded by
// every implementation the CPU has. They must agree on whether the bytes are
// malformed; bytes they accept must decode to what the format's reference
// reads (no element both +1 and -1) and code back to the same bytes.
#include <cstring>
#include <vector>

#include "bits/bits.h"
#include "bits/trits.h"
#include "fuzz_bytes.h"

using namespace signlion;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  fuzz::Bytes in(data, size);
  const size_t nblocks = in.take<uint8_t>() % 64;  // up to 12 groups and a tail
  std::vector<uint8_t> coded(bits::tritBytes(nblocks), 0);
  const size_t n = in.left() < coded.size() ? in.left() : coded.size();
  if (n > 0) memcpy(coded.data(), in.data(), n);

  std::vector<const bits::Kernels*> impls = {&bits::portableKernels()};
  if (bits::avx2Kernels() != nullptr) impls.push_back(bits::avx2Kernels());
  bool first = true, firstOk = false;
  for (const bits::Kernels* k : impls) {
    std::vector<uint64_t> pos(nblocks), neg(nblocks);
    const bool ok = k->decodeTrits(coded.data(), nblocks, pos.data(), neg.data());
    if (!first && ok != firstOk) __builtin_trap();  // the implementations disagree on malformed
    first = false;
    firstOk = ok;
    bool bad = false;
    for (size_t e = 0; e < nblocks * 64; e++) bad |= bits::tritReference(coded.data(), nblocks, e) == 2;
    if (ok == bad) __builtin_trap();  // the reference finds a malformed element iff decode does
    if (!ok) continue;
    for (size_t e = 0; e < nblocks * 64; e++) {
      const int p = (int)((pos[e / 64] >> (e % 64)) & 1), m = (int)((neg[e / 64] >> (e % 64)) & 1);
      if (p - m != bits::tritReference(coded.data(), nblocks, e) || (p & m)) __builtin_trap();
    }
    std::vector<uint8_t> again(coded.size());
    k->encodeTrits(pos.data(), neg.data(), nblocks, again.data());
    if (again != coded) __builtin_trap();
  }
  return 0;
}
