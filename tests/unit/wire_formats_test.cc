// The pure decoders of what a peer sends (host/bootstrap_wire.h,
// socket/socket_wire.h, ucx/ucx_wire.h): a valid message passes, and each
// field out of range is refused with a reason. The fuzz targets of
// tests/fuzz run the same functions on arbitrary bytes.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include "host/bootstrap_wire.h"
#include "socket/socket_wire.h"
#include "ucx/ucx_wire.h"

namespace signlion {
namespace {

constexpr uint64_t kSecret = 0x1234;

net::SocketAddress loopback4(uint16_t port) {
  net::SocketAddress a;
  memset(&a, 0, sizeof(a));
  a.sin.sin_family = AF_INET;
  a.sin.sin_port = htons(port);
  a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

TEST(WireFormats, BootstrapAnswerNeedsAUsableAddress) {
  host::BootstrapTableHeader th{host::kBootstrapTableMagic, 3};
  net::SocketAddress next = loopback4(2);
  EXPECT_EQ(host::bootstrapTableProblem(th, 3, nullptr), nullptr);
  EXPECT_EQ(host::bootstrapTableProblem(th, 3, &next), nullptr);
  EXPECT_NE(host::bootstrapTableProblem(th, 4, nullptr), nullptr);  // another nranks
  next.sa.sa_family = AF_UNIX;  // the root relays what a rank claimed: not trusted
  EXPECT_NE(host::bootstrapTableProblem(th, 3, &next), nullptr);
  th.magic = 0;
  EXPECT_NE(host::bootstrapTableProblem(th, 3, nullptr), nullptr);
}

TEST(WireFormats, BootstrapHelloAndOpHeader) {
  host::BootstrapHello h;
  memset(&h, 0, sizeof(h));
  h.magic = host::kBootstrapHelloMagic;
  h.version = host::kBootstrapWireVersion;
  h.kind = host::kHelloRoot;
  h.secret = kSecret;
  h.rank = 1;
  h.nranks = 2;
  h.addr = loopback4(5);
  EXPECT_EQ(host::bootstrapHelloProblem(h, host::kHelloRoot, kSecret), nullptr);
  EXPECT_NE(host::bootstrapHelloProblem(h, host::kHelloRoot, kSecret + 1), nullptr);
  EXPECT_NE(host::bootstrapHelloProblem(h, host::kHelloRing, kSecret), nullptr);
  h.nranks = host::kBootstrapMaxRanks + 1;
  EXPECT_NE(host::bootstrapHelloProblem(h, host::kHelloRoot, kSecret), nullptr);
  host::BootstrapOpHeader op{host::kBootstrapOpMagic, host::kOpAllGather, 64};
  EXPECT_EQ(host::bootstrapOpProblem(op, host::kOpAllGather, 64), nullptr);
  EXPECT_NE(host::bootstrapOpProblem(op, host::kOpAllGather, 65), nullptr);
  EXPECT_NE(host::bootstrapOpProblem(op, host::kOpBarrier, 64), nullptr);
}

TEST(WireFormats, SocketHelloChunkSizeWithinWhatASenderPicks) {
  net::SocketHello he{};
  he.magic = net::kSocketHandleMagic;
  he.version = net::kSocketWireVersion;
  he.kind = 1;
  he.nsocks = 2;
  he.index = 1;
  he.chunkSize = 1u << 30;
  he.secret = kSecret;
  EXPECT_EQ(net::socketHelloProblem(he, kSecret), nullptr);
  he.chunkSize = 0x80000000u;  // more than any message
  EXPECT_NE(net::socketHelloProblem(he, kSecret), nullptr);
  he.chunkSize = 4096;
  he.index = 2;  // past nsocks
  EXPECT_NE(net::socketHelloProblem(he, kSecret), nullptr);
}

TEST(WireFormats, SocketControlHeaders) {
  char wire[net::kWirePairBytes];
  net::SocketMsgHeader h;
  size_t len = 0;
  const char* why = nullptr;
  // Round trip of each kind.
  size_t n = net::encodeHeader(net::SocketMsgHeader{5, net::kMsgInline, 100}, wire);
  EXPECT_EQ(net::parseCtrlHeader(wire, n, &h, &len, &why), net::CtrlHeader::kMessage);
  EXPECT_EQ(len, net::kWireMsgBytes);
  EXPECT_EQ(h.size, 100u);
  EXPECT_EQ(net::parseCtrlHeader(wire, n - 1, &h, &len, &why), net::CtrlHeader::kNeedMore);
  n = net::encodeHeader(net::SocketMsgHeader{0, net::kMsgPair, 77}, wire);
  EXPECT_EQ(net::parseCtrlHeader(wire, n - 1, &h, &len, &why), net::CtrlHeader::kNeedMore);
  EXPECT_EQ(net::parseCtrlHeader(wire, n, &h, &len, &why), net::CtrlHeader::kPair);
  EXPECT_EQ(h.size, 77u);
  // A spread message of 2^31 - 1 bytes: more than maxP2pBytes, refused as it is read.
  net::SocketWireMsg big{1, 0x7fffffffu};
  memcpy(wire, &big, sizeof(big));
  EXPECT_EQ(net::parseCtrlHeader(wire, sizeof(big), &h, &len, &why), net::CtrlHeader::kMalformed);
  // An inline one larger than any sender inlines.
  net::SocketWireMsg inl{1, net::kWireInline | (uint32_t)(net::kSocketMaxInline + 1)};
  memcpy(wire, &inl, sizeof(inl));
  EXPECT_EQ(net::parseCtrlHeader(wire, sizeof(inl), &h, &len, &why), net::CtrlHeader::kMalformed);
  // A marker with a connId, a pairing header with a tag or unknown flags.
  for (net::SocketMsgHeader bad : {net::SocketMsgHeader{0, net::kMsgSwitch, 1}, net::SocketMsgHeader{3, net::kMsgPair, 1},
                                   net::SocketMsgHeader{0, net::kMsgPair | net::kMsgSwitch, 0}}) {
    n = net::encodeHeader(bad, wire);
    EXPECT_EQ(net::parseCtrlHeader(wire, n, &h, &len, &why), net::CtrlHeader::kMalformed);
    EXPECT_EQ(len, net::kWirePairBytes);
  }
}

TEST(WireFormats, SocketHandle) {
  net::SocketListenHandle h{};
  h.magic = net::kSocketHandleMagic;
  h.version = net::kSocketWireVersion;
  h.nnics = 1;
  h.nics[0] = net::toHandleNic(loopback4(9));
  char bytes[net::kSocketHandleBytes] = {};
  memcpy(bytes, &h, sizeof(h));
  net::SocketParsedHandle parsed;
  ASSERT_EQ(net::socketParseHandle(bytes, &parsed), ncclSuccess);
  EXPECT_EQ(parsed.nnics, 1);
  EXPECT_EQ(parsed.remote[0].sin.sin_port, htons(9));
  h.nnics = 5;
  memcpy(bytes, &h, sizeof(h));
  EXPECT_EQ(net::socketParseHandle(bytes, &parsed), ncclInvalidArgument);
  h.nnics = 1;
  h.nics[0].family = AF_UNIX;
  memcpy(bytes, &h, sizeof(h));
  EXPECT_EQ(net::socketParseHandle(bytes, &parsed), ncclInvalidArgument);
}

TEST(WireFormats, UcxReplyAndHandle) {
  net::UcxReply r{net::kUcxHandleMagic, net::kUcxWireVersion, 0, 300, 7};
  EXPECT_EQ(net::ucxReplyProblem(r), nullptr);
  r.commId = net::kUcxSetupIdBit | 7;  // would tag the comm's own setup messages
  EXPECT_NE(net::ucxReplyProblem(r), nullptr);
  r.commId = 7;
  r.addrLen = net::kUcxMaxWorkerAddress + 1;
  EXPECT_NE(net::ucxReplyProblem(r), nullptr);
  net::UcxListenHandle h{};
  h.magic = net::kUcxHandleMagic;
  h.version = net::kUcxWireVersion;
  h.addr = loopback4(10);
  char bytes[net::kUcxHandleBytes] = {};
  memcpy(bytes, &h, sizeof(h));
  net::UcxListenHandle out;
  EXPECT_EQ(net::ucxParseHandle(bytes, &out), ncclSuccess);
  h.addr.sa.sa_family = AF_UNIX;
  memcpy(bytes, &h, sizeof(h));
  EXPECT_EQ(net::ucxParseHandle(bytes, &out), ncclInvalidArgument);
}

}  // namespace
}  // namespace signlion
