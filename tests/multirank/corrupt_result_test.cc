// A coded result from a peer with a byte no coding makes (above 242) fails
// the call on the rank that receives it, with a WARN naming the sender: it is
// never decoded into a result. The peers run over a socket transport that
// sets the first byte of every message of one size to 0xff
// (corrupt_result_net.cc); at N = 2 with 20 blocks only the coded result
// shards (10 blocks, 2 groups: 128 bytes) have that size. The same run with a
// message size nobody sends equals the reference. (Before the coding, the
// result shards were 160 bytes of planes and both calls succeeded.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/param.h"
#include "common/ranks.h"
#include "common/vote_inputs.h"
#include "common/warn_capture.h"
#include "common/config.h"
#include "nccl_sign.h"

namespace signlion {
namespace {

using test::Bytes;

void runTwoRanks(ncclSignAlgo_t algo, const char* corruptSize, ncclResult_t* res, std::vector<Bytes>* out,
                 const std::vector<Bytes>& in, size_t count) {
  setenv("SIGNLION_TEST_CORRUPT_SIZE", corruptSize, 1);
  out->assign(2, Bytes(count * 4));
  ncclSignConfig_t c = NCCL_SIGN_CONFIG_INITIALIZER;
  c.algorithm = algo;
  c.netPlugin = SIGNLION_TEST_CORRUPT_PLUGIN;
  c.timeoutMs = 5000;
  test::withRanks(2, c, [&](int rank, ncclSignComm_t comm) {
    res[rank] = ncclSignHostAllReduce(in[rank].data(), (*out)[rank].data(), count, ncclFloat32, ncclSignMajority, comm);
  });
}

TEST(CorruptResult, AByteAbove242FromAPeerFailsTheCall) {
  const size_t count = 20 * 64;
  const std::vector<Bytes> in = test::randomVoteInputs(2, count, ncclFloat32, 41);
  const Bytes want = test::referenceOutput(in, count, ncclFloat32, ncclSignMajority, ncclSignZeroPositive,
                                           ncclSignTieZero);
  for (ncclSignAlgo_t algo : {ncclSignAlgoRing, ncclSignAlgoHalvingDoubling}) {
    ncclResult_t res[2];
    std::vector<Bytes> out;
    {
      test::WarnCapture warns;
      runTwoRanks(algo, "128", res, &out, in, count);
      // Both ranks send a corrupt shard; the rank that decodes one first
      // fails and closes its links, so the other may see that instead.
      int decoded = 0;
      for (int r = 0; r < 2; r++) {
        EXPECT_NE(res[r], ncclSuccess) << algoName(algo) << " rank " << r;
        if (res[r] != ncclSystemError) continue;
        decoded++;
        const std::string line = "rank " + std::to_string(1 - r) + " sent rank " + std::to_string(r) +
                                 " a malformed coded result";
        EXPECT_EQ(warns.countContaining(line.c_str()), 1) << algoName(algo);
      }
      EXPECT_GE(decoded, 1) << algoName(algo);
    }
    runTwoRanks(algo, "1", res, &out, in, count);  // no message has 1 byte
    for (int r = 0; r < 2; r++) {
      EXPECT_EQ(res[r], ncclSuccess) << algoName(algo) << " rank " << r;
      EXPECT_EQ(out[r], want) << algoName(algo) << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace signlion
