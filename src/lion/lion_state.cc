#include "lion/lion_state.h"

#include <cstring>

#include "common/checks.h"

namespace signlion {
namespace lion {

size_t lionStateBytes(const LionStateShape& s) {
  return sizeof(LionStateHeader) + s.count * sizeof(float) * (s.hasMaster ? 2 : 1);
}

ncclResult_t lionParseState(const void* buffer, size_t bytes, const LionStateShape& s, LionStateHeader* out) {
  const char* fn = "ncclSignLionLoadState";
  LionStateHeader h;
  ARGCHECK(buffer != nullptr && bytes >= sizeof(h), fn, "bytes", "%zu: shorter than a state header", bytes);
  memcpy(&h, buffer, sizeof(h));
  ARGCHECK(h.magic == LionStateHeader::kMagic && h.version == LionStateHeader::kVersion, fn, "buffer",
           "not a Lion state (magic 0x%x, version %u)", h.magic, h.version);
  ARGCHECK(h.count == s.count && h.datatype == s.datatype, fn, "buffer",
           "a state of %llu elements of datatype %u, the optimizer has %llu of %u", (unsigned long long)h.count,
           h.datatype, (unsigned long long)s.count, s.datatype);
  ARGCHECK(h.aggregation == s.aggregation && h.hasMaster == (s.hasMaster ? 1u : 0u), fn, "buffer",
           "saved with aggregation %u and master copy %u, the optimizer has %u and %d", h.aggregation, h.hasMaster,
           s.aggregation, s.hasMaster ? 1 : 0);
  ARGCHECK(bytes == lionStateBytes(s), fn, "bytes", "%zu, a state of this optimizer is %zu", bytes, lionStateBytes(s));
  *out = h;
  return ncclSuccess;
}

}  // namespace lion
}  // namespace signlion
