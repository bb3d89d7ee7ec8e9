// libnccl-net-corrupt-result-test.so: signlion's socket transport with one
// change, for corrupt_result_test.cc: every message of exactly
// SIGNLION_TEST_CORRUPT_SIZE bytes (the test picks a size only a coded result
// has) leaves with its first byte set to 0xff, a value no coded byte takes
// (src/bits/trits.h: at most 242). The byte is changed in the sender's own
// buffer, the message the executor staged for this send alone.
#include <cstdlib>
#include <cstring>

#include "net/socket_net.h"

namespace {

ncclNet_v11_t inner;

// Read at every send: the test changes it between communicators (never while
// one runs).
size_t corruptSize() {
  const char* v = getenv("SIGNLION_TEST_CORRUPT_SIZE");
  return v ? (size_t)strtoull(v, nullptr, 10) : 0;
}

ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mh, void* ph, void** req) {
  if (size != 0 && size == corruptSize()) static_cast<unsigned char*>(data)[0] = 0xff;
  return inner.isend(comm, data, size, tag, mh, ph, req);
}

ncclNet_v11_t make() {
  inner = *signlion::net::socketNetV11();
  ncclNet_v11_t n = inner;
  n.name = "corrupt-result-test";
  n.isend = isend;
  return n;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = make();
}
