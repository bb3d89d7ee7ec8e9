// Datatype facts, the run-time choice of implementation, and the fused
// majority-to-datatype path.
#include "bits/bits.h"

#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <string>

#include "common/checks.h"
#include "common/debug.h"
#include "common/param.h"

SIGNLION_CHOICE_PARAM(BitsIsa, "BITS_ISA", "auto", "auto,portable,avx2")

namespace signlion {
namespace bits {

bool isVoteType(ncclDataType_t dt) {
  return dt == ncclFloat32 || dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclInt8;
}

size_t typeSize(ncclDataType_t dt) {
  switch (dt) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

#if defined(__x86_64__)
const Kernels& avx2KernelsUnchecked();  // kernels_avx2.cc

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
// not know "f16c".
bool cpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

const Kernels* avx2Kernels() {
  __builtin_cpu_init();
  bool ok = __builtin_cpu_supports("avx2") && cpuHasF16c();
  return ok ? &avx2KernelsUnchecked() : nullptr;
}
#else
const Kernels* avx2Kernels() { return nullptr; }
#endif

ncclResult_t checkVoteArgs(ncclDataType_t dt, int op, const char* caller) {
  ARGCHECK(isVoteType(dt), caller, "datatype", "%d (%s) is not a vote type: use ncclFloat32, ncclFloat16, "
           "ncclBfloat16 or ncclInt8", (int)dt, typeName(dt));
  ARGCHECK(op >= 0 && op < ncclSignNumOps, caller, "op", "%d is not an ncclSignOp_t", op);
  ARGCHECK(!(op == ncclSignAverage && dt == ncclInt8), caller, "datatype",
           "ncclSignAverage needs a floating-point type; int8 cannot hold a fraction");
  return ncclSuccess;
}

std::string bitsIsaSetting() { return signlionParamBitsIsa(); }

const Kernels& kernels() {
  static const Kernels* chosen = [] {
    std::string want = bitsIsaSetting();
    const Kernels* avx2 = avx2Kernels();
    const Kernels* k = &portableKernels();
    if (strcasecmp(want.c_str(), "portable") == 0) {
      k = &portableKernels();
    } else if (strcasecmp(want.c_str(), "avx2") == 0) {
      if (avx2 == nullptr) WARN("SIGNLION_BITS_ISA=avx2 but this CPU has no AVX2+F16C; using the portable kernels");
      k = avx2 ? avx2 : k;
    } else {  // auto: anything else was WARNed and read as auto
      if (avx2) k = avx2;
    }
    INFO(kSubsysBits, "vote kernels: %s", k->name);
    return k;
  }();
  return *chosen;
}

void decideMajority(const Kernels& k, const Counts& c, int nranks, ncclSignZeroRule_t zero, ncclSignTieRule_t tie,
                    size_t count, ncclDataType_t dt, void* dst) {
  // 64 words of result planes = 4096 elements per tile: 1 KiB, stays in L1.
  constexpr size_t kTileWords = 64;
  uint64_t tile[2 * kTileWords];
  int nplanes = majorityPlanes(nranks, zero, tie);
  size_t nwords = numWords(count);
  size_t esize = typeSize(dt);
  for (size_t w0 = 0; w0 < nwords; w0 += kTileWords) {
    size_t nw = std::min(kTileWords, nwords - w0);
    Counts sub = c;
    sub.pos += w0;
    if (sub.neg) sub.neg += w0;
    k.decideBits(sub, nranks, tie, tile, kTileWords, nw);
    size_t first = w0 * kBlockElems;
    size_t n = std::min(count - first, nw * kBlockElems);
    k.unpack(tile, nplanes, kTileWords, n, dt, static_cast<char*>(dst) + first * esize);
  }
}

}  // namespace bits
}  // namespace signlion
