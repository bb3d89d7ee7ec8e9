// The pieces of the learned link rate (src/host/link_rate.h): which line rate
// a measurement stands for, the one value every rank takes, and the settings
// that follow from it, which must be those the explicit variables give.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "algo/cost_model.h"
#include "common/param.h"
#include "host/host_params.h"
#include "host/link_rate.h"
#include "net/socket_device_table.h"

namespace {

using signlion::host::agreedLinkMbits;
using signlion::host::linkSettingsFor;
using signlion::host::nominalLinkMbits;

// TCP's goodput over a tbf-limited veth, and one stream over a fast one,
// name the line rate; what is near no standard rate stands as measured.
TEST(LinkRate, MeasurementsNameTheLineRate) {
  struct Case {
    double measured;
    int64_t nominal;
  };
  for (Case c : {Case{95.2, 100}, Case{81, 100}, Case{72, 100}, Case{65, 65}, Case{110, 100}, Case{940, 1000}, Case{2400, 2500},
                 Case{8900, 10000}, Case{9500, 10000}, Case{23500, 25000}, Case{45000, 50000},
                 Case{4000, 5000}, Case{3000, 3000}, Case{60.4, 60}, Case{130, 130}, Case{0.3, 1}, Case{0, 1}}) {
    EXPECT_EQ(nominalLinkMbits(c.measured), c.nominal) << c.measured;
  }
}

// Only a standard rate is a line rate the links may be paced at: what stood
// as measured between them was the hosts' limit, not the link's.
TEST(LinkRate, StandardLineRates) {
  for (int64_t m : {10, 100, 1000, 2500, 5000, 10000, 25000, 40000, 50000, 100000, 200000, 400000})
    EXPECT_TRUE(signlion::host::isStandardLineRate(m)) << m;
  for (int64_t m : {0, 1, 65, 3000, 999, 1001, 96, 9999}) EXPECT_FALSE(signlion::host::isStandardLineRate(m)) << m;
  // A rate from SIGNLION_COST_BETA_MBPS (set, above 0) is the link's own too.
  EXPECT_FALSE(signlion::host::isLineRate(96));
  EXPECT_TRUE(signlion::host::isLineRate(100));
  setenv("SIGNLION_COST_BETA_MBPS", "12", 1);
  signlion::paramResetCache();
  EXPECT_TRUE(signlion::host::isLineRate(96));
  setenv("SIGNLION_COST_BETA_MBPS", "0", 1);
  signlion::paramResetCache();
  EXPECT_FALSE(signlion::host::isLineRate(96)) << "0 is unset";
  unsetenv("SIGNLION_COST_BETA_MBPS");
  signlion::paramResetCache();
}

// Every rank reads the same table and takes the slowest node's rate; ranks
// that did not probe (not a node's first rank: 0) do not count.
TEST(LinkRate, EveryRankTakesTheSlowestMeasurement) {
  const double star[] = {95.0, 0, 97.5, 0, 96.1};
  EXPECT_EQ(agreedLinkMbits(star, 5), 100);
  const double mixed[] = {9400, 930, 8800};
  EXPECT_EQ(agreedLinkMbits(mixed, 3), 1000) << "a collective waits for its slowest link";
  const double none[] = {0, 0, 0};
  EXPECT_EQ(agreedLinkMbits(none, 3), 0) << "nothing measured: no rate, the defaults stand";
  const double slowFirst[] = {60, 9400};
  EXPECT_EQ(agreedLinkMbits(slowFirst, 2), 60);
  // The same table in any rank order gives the same value.
  const double reordered[] = {0, 96.1, 0, 95.0, 97.5};
  EXPECT_EQ(agreedLinkMbits(reordered, 5), agreedLinkMbits(star, 5));
}

// A learned rate gives the cost model's beta and the chunk that
// SIGNLION_COST_BETA_MBPS = rate / 8 gave (what the benchmarks used to set,
// scripts/star_bench_lib.sh rate_mbps), and the streams SIGNLION_SOCKET_SPEED
// = rate gave.
TEST(LinkRate, SettingsAreThoseTheVariablesGave) {
  struct Case {
    int64_t mbits;
    int64_t beta;
    int64_t chunk;
    int streams;
  };
  for (Case c : {Case{100, 12, 128 << 10, 1}, Case{1000, 125, 128 << 10, 1}, Case{2500, 312, 256 << 10, 1},
                 Case{5000, 625, 512 << 10, 1}, Case{10000, 1250, 512 << 10, 4}, Case{25000, 3125, 512 << 10, 4},
                 Case{4, 1, 128 << 10, 1}}) {
    SCOPED_TRACE(std::to_string(c.mbits) + " Mbit/s");
    const signlion::host::LinkSettings s = linkSettingsFor(c.mbits);
    EXPECT_EQ(s.betaMBps, c.beta);
    EXPECT_EQ(s.chunkBytes, c.chunk);
    EXPECT_EQ(signlion::net::socketStreamsForRate((int)c.mbits, 1), c.streams);
    // The explicit variable's path to the chunk agrees.
    setenv("SIGNLION_COST_BETA_MBPS", std::to_string(c.beta).c_str(), 1);
    signlion::paramResetCache();
    EXPECT_EQ(signlion::host::hostChunkBytes(), s.chunkBytes);
  }
  unsetenv("SIGNLION_COST_BETA_MBPS");
  signlion::paramResetCache();
  // Unknown (0): one stream per interface, whatever an interface claims.
  EXPECT_EQ(signlion::net::socketStreamsForRate(0, 1), 1);
  EXPECT_EQ(signlion::net::socketStreamsForRate(100, 2), 2);
  EXPECT_EQ(signlion::net::socketStreamsForRate(10000, 2), 4);
}

// Set, a variable is a variable: signlionParam<name>IsSet() tells a learned
// default where it may stand (what followLinkRate asks of the beta).
TEST(LinkRate, AnExplicitVariableIsSeen) {
  unsetenv("SIGNLION_COST_BETA_MBPS");
  signlion::paramResetCache();
  EXPECT_FALSE(signlionParamCostBetaMBpsIsSet());
  setenv("SIGNLION_COST_BETA_MBPS", "", 1);
  signlion::paramResetCache();
  EXPECT_FALSE(signlionParamCostBetaMBpsIsSet()) << "empty is unset, as paramReadInt reads it";
  setenv("SIGNLION_COST_BETA_MBPS", "125", 1);
  signlion::paramResetCache();
  EXPECT_TRUE(signlionParamCostBetaMBpsIsSet());
  unsetenv("SIGNLION_COST_BETA_MBPS");
  signlion::paramResetCache();
}

}  // namespace
