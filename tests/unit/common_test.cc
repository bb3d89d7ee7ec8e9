// common/: parameters, logging, configuration resolution.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/checks.h"
#include "common/config.h"
#include "common/debug.h"
#include "common/param.h"

SIGNLION_PARAM(TestKnob, "TEST_KNOB", 7, -100, 8 << 20)
SIGNLION_STRING_PARAM(TestName, "TEST_NAME", "dflt")

namespace signlion {
namespace {

struct EnvGuard {
  std::string name;
  explicit EnvGuard(const char* n, const char* v) : name(n) {
    setenv(n, v, 1);
    paramResetCache();
  }
  ~EnvGuard() {
    unsetenv(name.c_str());
    paramResetCache();
  }
};

TEST(Param, DefaultWhenUnset) {
  unsetenv("SIGNLION_TEST_KNOB");
  paramResetCache();
  EXPECT_EQ(signlionParamTestKnob(), 7);
  EXPECT_EQ(signlionParamTestName(), "dflt");
}

TEST(Param, ReadsDecimalHexAndSuffixes) {
  {
    EnvGuard g("SIGNLION_TEST_KNOB", "42");
    EXPECT_EQ(signlionParamTestKnob(), 42);
  }
  {
    EnvGuard g("SIGNLION_TEST_KNOB", "0x10");
    EXPECT_EQ(signlionParamTestKnob(), 16);
  }
  {
    EnvGuard g("SIGNLION_TEST_KNOB", "4M");
    EXPECT_EQ(signlionParamTestKnob(), 4 << 20);
  }
  {
    EnvGuard g("SIGNLION_TEST_NAME", "eth0");
    EXPECT_EQ(signlionParamTestName(), "eth0");
  }
}

TEST(Param, MalformedFallsBackToDefault) {
  EnvGuard g("SIGNLION_TEST_KNOB", "12abc");
  EXPECT_EQ(signlionParamTestKnob(), 7);
}

TEST(Param, OutOfRangeFallsBackToDefault) {
  for (const char* v : {"-101", "9M", "0x7fffffffffffffffG"}) {
    EnvGuard g("SIGNLION_TEST_KNOB", v);
    EXPECT_EQ(signlionParamTestKnob(), 7) << v;
  }
  EnvGuard g("SIGNLION_TEST_KNOB", "-100");
  EXPECT_EQ(signlionParamTestKnob(), -100) << "the bounds are in range";
}

TEST(Param, CachedUntilReset) {
  EnvGuard g("SIGNLION_TEST_KNOB", "5");
  EXPECT_EQ(signlionParamTestKnob(), 5);
  setenv("SIGNLION_TEST_KNOB", "6", 1);
  EXPECT_EQ(signlionParamTestKnob(), 5);  // cached
  paramResetCache();
  EXPECT_EQ(signlionParamTestKnob(), 6);
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Log, WarnCarriesPrefixFileAndLine) {
  std::string path = "/tmp/signlion_log_test." + std::to_string(getpid());
  setenv("SIGNLION_DEBUG_FILE", path.c_str(), 1);
  setenv("SIGNLION_DEBUG", "WARN", 1);
  logReinit();
  WARN("something about %s", "argX");
  INFO(kSubsysNet, "not printed at WARN level");
  unsetenv("SIGNLION_DEBUG_FILE");
  logReinit();  // closes the file: everything is flushed
  std::string text = readFile(path);
  EXPECT_NE(text.find("[signlion] WARN common_test.cc:"), std::string::npos) << text;
  EXPECT_NE(text.find("something about argX"), std::string::npos);
  EXPECT_EQ(text.find("not printed"), std::string::npos);
  EXPECT_NE(text.find(":" + std::to_string(getpid()) + ":"), std::string::npos);
  unsetenv("SIGNLION_DEBUG_FILE");
  unsetenv("SIGNLION_DEBUG");
  logReinit();
  remove(path.c_str());
}

TEST(Log, SubsystemFilter) {
  setenv("SIGNLION_DEBUG", "INFO", 1);
  setenv("SIGNLION_DEBUG_SUBSYS", "NET,INIT", 1);
  logReinit();
  EXPECT_TRUE(logEnabled(kLogInfo, kSubsysNet));
  EXPECT_TRUE(logEnabled(kLogInfo, kSubsysInit));
  EXPECT_FALSE(logEnabled(kLogInfo, kSubsysBits));
  EXPECT_FALSE(logEnabled(kLogTrace, kSubsysNet));
  EXPECT_TRUE(logEnabled(kLogWarn, kSubsysBits));  // WARN ignores the mask
  setenv("SIGNLION_DEBUG_SUBSYS", "^NET", 1);
  logReinit();
  EXPECT_FALSE(logEnabled(kLogInfo, kSubsysNet));
  EXPECT_TRUE(logEnabled(kLogInfo, kSubsysBits));
  unsetenv("SIGNLION_DEBUG");
  unsetenv("SIGNLION_DEBUG_SUBSYS");
  logReinit();
  EXPECT_FALSE(logEnabled(kLogInfo, kSubsysNet));
}

int gSinkCalls = 0;
void countingSink(int, unsigned long, const char*, int, const char*, ...) { gSinkCalls++; }

TEST(Log, ExternalSinkReceivesLines) {
  gSinkCalls = 0;
  logSetSink(countingSink);
  WARN("to the sink");
  INFO(kSubsysNet, "also to the sink");
  logSetSink(nullptr);
  EXPECT_EQ(gSinkCalls, 2);
}

ncclResult_t failsWithSystemError() {
  SYSCHECK(close(-1), "close");
  return ncclSuccess;
}
ncclResult_t propagates() {
  NCCLCHECK(failsWithSystemError());
  return ncclSuccess;
}
ncclResult_t gotoCleanup(bool* cleaned) {
  ncclResult_t res = ncclSuccess;
  NCCLCHECKGOTO(failsWithSystemError(), res, fail);
  return ncclSuccess;
fail:
  *cleaned = true;
  return res;
}

TEST(Checks, SystemErrorsBecomeResults) {
  EXPECT_EQ(failsWithSystemError(), ncclSystemError);
  EXPECT_EQ(propagates(), ncclSystemError);
  bool cleaned = false;
  EXPECT_EQ(gotoCleanup(&cleaned), ncclSystemError);
  EXPECT_TRUE(cleaned);
}

TEST(Config, DefaultsAndValidation) {
  ResolvedConfig r;
  ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
  EXPECT_EQ(r.algorithm, ncclSignAlgoAuto);
  EXPECT_EQ(r.zeroRule, ncclSignZeroPositive);
  EXPECT_EQ(r.tieRule, ncclSignTieZero);
  EXPECT_EQ(r.timeoutMs, 60000);

  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.tieRule = ncclSignTiePositive;
  c.timeoutMs = 1234;
  ASSERT_EQ(resolveConfig(&c, "test", &r), ncclSuccess);
  EXPECT_EQ(r.tieRule, ncclSignTiePositive);
  EXPECT_EQ(r.timeoutMs, 1234);

  auto bad = [&](auto mutate) {
    ncclSignConfig_t b = NCCL_SIGN_CONFIG_INITIALIZER;
    mutate(b);
    return resolveConfig(&b, "test", &r);
  };
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.size = 8; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.magic = 1; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.version = 99999; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.algorithm = ncclSignNumAlgos; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.algorithm = -1; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.zeroRule = 3; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.tieRule = 7; }), ncclInvalidArgument);
  EXPECT_EQ(bad([](ncclSignConfig_t& b) { b.timeoutMs = -5; }), ncclInvalidArgument);
}

TEST(Config, EnvironmentForcesAlgorithm) {
  ResolvedConfig r;
  {
    EnvGuard g("SIGNLION_ALGO", "hd");
    ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
    EXPECT_EQ(r.algorithm, ncclSignAlgoHalvingDoubling);
  }
  {
    EnvGuard g("SIGNLION_ALGO", "direct");
    ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
    EXPECT_EQ(r.algorithm, ncclSignAlgoDirect);
  }
  {
    EnvGuard g("SIGNLION_ALGO", "tree");
    ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
    EXPECT_EQ(r.algorithm, ncclSignAlgoTree);
  }
  // A bad value WARNs and keeps the default (param.h's rule; tests/unit/param_rule_test.cc covers every variable).
  {
    EnvGuard g("SIGNLION_ALGO", "bogus");
    ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
    EXPECT_EQ(r.algorithm, ncclSignAlgoAuto);
  }
  {
    EnvGuard g("SIGNLION_TIMEOUT_MS", "0");
    ASSERT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess);
    EXPECT_EQ(r.timeoutMs, 60000);
  }
}

TEST(Config, AlgoNamesRoundTrip) {
  for (int a = 0; a < ncclSignNumAlgos; a++) {
    ncclSignAlgo_t parsed;
    ASSERT_TRUE(parseAlgoName(algoName(static_cast<ncclSignAlgo_t>(a)), &parsed));
    EXPECT_EQ(parsed, a);
  }
}

}  // namespace
}  // namespace signlion
