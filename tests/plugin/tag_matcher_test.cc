// transport/tag_matcher.h alone: the matching rule without any socket.
#include "transport/tag_matcher.h"

#include <gtest/gtest.h>

#include <vector>

using signlion::net::TagMatcher;

namespace {

struct Recv {
  int id;
};
using Matcher = TagMatcher<Recv, int, 4, 3, 8>;  // Msg: the message's number

}  // namespace

TEST(TagMatcher, MessageGoesToTheOldestReceiveHoldingItsTag) {
  Matcher m;
  Recv a{0}, b{1}, c{2};
  const int ta[] = {1, 2}, tb[] = {2}, tc[] = {3, 2, 1};
  auto none = [](Matcher::Kept&) { FAIL() << "nothing is kept"; };
  ASSERT_TRUE(m.post(&a, 2, ta, none));
  ASSERT_TRUE(m.post(&b, 1, tb, none));
  ASSERT_TRUE(m.post(&c, 3, tc, none));
  Recv* r;
  int slot;
  // Tag 3 belongs to the newest receive only: no need to be the oldest.
  ASSERT_TRUE(m.claim(3, &r, &slot));
  EXPECT_EQ(r, &c);
  EXPECT_EQ(slot, 0);
  // Tag 2, three times: a's slot 1, then b, then c's slot 1, in post order.
  for (auto want : {std::make_pair(&a, 1), std::make_pair(&b, 0), std::make_pair(&c, 1)}) {
    ASSERT_TRUE(m.claim(2, &r, &slot));
    EXPECT_EQ(r, want.first);
    EXPECT_EQ(slot, want.second);
  }
  EXPECT_FALSE(m.claim(2, &r, &slot));
  ASSERT_TRUE(m.claim(1, &r, &slot));
  EXPECT_EQ(r, &a);
  ASSERT_TRUE(m.claim(1, &r, &slot));
  EXPECT_EQ(r, &c);
  EXPECT_EQ(slot, 2);
  EXPECT_FALSE(m.anyPosted());
}

TEST(TagMatcher, KeptMessagesAreClaimedOldestFirstByTheNextReceive) {
  Matcher m;
  Recv* r;
  int slot;
  EXPECT_FALSE(m.claim(5, &r, &slot));
  ASSERT_NE(m.keep(5, 100), nullptr);
  ASSERT_NE(m.keep(6, 101), nullptr);
  ASSERT_NE(m.keep(5, 102), nullptr);
  EXPECT_TRUE(m.keptFull());
  EXPECT_EQ(m.keep(7, 103), nullptr);
  Recv a{0};
  const int tags[] = {5, 9, 5};
  std::vector<int> claimed;
  ASSERT_TRUE(m.post(&a, 3, tags, [&](Matcher::Kept& k) {
    EXPECT_EQ(k.recv, &a);
    claimed.push_back(k.msg * 10 + k.slot);
  }));
  EXPECT_EQ(claimed, (std::vector<int>{1000, 1022}));  // message 100 in slot 0, 102 in slot 2
  EXPECT_TRUE(m.anyPosted());                          // slot 1 (tag 9) still open
  ASSERT_TRUE(m.claim(9, &r, &slot));
  EXPECT_EQ(slot, 1);
  // The transport releases what it delivered; the unclaimed one stays.
  m.release(2);
  m.release(0);
  ASSERT_EQ(m.keptCount(), 1u);
  EXPECT_EQ(m.kept(0).msg, 101);
  EXPECT_EQ(m.kept(0).recv, nullptr);
}

TEST(TagMatcher, FullPostedTableIsRefused) {
  Matcher m;
  Recv rs[5];
  const int tag = 1;
  auto none = [](Matcher::Kept&) {};
  for (int i = 0; i < 4; i++) ASSERT_TRUE(m.post(&rs[i], 1, &tag, none));
  EXPECT_TRUE(m.postedFull());
  EXPECT_FALSE(m.post(&rs[4], 1, &tag, none));
}
