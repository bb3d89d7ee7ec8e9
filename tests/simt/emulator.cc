// The SIMT emulator's scheduler: fibers with their own stacks, switched by a
// few instructions on x86-64 (ucontext elsewhere), run round-robin; a fiber
// runs until it waits at a warp collective or returns. The last lane to
// arrive at a collective computes every lane's result and goes on; the others
// pick theirs up when they next run.
#include "simt/emulator.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace signlion {
namespace simt {

namespace {

constexpr size_t kStackBytes = 64 << 10;  // kernels use a few hundred bytes

[[noreturn]] void fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "simt emulator: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

#if defined(__x86_64__)
// signlion_simt_switch(&from, to): pushes the callee-saved registers, stores
// the stack pointer in *from, loads `to` and pops the registers saved there.
extern "C" void signlion_simt_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl signlion_simt_switch
  .hidden signlion_simt_switch
  .type signlion_simt_switch, @function
signlion_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size signlion_simt_switch, .-signlion_simt_switch
)");

struct Context {
  void* sp = nullptr;
};
void switchTo(Context& from, Context& to) { signlion_simt_switch(&from.sp, to.sp); }
// A fresh stack whose first switch "returns" into entry, with the stack
// aligned as after a call (rsp + 8 a multiple of 16).
void prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(stack + bytes)) & ~(uintptr_t)15);
  *--sp = nullptr;                          // entry's return address: it never returns
  *--sp = reinterpret_cast<void*>(entry);   // popped by ret
  for (int i = 0; i < 6; i++) *--sp = nullptr;  // rbp, rbx, r12..r15
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
void switchTo(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
void prepare(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

enum class Op { kBallot, kShfl, kShflXor };
const char* opName(Op op) {
  switch (op) {
    case Op::kBallot: return "a ballot";
    case Op::kShfl: return "a shuffle";
    default: return "an xor-shuffle";
  }
}

struct Fiber {
  Context ctx;
  std::unique_ptr<char[]> stack;
  unsigned tid = 0;
  bool done = false;
};

struct Warp {
  int arrived = 0;
  uint64_t generation = 0;
  Op op = Op::kBallot;
  uint32_t value[32];
  int arg[32];
  uint32_t result[32];
};

// One launch at a time, on one CPU thread (launches are synchronous).
struct Emulator {
  unsigned block = 0, blockDim = 0, gridDim = 0;
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;  // stacks kept from launch to launch
  std::vector<Warp> warps;
  Context scheduler;
  Fiber* current = nullptr;
  unsigned done = 0;
  uint64_t progress = 0;  // completed collectives and returned threads
};
Emulator g;

void fiberMain() {
  Fiber& f = *g.current;
  (*g.body)();
  f.done = true;
  g.done++;
  g.progress++;
  switchTo(f.ctx, g.scheduler);
  fatal("a finished thread was resumed");
}

uint32_t collective(Op op, uint32_t value, int arg) {
  Fiber& f = *g.current;
  const unsigned lane = f.tid % 32;
  Warp& w = g.warps[f.tid / 32];
  if (w.arrived == 0) {
    w.op = op;
  } else if (w.op != op) {
    fatal("block %u, warp %u: lane %u reached %s while %d lanes wait at %s (divergent warp collective)", g.block,
          f.tid / 32, lane, opName(op), w.arrived, opName(w.op));
  }
  w.value[lane] = value;
  w.arg[lane] = arg;
  if (++w.arrived == 32) {
    uint32_t all = 0;
    for (int l = 0; l < 32; l++) all |= (uint32_t)(w.value[l] != 0) << l;
    for (int l = 0; l < 32; l++) {
      switch (op) {
        case Op::kBallot: w.result[l] = all; break;
        case Op::kShfl: w.result[l] = w.value[w.arg[l] & 31]; break;
        case Op::kShflXor: w.result[l] = w.value[(l ^ w.arg[l]) & 31]; break;
      }
    }
    w.arrived = 0;
    w.generation++;
    g.progress++;
    return w.result[lane];
  }
  const uint64_t gen = w.generation;
  while (w.generation == gen) switchTo(f.ctx, g.scheduler);
  return w.result[lane];
}

}  // namespace

void run(unsigned blocks, unsigned threadsPerBlock, const std::function<void()>& body) {
  if (g.current != nullptr) fatal("a launch from inside a kernel");
  if (threadsPerBlock == 0 || threadsPerBlock % 32 != 0) fatal("block size %u is not a multiple of 32", threadsPerBlock);
  if (g.fibers.size() < threadsPerBlock) g.fibers.resize(threadsPerBlock);
  g.warps.assign(threadsPerBlock / 32, Warp());
  g.body = &body;
  g.blockDim = threadsPerBlock;
  g.gridDim = blocks;
  for (unsigned b = 0; b < blocks; b++) {
    g.block = b;
    g.done = 0;
    for (unsigned t = 0; t < threadsPerBlock; t++) {
      Fiber& f = g.fibers[t];
      if (!f.stack) f.stack.reset(new char[kStackBytes]);
      f.tid = t;
      f.done = false;
      prepare(f.ctx, f.stack.get(), kStackBytes, fiberMain);
    }
    while (g.done < threadsPerBlock) {
      const uint64_t before = g.progress;
      for (unsigned t = 0; t < threadsPerBlock; t++) {
        Fiber& f = g.fibers[t];
        if (f.done) continue;
        g.current = &f;
        switchTo(g.scheduler, f.ctx);
      }
      g.current = nullptr;
      if (g.progress == before) {
        for (size_t w = 0; w < g.warps.size(); w++) {
          if (g.warps[w].arrived > 0)
            fatal("block %u, warp %zu: %d lanes wait at %s that the other lanes never reach (they returned or "
                  "diverged)", b, w, g.warps[w].arrived, opName(g.warps[w].op));
        }
        fatal("block %u: no thread can make progress", b);
      }
    }
  }
  g.body = nullptr;
}

unsigned threadIndex() { return g.current->tid; }
unsigned blockIndex() { return g.block; }
unsigned blockSize() { return g.blockDim; }
unsigned gridSize() { return g.gridDim; }

uint32_t ballot(bool pred) { return collective(Op::kBallot, pred ? 1u : 0u, 0); }
uint32_t shfl(uint32_t v, int srcLane) { return collective(Op::kShfl, v, srcLane); }
uint32_t shflXor(uint32_t v, int laneMask) { return collective(Op::kShflXor, v, laneMask); }

}  // namespace simt
}  // namespace signlion
