// The socket transport's formats (plugin/socket/socket_wire.h): the listen
// handle connect() is given, a new stream's hello as accept() reads it, and
// the input as a whole control stream, framed as a recv comm frames it
// (headers, inline payloads skipped, pairing headers), every decoded header
// encoded again and compared.
#include <cstring>

#include "fuzz_bytes.h"
#include "socket/socket_wire.h"

using namespace signlion;
using namespace signlion::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quietLogs();
  struct {
    char bytes[kSocketHandleBytes];
  } handle = fuzz::Bytes(data, size).take<decltype(handle)>();
  SocketParsedHandle parsed;
  if (socketParseHandle(handle.bytes, &parsed) == ncclSuccess &&
      (parsed.nnics < 1 || parsed.nnics > kSocketMaxFusedNics))
    __builtin_trap();

  SocketHello he = fuzz::Bytes(data, size).take<SocketHello>();
  if (socketHelloProblem(he, 0x5eed5eed5eed5eedull) == nullptr &&
      (he.nsocks < 1 || he.nsocks > (uint32_t)kSocketMaxStreams || he.index >= he.nsocks || he.chunkSize < 4096))
    __builtin_trap();

  const char* in = reinterpret_cast<const char*>(data);
  size_t at = 0;
  while (at < size) {
    SocketMsgHeader h;
    size_t len = 0;
    const char* why = nullptr;
    CtrlHeader kind = parseCtrlHeader(in + at, size - at, &h, &len, &why);
    if (kind == CtrlHeader::kNeedMore) break;
    if (kind == CtrlHeader::kMalformed) {
      if (why == nullptr) __builtin_trap();
      break;
    }
    if (len != kWireMsgBytes && len != kWirePairBytes) __builtin_trap();
    // What a sender writes for this header decodes to the same header.
    char wire[kWirePairBytes];
    size_t wlen = encodeHeader(h, wire);
    SocketMsgHeader back;
    size_t blen = 0;
    if (parseCtrlHeader(wire, wlen, &back, &blen, &why) != kind || blen != len || back.tag != h.tag ||
        back.flags != h.flags || back.size != h.size)
      __builtin_trap();
    at += len;
    if (kind == CtrlHeader::kMessage && (h.flags & kMsgInline) != 0) {
      if (h.size > kSocketMaxInline) __builtin_trap();
      at += h.size < size - at ? (size_t)h.size : size - at;  // the payload follows on the stream
    }
  }
  return 0;
}
