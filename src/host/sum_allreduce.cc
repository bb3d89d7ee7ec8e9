// ncclSignHostSumAllReduce: a plain ring sum all-reduce (reduce-scatter, then
// all-gather) of fp32 or bf16 over the same links as the sign all-reduce: the
// baseline it is measured against, 2(N-1)/N * 32 (or 16) bits per element.
#include <algorithm>
#include <cstring>

#include "algo/schedule.h"
#include "bits/bits.h"
#include "bits/float16.h"
#include "common/checks.h"
#include "host/host_params.h"
#include "host/communicator.h"
#include "host/transfers.h"


namespace signlion {
namespace host {
namespace {

// dst[i] += src[i]; bf16 is added in fp32 and rounded once per hop.
void addInto(char* dst, const char* src, size_t n, ncclDataType_t dt) {
  if (dt == ncclFloat32) {
    float* d = reinterpret_cast<float*>(dst);
    const float* s = reinterpret_cast<const float*>(src);
    for (size_t i = 0; i < n; i++) d[i] += s[i];
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
    for (size_t i = 0; i < n; i++) d[i] = bits::floatToBf16(bits::bf16ToFloat(d[i]) + bits::bf16ToFloat(s[i]));
  }
}

// Shard i of n over count elements: the schedules' balanced split.
struct Shard {
  size_t begin, count;
};
Shard shardOf(size_t count, int n, int i) {
  algo::Range r = algo::shardRange((int64_t)count, n, i);
  return {(size_t)r.begin, (size_t)r.size()};
}

constexpr const char* kFn = "ncclSignHostSumAllReduce";

// One segment: count elements of send summed into recv. The ring runs in the
// registered arena (the user's buffers are not registered): a working copy
// of the segment, a stage for one incoming shard, and the first message of
// the segment each way, which carries the call's header (c->check.begin) in
// front of the first step's first chunk (alone when that shard is empty).
ncclResult_t ringSum(ncclSignComm* c, const char* send, char* recv, size_t count, ncclDataType_t dt) {
  const int n = c->nranks, rank = c->rank, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t es = bits::typeSize(dt);
  if (n == 1) {
    if (send != recv && count > 0) memmove(recv, send, count * es);
    return ncclSuccess;
  }
  const size_t chunk = (size_t)c->costModel.params().overlapChunkBytes / es;
  const size_t shardMax = shardOf(count, n, 0).count;
  const size_t firstMax = kHeaderBytes + std::min(chunk, shardMax) * es;
  NCCLCHECK(c->arena.reserve((count + shardMax) * es + 2 * firstMax, *c->net, c->links));
  char* buf = c->arena.base();
  char* stage = buf + count * es;
  char* firstOut = stage + shardMax * es;
  char* firstIn = firstOut + firstMax;
  memcpy(buf, send, count * es);
  void* sendComm = c->links.peer(next).sendComm;
  void* recvComm = c->links.peer(prev).recvComm;
  Transfers& t = *c->sumTransfers;
  for (int phase = 0; phase < 2; phase++) {  // 0: reduce-scatter, 1: all-gather
    for (int k = 0; k < n - 1; k++) {
      // Reduce-scatter sends shard rank-k and adds shard rank-k-1; the
      // all-gather forwards shard rank+1-k and stores shard rank-k.
      Shard out = shardOf(count, n, ((phase == 0 ? rank - k : rank + 1 - k) % n + n) % n);
      Shard in = shardOf(count, n, ((phase == 0 ? rank - k - 1 : rank - k) % n + n) % n);
      const bool first = phase == 0 && k == 0;
      t.clear();
      if (first && out.count == 0) c->check.sendAlone(t, sendComm);
      if (first && in.count == 0) c->check.recvAlone(t, prev, recvComm);
      for (size_t b = 0; b < out.count; b += chunk) {
        size_t bytes = std::min(chunk, out.count - b) * es;
        char* data = buf + (out.begin + b) * es;
        if (first && b == 0) {
          c->check.writeHeader(firstOut);
          memcpy(firstOut + kHeaderBytes, data, bytes);
          data = firstOut;
          bytes += kHeaderBytes;
        }
        t.send(sendComm, data, bytes, c->arena.mhandle(sendComm));
      }
      for (size_t b = 0; b < in.count; b += chunk) {
        size_t bytes = std::min(chunk, in.count - b) * es;
        char* dst = phase == 0 ? stage + b * es : buf + (in.begin + b) * es;
        if (first && b == 0)  // judged by its header before its size
          t.recv(recvComm, firstIn, bytes + kHeaderBytes, c->arena.mhandle(recvComm), b, /*exactSize=*/false);
        else
          t.recv(recvComm, dst, bytes, c->arena.mhandle(recvComm), b);
      }
      NCCLCHECK(t.run([&](size_t b, size_t bytes) {
        if (b & kHeaderCookie) return c->check.verify((int)(b & ~kHeaderCookie), nullptr, bytes, 0, kFn);
        size_t len = std::min(chunk, in.count - b);
        const char* src = stage + b * es;
        if (first && b == 0) {  // only phase 0 has a first message
          NCCLCHECK(c->check.verify(prev, firstIn, bytes, len * es, kFn));
          src = firstIn + kHeaderBytes;
        }
        if (phase == 0) addInto(buf + (in.begin + b) * es, src, len, dt);
        return ncclSuccess;
      }));
    }
  }
  memcpy(recv, buf, count * es);
  return ncclSuccess;
}

}  // namespace
}  // namespace host
}  // namespace signlion

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclSignHostSumAllReduce(
    const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclSignComm_t comm) {
  using signlion::host::kFn;
  ncclSignComm* c = signlion::host::checkComm(comm, kFn);
  if (c == nullptr) return ncclInvalidArgument;
  ARGCHECK(datatype == ncclFloat32 || datatype == ncclBfloat16, kFn, "datatype",
           "%d (%s): the sum baseline takes ncclFloat32 or ncclBfloat16", (int)datatype,
           signlion::bits::typeName(datatype));
  ARGCHECK(sendbuff != nullptr || count == 0, kFn, "sendbuff", "NULL with count %zu", count);
  ARGCHECK(recvbuff != nullptr || count == 0, kFn, "recvbuff", "NULL with count %zu", count);
  const size_t es = signlion::bits::typeSize(datatype);
  ARGCHECK(count <= (size_t)PTRDIFF_MAX / es, kFn, "count", "%zu elements of %zu bytes exceed PTRDIFF_MAX bytes", count,
           es);
  NCCLCHECK(signlion::host::callStart(c, kFn));
  c->pacing.follow(*c->net, c->links, 1);  // a ring: one peer at a time
  signlion::CallSignature h;
  h.seq = c->calls;
  h.count = count;
  h.kind = (uint8_t)signlion::CallKind::kSumAllReduce;
  h.datatype = (uint8_t)datatype;
  const size_t segment = signlion::host::hostSegmentElements();
  h.segment = segment;
  ncclResult_t res = ncclSuccess;
  if (count == 0) {  // no data: the headers still go round, so a disagreement is an error everywhere
    res = c->check.checkRing(*c->sumTransfers, c->links, h, kFn);
  }
  for (size_t done = 0; done < count && res == ncclSuccess; done += segment) {
    h.part = (uint32_t)(done / segment);
    c->check.begin(h);
    res = signlion::host::ringSum(c, static_cast<const char*>(sendbuff) + done * es,
                                  static_cast<char*>(recvbuff) + done * es, std::min(segment, count - done), datatype);
  }
  return signlion::host::callEnd(c, res);
}
