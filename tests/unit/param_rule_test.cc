// The one rule for a bad environment value (common/param.h, docs/PARAMETERS.md),
// over every variable the docs list (docs/PARAMETERS.md and the socket
// transport's table in docs/PLUGIN.md): a malformed or out-of-range tuning
// value WARNs naming the variable and the value and behaves as if unset (the
// default); a value naming what to use (an interface, a port range, a net
// plugin) that cannot be used fails where it is needed, with a WARN naming
// the variable. A variable the docs add without an entry here fails the test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "algo/cost_model.h"
#include "algo/schedule.h"
#include "bits/bits.h"
#include "common/config.h"
#include "common/debug.h"
#include "common/param.h"
#include "common/warn_capture.h"
#include "host/host_params.h"
#include "host/send_pacing.h"
#include "lion/lion_params.h"
#include "nccl_sign.h"
#include "net/socket_devices.h"
#include "net/socket_params.h"
#include "net/socket_port_range.h"
#include "plugin/ucx/ucx_ptr_support.h"
#ifdef SIGNLION_TEST_NCCL_LIBRARY
#include "nccl/call_agreement.h"
#include "nccl/nccl_params.h"
#endif

namespace signlion {
namespace {

// The variables named in the first column of the docs' tables.
std::set<std::string> documentedVariables() {
  std::set<std::string> out;
  const std::regex var("`((SIGNLION|GLOO|NCCL)_[A-Z0-9_]+)`");
  for (const char* doc : {"docs/PARAMETERS.md", "docs/PLUGIN.md"}) {
    std::ifstream f(std::string(SIGNLION_TEST_SOURCE_DIR) + "/" + doc);
    EXPECT_TRUE(f.good()) << doc;
    bool tunables = std::string(doc) == "docs/PARAMETERS.md";  // PLUGIN.md: its "Tunables" table only
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("## ", 0) == 0 && std::string(doc) == "docs/PLUGIN.md")
        tunables = line.rfind("## Tunables", 0) == 0;
      if (!tunables || line.rfind("| `", 0) != 0) continue;
      const std::string first = line.substr(0, line.find(" | ", 2));
      for (std::sregex_iterator m(first.begin(), first.end(), var), end; m != end; ++m) out.insert((*m)[1]);
    }
  }
  return out;
}

struct ScopedUnset {
  std::string name, saved;
  bool had;
  explicit ScopedUnset(const std::string& n) : name(n), had(getenv(n.c_str()) != nullptr) {
    if (had) saved = getenv(n.c_str());
    unsetenv(n.c_str());
    paramResetCache();
  }
  ~ScopedUnset() {
    if (had) setenv(name.c_str(), saved.c_str(), 1); else unsetenv(name.c_str());
    paramResetCache();
    logReinit();
  }
};

// How each documented variable is read, and what a bad value must do.
struct Variable {
  std::vector<std::string> bad;         // a junk value, then out-of-range ones where the variable has a range
  std::function<std::string()> effect = nullptr;  // keeps the default: what the reader makes of it (as unset)
  std::function<bool()> failed = nullptr;         // fails instead: whether the entry point that needs it failed
  const char* notHere = nullptr;                  // not read by this binary: why (and what covers it)
};

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::map<std::string, Variable> variables() {
  auto config = [](auto field) {
    return [field]() {
      ResolvedConfig r;
      EXPECT_EQ(resolveConfig(nullptr, "test", &r), ncclSuccess) << "a bad value must not fail resolveConfig";
      return std::to_string(field(r));
    };
  };
  auto cost = [](auto field) { return [field]() { return num(field(algo::CostModel().params())); }; };
  auto logged = []() {  // the logger re-reads its variables; its WARN is what shows the default kept
    logReinit();
    return std::string();
  };
  auto noDevice = []() { return net::findSocketDevices(1).empty(); };
  std::map<std::string, Variable> v;
  v["SIGNLION_DEBUG"] = {{"bogus"}, logged};
  v["SIGNLION_DEBUG_SUBSYS"] = {{"INIT,NETT"}, logged};
  v["SIGNLION_DEBUG_FILE"] = {{"/nonexistent-dir/signlion.log"}, logged};
  v["SIGNLION_ALGO"] = {{"bogus"}, config([](const ResolvedConfig& r) { return (int)r.algorithm; })};
  v["SIGNLION_TIMEOUT_MS"] = {{"junk", "0", "-1", "2147483648"},
                              config([](const ResolvedConfig& r) { return r.timeoutMs; })};
  v["SIGNLION_HOSTID"] = {{}, nullptr, nullptr, "any string is a node identity: nothing to reject"};
  v["SIGNLION_FIELD_BITS"] = {{"junk", "-1", "33"},
                              []() { return std::to_string(algo::detail::fieldSumBits(4, nullptr)); }};
  v["SIGNLION_RESULT_CODING"] = {{"junk", "7", "-1"}, []() { return std::to_string(algo::resultCodingEnabled()); }};
  v["SIGNLION_NET_PLUGIN"] = {{"no-such-plugin"}, nullptr, []() {
                                ncclSignUniqueId id;
                                EXPECT_EQ(ncclSignGetUniqueId(&id), ncclSuccess);
                                ncclSignComm_t comm = nullptr;
                                return ncclSignCommInitRank(&comm, 1, id, 0, nullptr) == ncclInvalidArgument;
                              }};
  v["SIGNLION_SOCKET_PORT_RANGE"] = {{"junk", "70000-70010", "9-5"}, nullptr, []() {
                                       net::PortRange r;
                                       return !net::configuredPortRange(&r);
                                     }};
  v["SIGNLION_SOCKET_IFNAME"] = {{"=nosuchif0"}, nullptr, noDevice};
  v["GLOO_SOCKET_IFNAME"] = {{"nosuchif0"}, nullptr, noDevice};
  v["NCCL_SOCKET_IFNAME"] = {{"=nosuchif0"}, nullptr, noDevice};
  v["SIGNLION_SOCKET_FAMILY"] = {{"AF_BOGUS"}, []() {
                                   std::string out;
                                   for (const auto& d : net::findSocketDevices(4)) out += d.name + " ";
                                   return out;
                                 }};
  v["SIGNLION_NSOCKS"] = {{"junk", "-1", "65"}, []() { return std::to_string(net::signlionParamNsocks()); }};
  v["SIGNLION_NTHREADS"] = {{"junk", "-1", "0", "65"}, []() { return std::to_string(net::signlionParamNthreads()); }};
  v["SIGNLION_SOCKET_TIMEOUT"] = {{"junk", "-5", "0"}, []() { return std::to_string(net::socketTimeoutMs()); }};
  v["SIGNLION_SOCKET_CHUNKSIZE"] = {{"junk", "100", "2G"},
                                    []() { return std::to_string(net::signlionParamSocketChunkSize()); }};
  v["SIGNLION_SOCKET_INLINE"] = {{"junk", "-1", "2M"},
                                 []() { return std::to_string(net::signlionParamSocketInline()); }};
  v["SIGNLION_SOCKET_DEFAULT_SPEED"] = {{"junk", "0", "-10"},
                                        []() { return std::to_string(net::signlionParamSocketDefaultSpeed()); }};
  v["SIGNLION_SOCKET_SPEED"] = {{"junk", "-1", "2G"}, []() { return std::to_string(net::signlionParamSocketSpeed()); }};
  v["SIGNLION_UCX_CUDA_POINTERS"] = {{"junk", "2", "-1"},
                                     []() { return std::to_string(net::signlionParamUcxCudaPointers()); }};
  v["SIGNLION_BITS_ISA"] = {{"sse9"}, []() { return bits::bitsIsaSetting(); }};
  v["SIGNLION_HOST_CHUNK_BYTES"] = {{"junk", "-1", "8", "2G"}, []() { return std::to_string(host::hostChunkBytes()); }};
  v["SIGNLION_HOST_SEGMENT"] = {{"junk", "-64", "63"}, []() { return std::to_string(host::hostSegmentElements()); }};
  v["SIGNLION_HOST_PACING"] = {{"junk", "2", "-1"}, []() { return std::to_string(signlionParamHostPacing()); }};
  v["SIGNLION_HOST_PACK_AHEAD"] = {{"junk", "2", "-1"}, []() { return std::to_string(signlionParamHostPackAhead()); }};
  v["SIGNLION_COST_ALPHA_NS"] = {{"junk", "0", "-5"}, cost([](const algo::CostParams& p) { return p.alphaUs; })};
  v["SIGNLION_COST_BETA_MBPS"] = {{"junk", "0", "-5"},
                                  cost([](const algo::CostParams& p) { return p.betaBytesPerUs; })};
  v["SIGNLION_COST_GAMMA_PS"] = {{"junk", "0", "-5"},
                                 cost([](const algo::CostParams& p) { return p.gammaUsPerPlane; })};
  v["SIGNLION_COST_INTRA_ALPHA_NS"] = {{"junk", "0", "-5"},
                                       cost([](const algo::CostParams& p) { return p.intraAlphaUs; })};
  v["SIGNLION_COST_INTRA_BETA_MBPS"] = {{"junk", "0", "-5"},
                                        cost([](const algo::CostParams& p) { return p.intraBetaBytesPerUs; })};
  v["SIGNLION_COST_PACK_PS"] = {{"junk", "0", "-5"},
                                cost([](const algo::CostParams& p) { return p.packUsPerElement; })};
  v["SIGNLION_COST_DECIDE_PS"] = {{"junk", "0", "-5"},
                                  cost([](const algo::CostParams& p) { return p.decideUsPerElement; })};
  v["SIGNLION_LION_CHUNK"] = {{"junk", "-1", "63"}, []() { return std::to_string(lion::lionChunkElements()); }};
  v["SIGNLION_LIBRARY"] = {{}, nullptr, nullptr,
                           "read by the Python package only: a path that does not load raises OSError naming it"};
#ifdef SIGNLION_TEST_NCCL_LIBRARY
  auto ncclCost = [](auto field) { return [field]() { return num(field(nccl::costParams())); }; };
  auto ncclNode = [](auto field) { return [field]() { return num(field(nccl::nodeCostParams())); }; };
  v["SIGNLION_CHECK"] = {{"junk", "2", "-1"}, []() { return std::to_string(nccl::checkCallsEnabled()); }};
  v["SIGNLION_NCCL_CHUNK_BYTES"] = {{"junk", "8", "2G"}, []() { return std::to_string(nccl::chunkBytes()); }};
  v["SIGNLION_NCCL_SEGMENT"] = {{"junk", "-1", "63"}, []() { return std::to_string(nccl::segmentElements()); }};
  v["SIGNLION_NCCL_COST_ALPHA_NS"] = {{"junk", "0", "-5"},
                                      ncclCost([](const algo::CostParams& p) { return p.alphaUs; })};
  v["SIGNLION_NCCL_COST_BETA_MBPS"] = {{"junk", "0", "-5"},
                                       ncclCost([](const algo::CostParams& p) { return p.betaBytesPerUs; })};
  v["SIGNLION_NCCL_COST_GAMMA_PS"] = {{"junk", "0", "-5"},
                                      ncclCost([](const algo::CostParams& p) { return p.gammaUsPerPlane; })};
  v["SIGNLION_NCCL_COST_COLLECTIVE_STEP_NS"] = {
      {"junk", "0", "-5"}, ncclCost([](const algo::CostParams& p) { return p.collectiveStepUs; })};
  v["SIGNLION_NCCL_COST_NET_ALPHA_NS"] = {{"junk", "0", "-5"},
                                          ncclNode([](const algo::CostParams& p) { return p.alphaUs; })};
  v["SIGNLION_NCCL_COST_NET_BETA_MBPS"] = {{"junk", "0", "-5"},
                                           ncclNode([](const algo::CostParams& p) { return p.betaBytesPerUs; })};
  v["SIGNLION_NCCL_LIBRARY"] = {{}, nullptr, nullptr,
                                "names the NCCL to load: one that does not load fails the NCCL path's first call "
                                "(tests/gpu)"};
#else
  for (const char* name :
       {"SIGNLION_CHECK", "SIGNLION_NCCL_CHUNK_BYTES", "SIGNLION_NCCL_SEGMENT", "SIGNLION_NCCL_COST_ALPHA_NS",
        "SIGNLION_NCCL_COST_BETA_MBPS", "SIGNLION_NCCL_COST_GAMMA_PS", "SIGNLION_NCCL_COST_COLLECTIVE_STEP_NS",
        "SIGNLION_NCCL_COST_NET_ALPHA_NS", "SIGNLION_NCCL_COST_NET_BETA_MBPS", "SIGNLION_NCCL_LIBRARY"})
    v[name] = {{}, nullptr, nullptr, "read on the NCCL path, which this build lacks (a build with NCCL checks it)"};
#endif
  return v;
}

TEST(ParamRule, EveryDocumentedVariableHasAnEntry) {
  const std::set<std::string> docs = documentedVariables();
  const std::map<std::string, Variable> vars = variables();
  EXPECT_GE(docs.size(), 40u) << "the docs' tables were not read";
  for (const std::string& d : docs) EXPECT_TRUE(vars.count(d)) << d << " is documented but not covered here";
  for (const auto& [name, v] : vars) EXPECT_TRUE(docs.count(name)) << name << " is covered here but not documented";
}

// Each bad value: a WARN naming the variable and the value; then either the
// reader behaves as with the variable unset (keeping the default), or, for a
// variable naming what to use, the entry point that needs it fails.
TEST(ParamRule, BadValuesWarnAndKeepTheDefaultOrFailNamingTheVariable) {
  // The interface variables are read in this order: each entry sets only its own.
  ScopedUnset ifname("SIGNLION_SOCKET_IFNAME"), gloo("GLOO_SOCKET_IFNAME"), nccl("NCCL_SOCKET_IFNAME");
  for (const auto& [name, v] : variables()) {
    SCOPED_TRACE(name);
    if (v.notHere != nullptr) {
      EXPECT_TRUE(v.bad.empty());
      std::printf("%-40s not checked here: %s\n", name.c_str(), v.notHere);
      continue;
    }
    ASSERT_FALSE(v.bad.empty());
    ScopedUnset unset(name);
    std::string unsetEffect;
    if (v.effect) {
      logReinit();
      test::WarnCapture quiet;
      unsetEffect = v.effect();
      EXPECT_EQ(quiet.count(), 0) << "unset already WARNs";
    }
    for (const std::string& value : v.bad) {
      SCOPED_TRACE(name + "=" + value);
      setenv(name.c_str(), value.c_str(), 1);
      paramResetCache();
      test::WarnCapture warns;
      if (v.effect) {
        EXPECT_EQ(v.effect(), unsetEffect) << "the value was not ignored for the default";
        EXPECT_GE(warns.countContaining(("keeping the default")), 1);
      } else {
        EXPECT_TRUE(v.failed()) << "the entry point that needs it did not fail";
      }
      int named = 0;
      for (const std::string& l : warns.lines())
        named += l.find(name) != std::string::npos && l.find(value) != std::string::npos;
      EXPECT_GE(named, 1) << "no WARN names " << name << " and " << value;
      unsetenv(name.c_str());
      paramResetCache();
    }
  }
}

}  // namespace
}  // namespace signlion
