// The call check's 16-byte wire header (src/host/call_check.h): every field a
// rank must agree on comes back as sent, the sequence number and segment
// index whole even across the wrap of their low bits, and anything without
// the magic is no header.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/warn_capture.h"
#include "host/call_check.h"

namespace signlion {
namespace {

using host::CallHeader;

CallSignature signature(uint64_t seq, uint32_t part) {
  CallSignature s;
  s.seq = seq;
  s.count = (uint64_t{1} << 40) + 7;
  s.segment = 16 << 20;
  s.part = part;
  s.rank = 3;
  s.kind = (uint8_t)CallKind::kSignAllReduce;
  s.datatype = ncclBfloat16;
  s.op = ncclSignAverage;
  s.zeroRule = ncclSignZeroAbstain;
  s.tieRule = ncclSignTieNegative;
  s.algorithm = ncclSignAlgoHierarchical;
  return s;
}

TEST(CallHeader, EveryFieldComesBack) {
  const CallSignature sent = signature(123456789, 70000);
  CallSignature got;
  ASSERT_TRUE(CallHeader::encode(sent).decode(sent, 3, &got));
  EXPECT_EQ(memcmp(&got, &sent, sizeof(got)), 0);
  // Each field alone differs: the decoded one says so, with its value.
  CallSignature other = sent;
  other.count = 999;
  ASSERT_TRUE(CallHeader::encode(other).decode(sent, 3, &got));
  EXPECT_EQ(got.count, 999u);
  other = sent;
  other.datatype = ncclFloat16;
  ASSERT_TRUE(CallHeader::encode(other).decode(sent, 3, &got));
  EXPECT_EQ(got.datatype, ncclFloat16);
  other = sent;
  other.op = ncclSignMajority;
  other.kind = (uint8_t)CallKind::kSumAllReduce;
  other.algorithm = ncclSignAlgoRing;
  ASSERT_TRUE(CallHeader::encode(other).decode(sent, 3, &got));
  EXPECT_EQ(got.op, ncclSignMajority);
  EXPECT_EQ(got.kind, (uint8_t)CallKind::kSumAllReduce);
  EXPECT_EQ(got.algorithm, ncclSignAlgoRing);
  EXPECT_EQ(got.rank, 3);  // the link it came on
}

TEST(CallHeader, SequenceAndSegmentWholeAcrossTheirWrap) {
  const uint64_t wrap = uint64_t{1} << 24;
  struct Case {
    uint64_t mine, theirs;
  };
  for (Case c : {Case{5, 3}, Case{3, 5}, Case{wrap + 1, wrap - 1}, Case{wrap - 1, wrap + 1},
                 Case{7 * wrap + 100, 7 * wrap + 100 + (wrap / 2 - 1)}, Case{1000, 1000 - (wrap / 2)}}) {
    CallSignature got;
    ASSERT_TRUE(CallHeader::encode(signature(c.theirs, 0)).decode(signature(c.mine, 0), 1, &got));
    EXPECT_EQ(got.seq, c.theirs) << c.mine;
  }
  CallSignature got;
  ASSERT_TRUE(CallHeader::encode(signature(9, 65535)).decode(signature(9, 65537), 1, &got));
  EXPECT_EQ(got.part, 65535u);
}

TEST(CallHeader, NoMagicIsNoHeader) {
  CallSignature got;
  EXPECT_FALSE(CallHeader().decode(signature(1, 0), 1, &got));  // what a short message leaves
  CallHeader h = CallHeader::encode(signature(1, 0));
  h.packed ^= 0x01;  // another magic byte: payload of some other message
  EXPECT_FALSE(h.decode(signature(1, 0), 1, &got));
}

// A peer's header carries 4 bits of algorithm and of datatype: values no
// ncclSignAlgo_t or ncclDataType_t holds are named "unknown", never read as
// those enums (clang's UndefinedBehaviorSanitizer stopped here before: an
// invalid enum load; GCC's does not check that load, so the same inputs are
// seeds of tests/fuzz/fuzz_call_check, which found it).
TEST(CallHeader, OutOfRangeFieldsFromAPeerAreAnError) {
  const CallSignature mine = signature(7, 0);
  for (int field = 0; field < 2; field++) {
    CallSignature theirs = mine;
    if (field == 0) theirs.algorithm = 15;
    if (field == 1) theirs.datatype = 15;
    const CallHeader h = CallHeader::encode(theirs);
    EXPECT_EQ(host::verifyCallHeader(mine, 0, 3, &h, host::kHeaderBytes, 0, "test"), ncclInvalidUsage) << field;
  }
}

// The settings table of ncclSignCommInitRank as peers may send it: an
// algorithm of 128 in rank 1's row is a disagreement, named, not a crash.
TEST(CallHeader, SettingsRowWithAnUnknownAlgorithmIsAnError) {
  std::vector<uint8_t> rows(2 * host::settingsRowBytes(), 0);
  int32_t algo = 128;
  memcpy(rows.data() + host::settingsRowBytes(), &algo, sizeof(algo));  // the row's first field
  algo::Topology topo;
  EXPECT_EQ(host::compareSettingsRows(rows.data(), 2, 0, &topo), ncclInvalidUsage);
  EXPECT_EQ(topo.node.size(), 2u);
}

// SIGNLION_RESULT_CODING (the fourth int32 of a row) must agree: a rank that
// sends results as planes while its peer expects them coded would misread
// every result, so init fails, naming the variable.
TEST(CallHeader, SettingsRowWithOtherResultCodingIsAnError) {
  std::vector<uint8_t> rows(2 * host::settingsRowBytes(), 0);
  int32_t coding = 1;
  memcpy(rows.data() + host::settingsRowBytes() + 3 * sizeof(int32_t), &coding, sizeof(coding));
  algo::Topology topo;
  test::WarnCapture w;
  EXPECT_EQ(host::compareSettingsRows(rows.data(), 2, 0, &topo), ncclInvalidUsage);
  EXPECT_EQ(w.countContaining("SIGNLION_RESULT_CODING"), 1);
  memcpy(rows.data() + 3 * sizeof(int32_t), &coding, sizeof(coding));  // rank 0 the same: agreed
  EXPECT_EQ(host::compareSettingsRows(rows.data(), 2, 0, &topo), ncclSuccess);
}

}  // namespace
}  // namespace signlion
