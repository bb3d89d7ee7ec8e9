// A saved Lion state handed to ncclSignLionLoadState (src/lion/lion_state.h):
// user input rather than a peer's, read from a checkpoint. The input's first
// 16 bytes give the optimizer's shape (count up to 2^16, datatype,
// aggregation, master copy), the rest is the buffer. A state it accepts is
// exactly as long as the shape says.
#include "fuzz_bytes.h"
#include "lion/lion_state.h"

using namespace signlion;
using namespace signlion::lion;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  fuzz::Bytes in(data, size);
  LionStateShape shape;
  shape.count = in.take<uint32_t>() % (1u << 16);
  shape.datatype = in.take<uint32_t>();
  shape.aggregation = in.take<uint32_t>();
  shape.hasMaster = (in.take<uint32_t>() & 1) != 0;
  LionStateHeader h;
  if (lionParseState(in.data(), in.left(), shape, &h) == ncclSuccess &&
      (in.left() != lionStateBytes(shape) || h.count != shape.count))
    __builtin_trap();
  return 0;
}
