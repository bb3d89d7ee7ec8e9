// The saved state of a Distributed Lion optimizer (ncclSignLionSaveState /
// ncclSignLionLoadState): a header, the fp32 momentum, then the fp32 master
// copy when the optimizer keeps one. The buffer comes back from the user (a
// checkpoint file), so loading checks every header field against the
// optimizer before a byte is copied: lionParseState, a pure function the
// fuzz target tests/fuzz/fuzz_lion_state calls too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_sign.h"

namespace signlion {
namespace lion {

struct LionStateHeader {
  static constexpr uint32_t kMagic = 0x54534e4c;  // "LNST"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic, version, datatype, aggregation;
  uint64_t count, applied, skipped;
  uint32_t hasMaster, masterReady;
};

// What an optimizer's state must be to load into it.
struct LionStateShape {
  uint32_t datatype = 0;
  uint32_t aggregation = 0;
  uint64_t count = 0;
  bool hasMaster = false;
};

// Bytes of a state of this shape.
size_t lionStateBytes(const LionStateShape& shape);

// Checks `bytes` at `buffer` (any alignment) as a state for `shape`: its
// header (magic, version, count, datatype, aggregation, master copy) and its
// length. ncclInvalidArgument with a WARN naming ncclSignLionLoadState and
// the argument otherwise; *out gets the header.
ncclResult_t lionParseState(const void* buffer, size_t bytes, const LionStateShape& shape, LionStateHeader* out);

}  // namespace lion
}  // namespace signlion
