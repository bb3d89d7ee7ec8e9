#include "nccl/comm_context.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "common/cuda_checks.h"
#include "nccl/device_backend.h"
#include "nccl/last_use_event.h"
#include "nccl/nccl_params.h"

namespace signlion {
namespace nccl {

ncclResult_t queryComm(const NcclApi& api, ncclComm_t comm, const char* caller, CommShape* out) {
  CommShape s;
  ncclResult_t res = api.commCount(comm, &s.nranks);
  if (res == ncclSuccess) res = api.commUserRank(comm, &s.rank);
  if (res == ncclSuccess) res = api.commCuDevice(comm, &s.cudaDev);
  if (res != ncclSuccess) {
    WARN("%s: invalid argument 'comm': NCCL rejects %p (%s)", caller, (void*)comm, api.getErrorString(res));
    return ncclInvalidArgument;
  }
  ncclResult_t state = ncclSuccess;
  res = api.commGetAsyncError(comm, &state);
  if (res != ncclSuccess) {
    WARN("%s: ncclCommGetAsyncError(%p) failed: %s", caller, (void*)comm, api.getErrorString(res));
    return res;
  }
  if (state == ncclInProgress) {
    WARN(
        "%s: comm %p is still being initialized (nonblocking); wait until ncclCommGetAsyncError returns "
        "ncclSuccess",
        caller, (void*)comm);
    return ncclInvalidUsage;
  }
  if (state != ncclSuccess) {
    WARN("%s: comm %p holds an asynchronous error (%s); abort it", caller, (void*)comm, api.getErrorString(state));
    return state;
  }
  *out = s;
  return ncclSuccess;
}

CommContext::CommContext(ncclComm_t c, const CommShape& s, const ResolvedConfig& cfg)
    : comm(c), shape(s), config(cfg), costModel_(costParams()), nodeCostModel_(nodeCostParams()) {}

ncclResult_t CommContext::planFor(int64_t nblocks, const algo::OpSpec& spec,
                                  const algo::ScheduleCache<Plan>::Entry** out) {
  auto finish = [&](algo::ScheduleCache<Plan>::Entry* e) {
    NCCLCHECK(makePlan(e->schedule, chunkBytes(), &e->extra));
    INFO(kSubsysColl, "ncclSignAllReduce comm %p rank %d/%d, %lld blocks: %s, %zu steps, scratch %lld bytes",
         (void*)comm, shape.rank, shape.nranks, (long long)nblocks, algoName(e->schedule.algo),
         e->schedule.steps.size(), (long long)e->extra.layout.bytes());
    return ncclSuccess;
  };
  // The topology is fixed once learned (the cache keys on it implicitly).
  const bool grouped = nodes.hierarchical();
  return plans_.get(shape.nranks, shape.rank, nblocks, spec, config.algorithm, algo::kAllAlgorithms,
                    grouped ? nodeCostModel_ : costModel_, finish, out, grouped ? &nodes.topology : nullptr);
}

ncclResult_t CommContext::learnNodes(const NcclApi& api, cudaStream_t stream, bool capturing) {
  if (nodes.learned) return ncclSuccess;
  if (capturing) {
    WARN(
        "ncclSignAllReduce: comm %p has not exchanged host ids yet and stream %p is being captured; make one call "
        "outside capture first (warm-up)",
        (void*)comm, (void*)stream);
    return ncclInvalidUsage;
  }
  uint64_t* words;
  NCCLCHECK(scratch(nodeGroupWords(shape.nranks) * 8, stream, capturing, &words));
  DeviceBackend backend(api, comm, stream, side_, fork_, join_);
  return learnNodeGroups(api, backend, comm, shape.nranks, shape.rank, config.hostId, words, &nodes);
}

ncclResult_t CommContext::beginCall(cudaStream_t stream, bool* capturing) {
  cudaStreamCaptureStatus status;
  CUDACHECK(cudaStreamIsCapturing(stream, &status));
  if (status == cudaStreamCaptureStatusInvalidated) {
    WARN("ncclSignAllReduce: the capture on stream %p was invalidated by an earlier error", (void*)stream);
    return ncclInvalidUsage;
  }
  *capturing = status == cudaStreamCaptureStatusActive;
  if (side_ == nullptr) {
    if (*capturing) {
      WARN(
          "ncclSignAllReduce: comm %p is used for the first time while stream %p is being captured; make one "
          "call of each size outside capture first (warm-up)",
          (void*)comm, (void*)stream);
      return ncclInvalidUsage;
    }
    // The adds must not wait for unrelated work on the legacy default stream.
    CUDACHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&fork_, &join_, &lastUse_}) CUDACHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    void* flag = nullptr;
    CUDACHECK(cudaHostAlloc(&flag, sizeof(uint32_t), cudaHostAllocMapped));
    malformedHost_ = static_cast<volatile uint32_t*>(flag);
    *malformedHost_ = 0;
    void* onDevice = nullptr;
    CUDACHECK(cudaHostGetDevicePointer(&onDevice, flag, 0));
    malformedDevice_ = static_cast<uint32_t*>(onDevice);
  }
  // Every call, eager or replayed from a graph, waits for the last one that
  // used the scratch, whatever stream that ran on (last_use_event.h).
  CUDACHECK(waitForLastUse(stream, lastUse_, *capturing));
  return ncclSuccess;
}

ncclResult_t CommContext::scratch(size_t bytes, cudaStream_t stream, bool capturing, uint64_t** out) {
  if (bytes > scratchBytes_) {
    if (capturing) {
      WARN(
          "ncclSignAllReduce: comm %p needs %zu bytes of scratch (it has %zu) while stream %p is being captured; "
          "make one call of this size outside capture first (warm-up)",
          (void*)comm, bytes, scratchBytes_, (void*)stream);
      return ncclInvalidUsage;
    }
    constexpr size_t kMinBytes = size_t{1} << 20;
    const size_t grown = std::max({bytes, 2 * scratchBytes_, kMinBytes});
    if (scratch_ != nullptr) {
      if (scratchCaptured_) {
        retired_.push_back(scratch_);
      } else {
        // Earlier calls, and earlier segments of this one, may still use it.
        CUDACHECK(cudaEventSynchronize(lastUse_));
        CUDACHECK(cudaStreamSynchronize(stream));
        CUDACHECK(cudaFree(scratch_));
      }
      scratch_ = nullptr;
      scratchBytes_ = 0;
    }
    cudaError_t err = cudaMalloc(&scratch_, grown);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      scratch_ = nullptr;
      WARN(
          "ncclSignAllReduce: cannot allocate %zu bytes of scratch on device %d: %s (SIGNLION_NCCL_SEGMENT bounds "
          "it)",
          grown, shape.cudaDev, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
    scratchBytes_ = grown;
    scratchCaptured_ = false;
    INFO(kSubsysAlloc, "ncclSignAllReduce comm %p: scratch of %zu bytes on device %d (%zu retired)", (void*)comm, grown,
         shape.cudaDev, retired_.size());
  }
  scratchCaptured_ = scratchCaptured_ || capturing;
  *out = static_cast<uint64_t*>(scratch_);
  return ncclSuccess;
}

ncclResult_t CommContext::malformedResults(const char* caller) const {
  const uint32_t from = malformedHost_ != nullptr ? *malformedHost_ : 0;
  if (from == 0) return ncclSuccess;
  WARN(
      "%s: comm %p rank %d received a malformed coded result from rank %u (a byte above 242, or an element both +1 "
      "and -1) in an earlier call: that call's output is not valid, and this communicator fails every call from now on",
      caller, (void*)comm, shape.rank, from - 1);
  return ncclSystemError;
}

ncclResult_t CommContext::endCall(cudaStream_t stream, bool capturing) {
  // In a capture each launch of the graph records it (last_use_event.h).
  CUDACHECK(markLastUse(lastUse_, stream, capturing));
  return ncclSuccess;
}

ncclResult_t CommContext::release() {
  plans_.clear();
  // Nothing of ours runs on the node comm (node_groups.h), so it needs no
  // wait before it goes.
  ncclResult_t res = releaseNodeGroups(&nodes);
  if (side_ == nullptr && scratch_ == nullptr && retired_.empty()) return res;
  auto keep = [&res](cudaError_t err, const char* call) {
    if (err == cudaSuccess) return;
    (void)cudaGetLastError();
    WARN("ncclSignCommRelease: %s failed: %s", call, cudaGetErrorString(err));
    if (res == ncclSuccess) res = ncclUnhandledCudaError;
  };
  DeviceGuard device;
  NCCLCHECK(device.set(shape.cudaDev));
  // Every call joined the side stream back into its user stream before
  // lastUse was recorded, so this covers all work outside capture.
  if (lastUse_ != nullptr) keep(cudaEventSynchronize(lastUse_), "cudaEventSynchronize");
  if (side_ != nullptr) keep(cudaStreamSynchronize(side_), "cudaStreamSynchronize");
  if (scratch_ != nullptr) retired_.push_back(scratch_);
  for (void* p : retired_) keep(cudaFree(p), "cudaFree");
  retired_.clear();
  scratch_ = nullptr;
  scratchBytes_ = 0;
  for (cudaEvent_t* e : {&fork_, &join_, &lastUse_}) {
    if (*e != nullptr) keep(cudaEventDestroy(*e), "cudaEventDestroy");
    *e = nullptr;
  }
  if (side_ != nullptr) keep(cudaStreamDestroy(side_), "cudaStreamDestroy");
  side_ = nullptr;
  if (malformedHost_ != nullptr) keep(cudaFreeHost(const_cast<uint32_t*>(malformedHost_)), "cudaFreeHost");
  malformedHost_ = nullptr;
  malformedDevice_ = nullptr;
  return res;
}

namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<ncclComm_t, std::shared_ptr<CommContext>> contexts;
};

// Never destroyed: contexts hold device memory, and freeing it from a static
// destructor would run after the CUDA runtime has shut down.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

ncclResult_t commContext(ncclComm_t comm, const CommShape& shape, std::shared_ptr<CommContext>* out) {
  Registry& reg = registry();
  std::shared_ptr<CommContext> stale;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.contexts.find(comm);
    if (it != reg.contexts.end()) {
      const CommShape& had = it->second->shape;
      if (had.nranks == shape.nranks && had.rank == shape.rank && had.cudaDev == shape.cudaDev) {
        *out = it->second;
        return ncclSuccess;
      }
      stale = std::move(it->second);
      reg.contexts.erase(it);
    }
    ResolvedConfig config;
    NCCLCHECK(resolveConfig(nullptr, "ncclSignAllReduce", &config));
    auto made = std::make_shared<CommContext>(comm, shape, config);
    reg.contexts.emplace(comm, made);
    *out = std::move(made);
  }
  if (stale) {
    WARN(
        "comm %p was destroyed without ncclSignCommRelease and NCCL reused its address (rank %d/%d on device %d "
        "before, %d/%d on device %d now); releasing what signlion cached for the old one",
        (void*)comm, stale->shape.rank, stale->shape.nranks, stale->shape.cudaDev, shape.rank, shape.nranks,
        shape.cudaDev);
    std::lock_guard<std::mutex> lock(stale->mu);
    NCCLCHECK(stale->release());
  }
  return ncclSuccess;
}

std::shared_ptr<CommContext> takeCommContext(ncclComm_t comm) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.contexts.find(comm);
  if (it == reg.contexts.end()) return nullptr;
  std::shared_ptr<CommContext> ctx = std::move(it->second);
  reg.contexts.erase(it);
  return ctx;
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);
}

ncclResult_t DeviceGuard::set(int dev) {
  int cur;
  CUDACHECK(cudaGetDevice(&cur));
  if (cur == dev) return ncclSuccess;
  CUDACHECK(cudaSetDevice(dev));
  prev_ = cur;
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace signlion
