// The UCX transport's setup formats (plugin/ucx/ucx_wire.h): the listen
// handle connect() is given, the connector's hello as the listener reads it,
// and the listener's reply as the connector reads it.
#include "fuzz_bytes.h"
#include "ucx/ucx_wire.h"

using namespace signlion;
using namespace signlion::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  struct {
    char bytes[kUcxHandleBytes];
  } handle = fuzz::Bytes(data, size).take<decltype(handle)>();
  UcxListenHandle h;
  if (ucxParseHandle(handle.bytes, &h) == ncclSuccess &&
      h.addr.sa.sa_family != AF_INET && h.addr.sa.sa_family != AF_INET6)
    __builtin_trap();
  (void)ucxHelloProblem(fuzz::Bytes(data, size).take<UcxHello>(), 0x5eed5eed5eed5eedull);
  UcxReply r = fuzz::Bytes(data, size).take<UcxReply>();
  if (ucxReplyProblem(r) == nullptr && (r.addrLen == 0 || r.addrLen > kUcxMaxWorkerAddress)) __builtin_trap();
  return 0;
}
