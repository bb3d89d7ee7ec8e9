// ncclSignAllReduce(WithConfig), ncclSignCommSetConfig and
// ncclSignCommRelease: the sign all-reduce on device buffers and the user's
// NCCL communicator (docs/NCCL.md). Arguments are checked before anything touches CUDA or
// NCCL where that is possible; long messages run as segments of
// SIGNLION_NCCL_SEGMENT elements, each a whole schedule, so the scratch stays
// bounded whatever the count.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "algo/schedule.h"
#include "bits/bits.h"
#include "common/cuda_checks.h"
#include "common/config.h"
#include "nccl/call_agreement.h"
#include "nccl/comm_context.h"
#include "nccl/device_backend.h"
#include "nccl/nccl_executor.h"
#include "nccl/nccl_params.h"
#include "nccl/nccl_symbols.h"
#include "nccl/segments.h"
#include "nccl/sign_allreduce_nccl.h"

#define SIGNLION_API extern "C" __attribute__((visibility("default")))

namespace signlion {
namespace nccl {
namespace {

// The largest count whose blocks, and whose element index of any block,
// int64 arithmetic still holds (schedules count in int64 blocks).
constexpr uint64_t kMaxCount =
    (static_cast<uint64_t>(INT64_MAX) - (bits::kBlockElems - 1)) / bits::kBlockElems * bits::kBlockElems;

// A buffer the comm's device can read and write: device memory of that
// device, managed memory, or host memory mapped into the device.
ncclResult_t checkDeviceBuffer(const void* ptr, const char* name, int dev, const char* caller) {
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {  // some drivers say so of plain host memory
    (void)cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
    attr.devicePointer = nullptr;
  } else {
    CUDACHECK(err);
  }
  ARGCHECK(attr.devicePointer != nullptr, caller, name,
           "%p is host memory the device cannot access; pass device memory (or managed or mapped pinned memory)", ptr);
  ARGCHECK(attr.type != cudaMemoryTypeDevice || attr.device == dev, caller, name,
           "%p is memory of device %d; the communicator's device is %d", ptr, attr.device, dev);
  return ncclSuccess;
}

// SIGNLION_CHECK=1: the call's signature against every rank's, before
// anything of the call is enqueued.
ncclResult_t checkCall(const NcclApi& api, CommContext& ctx, const algo::OpSpec& spec, size_t count, ncclDataType_t dt,
                       cudaStream_t stream, bool capturing) {
  static const char* kFn = "ncclSignAllReduce (SIGNLION_CHECK=1)";
  if (capturing) {
    WARN("%s: the check waits for the stream, which CUDA graph capture forbids: unset SIGNLION_CHECK to capture", kFn);
    return ncclInvalidUsage;
  }
  CallSignature mine;
  mine.seq = ++ctx.calls;
  mine.count = count;
  mine.segment = segmentElements();
  mine.rank = ctx.shape.rank;
  mine.kind = (uint8_t)CallKind::kSignAllReduce;
  mine.datatype = (uint8_t)dt;
  mine.op = (uint8_t)spec.op;
  mine.zeroRule = (uint8_t)spec.zeroRule;
  mine.tieRule = (uint8_t)spec.tieRule;
  mine.algorithm = (uint8_t)ctx.config.algorithm;
  ctx.checkTable.resize((size_t)ctx.shape.nranks);
  uint64_t* scratch;
  NCCLCHECK(ctx.scratch(agreementWords(ctx.shape.nranks) * 8, stream, capturing, &scratch));
  DeviceBackend backend(api, ctx.comm, stream, ctx.side(), ctx.forkEvent(), ctx.joinEvent());
  return checkAgreement(backend, mine, ctx.shape.nranks, scratch, ctx.checkTable.data(), kFn);
}

}  // namespace

ncclResult_t signAllReduce(const NcclApi* api, const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclSignOp_t op, const ncclSignCallConfig_t* config,
                           ncclComm_t comm, cudaStream_t stream, const char* kFn) {
  ARGCHECK(comm != nullptr, kFn, "comm", "must not be NULL");
  CallRules rules;
  NCCLCHECK(resolveCallConfig(config, kFn, &rules));
  ARGCHECK(sendbuff != nullptr || count == 0, kFn, "sendbuff", "NULL with count %zu", count);
  ARGCHECK(recvbuff != nullptr || count == 0, kFn, "recvbuff", "NULL with count %zu", count);
  NCCLCHECK(bits::checkVoteArgs(datatype, (int)op, kFn));
  const size_t esize = bits::typeSize(datatype);
  ARGCHECK(count <= (size_t)PTRDIFF_MAX / esize, kFn, "count", "%zu elements of %zu bytes exceed PTRDIFF_MAX bytes",
           count, esize);
  ARGCHECK(count <= kMaxCount, kFn, "count", "%zu elements exceed the %llu that int64 block arithmetic holds", count,
           (unsigned long long)kMaxCount);

  if (api == nullptr) NCCLCHECK(ncclApi(&api));
  CommShape shape;
  NCCLCHECK(queryComm(*api, comm, kFn, &shape));
  TRACE(kSubsysColl, "%s send %p recv %p count %zu %s op %d comm %p (rank %d/%d, device %d) stream %p", kFn, sendbuff,
        recvbuff, count, bits::typeName(datatype), (int)op, (void*)comm, shape.rank, shape.nranks, shape.cudaDev,
        (void*)stream);
  // SIGNLION_CHECK: even a count of 0 takes part in the check, so a rank
  // that passed another count fails rather than waits in NCCL.
  const bool check = checkCallsEnabled();
  if (count == 0 && !check) return ncclSuccess;  // every rank passes 0: nothing moves

  std::shared_ptr<CommContext> ctx;
  NCCLCHECK(commContext(comm, shape, &ctx));
  std::lock_guard<std::mutex> lock(ctx->mu);
  DeviceGuard device;
  NCCLCHECK(device.set(shape.cudaDev));
  if (count > 0) {
    NCCLCHECK(checkDeviceBuffer(sendbuff, "sendbuff", shape.cudaDev, kFn));
    if (recvbuff != sendbuff) NCCLCHECK(checkDeviceBuffer(recvbuff, "recvbuff", shape.cudaDev, kFn));
  }

  // Read under ctx->mu: a rule the call leaves to the comm is the comm's as
  // ncclSignCommSetConfig last set it before this call.
  const algo::OpSpec spec{op, rules.zero(ctx->config), rules.tie(ctx->config)};
  bool capturing;
  NCCLCHECK(ctx->beginCall(stream, &capturing));
  // The comm's first call learns its nodes (outside capture: beginCall
  // refuses a first call during capture).
  ncclResult_t res = ctx->learnNodes(*api, stream, capturing);
  if (res == ncclSuccess && check) res = checkCall(*api, *ctx, spec, count, datatype, stream, capturing);
  // After the check, which waited for the stream: every earlier call's decodes are visible.
  if (res == ncclSuccess) res = ctx->malformedResults(kFn);
  if (res == ncclSuccess && count > 0)
    res = runSegments(*api, *ctx, spec, static_cast<const char*>(sendbuff), static_cast<char*>(recvbuff), count,
                      datatype, stream, capturing);
  // Also after a failure: the next call must come after whatever was enqueued.
  ncclResult_t end = ctx->endCall(stream, capturing);
  NCCLCHECK(res);
  return end;
}

ncclResult_t setCommConfig(const NcclApi* api, ncclComm_t comm, const ncclSignConfig_t* config) {
  static const char* kFn = "ncclSignCommSetConfig";
  ARGCHECK(comm != nullptr, kFn, "comm", "must not be NULL");
  ResolvedConfig resolved;
  NCCLCHECK(resolveConfig(config, kFn, &resolved));
  if (api == nullptr) NCCLCHECK(ncclApi(&api));
  CommShape shape;
  NCCLCHECK(queryComm(*api, comm, kFn, &shape));
  std::shared_ptr<CommContext> ctx;
  NCCLCHECK(commContext(comm, shape, &ctx));
  std::lock_guard<std::mutex> lock(ctx->mu);
  if (ctx->nodes.learned && resolved.hostId != ctx->config.hostId)
    WARN(
        "%s: comm %p rank %d: host id '%s' ignored: the comm's nodes were learned with '%s' at its first call; "
        "ncclSignCommRelease, then set it before the next call",
        kFn, (void*)comm, shape.rank, resolved.hostId.c_str(), ctx->config.hostId.c_str());
  ctx->config = resolved;
  INFO(kSubsysInit, "%s: comm %p rank %d/%d: algorithm %s, zero rule %d, tie rule %d", kFn, (void*)comm, shape.rank,
       shape.nranks, algoName(resolved.algorithm), (int)resolved.zeroRule, (int)resolved.tieRule);
  return ncclSuccess;
}

ncclResult_t releaseComm(ncclComm_t comm) {
  ARGCHECK(comm != nullptr, "ncclSignCommRelease", "comm", "must not be NULL");
  std::shared_ptr<CommContext> ctx = takeCommContext(comm);
  if (!ctx) return ncclSuccess;               // never used: nothing cached
  std::lock_guard<std::mutex> lock(ctx->mu);  // a call enqueuing on another thread finishes first
  INFO(kSubsysInit, "ncclSignCommRelease: comm %p rank %d/%d", (void*)comm, ctx->shape.rank, ctx->shape.nranks);
  return ctx->release();
}

}  // namespace nccl
}  // namespace signlion

SIGNLION_API ncclResult_t ncclSignAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                            ncclSignOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return signlion::nccl::signAllReduce(nullptr, sendbuff, recvbuff, count, datatype, op, nullptr, comm, stream,
                                       "ncclSignAllReduce");
}

SIGNLION_API ncclResult_t ncclSignAllReduceWithConfig(const void* sendbuff, void* recvbuff, size_t count,
                                                      ncclDataType_t datatype, ncclSignOp_t op,
                                                      const ncclSignCallConfig_t* config, ncclComm_t comm,
                                                      cudaStream_t stream) {
  return signlion::nccl::signAllReduce(nullptr, sendbuff, recvbuff, count, datatype, op, config, comm, stream,
                                       "ncclSignAllReduceWithConfig");
}

SIGNLION_API ncclResult_t ncclSignCommSetConfig(ncclComm_t comm, const ncclSignConfig_t* config) {
  return signlion::nccl::setCommConfig(nullptr, comm, config);
}

SIGNLION_API ncclResult_t ncclSignCommRelease(ncclComm_t comm) { return signlion::nccl::releaseComm(comm); }
