// The C entry points of the Distributed Lion optimizer (nccl_sign.h).
#include <algorithm>
#include <memory>
#include <new>

#include "bits/bits.h"
#include "common/checks.h"
#include "common/debug.h"
#include "common/live_handles.h"
#include "lion/distributed_lion.h"
#ifdef SIGNLION_LION_ON_NCCL
#include "lion/nccl_lion_comm.h"
#endif

struct ncclSignLion {
  std::unique_ptr<signlion::lion::Optimizer> opt;
#ifdef SIGNLION_LION_ON_NCCL
  signlion::lion::NcclCommunicator* device = nullptr;  // owned by opt; null for a host optimizer
#endif
};

namespace {

// Every optimizer a create returned and no destroy has taken back, looked up
// by address before anything reads through a handle (live_handles.h). Never
// destroyed: a destroy from an atexit handler still finds it.
signlion::LiveHandles& liveLions() {
  static signlion::LiveHandles* live = new signlion::LiveHandles();
  return *live;
}

ncclSignLion* notLive(const ncclSignLion_t lion, const char* caller) {
  WARN("%s: invalid argument 'lion': %p is not a live optimizer (never returned by ncclSignLionCreate, or destroyed)",
       caller, (void*)lion);
  return nullptr;
}

ncclSignLion* checkLion(const ncclSignLion_t lion, const char* caller) {
  if (lion == nullptr || !liveLions().contains(lion)) return notLive(lion, caller);
  return lion;
}

// The arguments every creation checks; *c is the config to use.
ncclResult_t checkCreate(ncclSignLion_t* lion, size_t count, ncclDataType_t datatype,
                         const ncclSignLionConfig_t* config, bool haveComm, const char* fn, ncclSignLionConfig_t* c) {
  ARGCHECK(lion != nullptr, fn, "lion", "NULL");
  ARGCHECK(datatype == ncclFloat32 || datatype == ncclFloat16 || datatype == ncclBfloat16, fn, "datatype",
           "%d (fp32, fp16 or bf16)", (int)datatype);
  NCCLCHECK(signlion::lion::readConfig(config, fn, c));
  NCCLCHECK(signlion::lion::checkConfig(*c, fn));
  ARGCHECK(haveComm || c->aggregation == ncclSignLionLocal, fn, "comm", "NULL with aggregation %d",
           c->aggregation);
  // The state is a few copies of count elements: anything that cannot be
  // addressed is a bad count, not an allocation failure.
  ARGCHECK(count <= (SIZE_MAX >> 4), fn, "count", "%zu parameters cannot be addressed", count);
  return ncclSuccess;
}

// The rules every sign all-reduce of the optimizer carries (checked by
// checkConfig): its own, so that no other user of the communicator changes them.
ncclSignCallConfig_t rulesOf(const ncclSignLionConfig_t& c) {
  ncclSignCallConfig_t call = NCCL_SIGN_CALL_CONFIG_INITIALIZER;
  call.zeroRule = c.zeroRule;
  call.tieRule = c.tieRule;
  return call;
}

// The handle around an optimizer whose state lives in lc's memory space.
ncclResult_t makeLion(ncclSignLion_t* lion, size_t count, ncclDataType_t datatype, const ncclSignLionConfig_t& c,
                      std::unique_ptr<signlion::lion::Communicator> lc, const char* fn) {
  std::unique_ptr<ncclSignLion> h;
  try {
    h = std::make_unique<ncclSignLion>();
    h->opt = std::make_unique<signlion::lion::Optimizer>(count, datatype, c, std::move(lc));
  } catch (const std::exception& e) {  // bad_alloc: never out of an extern "C" call
    WARN("%s: cannot allocate the optimizer of %zu parameters: %s", fn, count, e.what());
    return ncclSystemError;
  }
  NCCLCHECK(h->opt->status());
  INFO(signlion::kSubsysLion, "Lion: %zu %s parameters on %s, aggregation %d, lr %g, betas (%g, %g), wd %g", count,
       signlion::bits::typeName(datatype), h->opt->onDevice() ? "the GPU" : "the host", c.aggregation, (double)c.lr,
       (double)c.beta1, (double)c.beta2, (double)c.weightDecay);
  if (!liveLions().add(h.get())) {
    WARN("%s: out of memory recording the optimizer", fn);
    return ncclSystemError;
  }
  *lion = h.release();
  return ncclSuccess;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) ncclResult_t ncclSignLionCreate(ncclSignLion_t* lion, size_t count,
                                                                        ncclDataType_t datatype,
                                                                        const ncclSignLionConfig_t* config,
                                                                        ncclSignComm_t comm) {
  const char* fn = "ncclSignLionCreate";
  ncclSignLionConfig_t c;
  NCCLCHECK(checkCreate(lion, count, datatype, config, comm != nullptr, fn, &c));
  if (comm != nullptr) {
    int n = 0;
    NCCLCHECK(ncclSignCommCount(comm, &n));  // also rejects a dead comm
  }
  return makeLion(lion, count, datatype, c, std::make_unique<signlion::lion::HostCommunicator>(comm, rulesOf(c)), fn);
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionDestroy(ncclSignLion_t lion) {
  if (lion == nullptr) return ncclSuccess;
  // Out of the registry first: of two destroys of one handle, one frees it.
  if (!liveLions().remove(lion)) {
    notLive(lion, "ncclSignLionDestroy");
    return ncclInvalidArgument;
  }
  delete lion;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionSetHyperparameters(ncclSignLion_t lion, float lr,
                                                                                    float beta1, float beta2,
                                                                                    float weightDecay) {
  const char* fn = "ncclSignLionSetHyperparameters";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  ncclSignLionConfig_t c = NCCL_SIGN_LION_CONFIG_INITIALIZER;
  c.lr = lr;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.weightDecay = weightDecay;
  NCCLCHECK(signlion::lion::checkConfig(c, fn));
  l->opt->setHyperparameters(lr, beta1, beta2, weightDecay);
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionStep(ncclSignLion_t lion, void* params,
                                                                      const void* grads, int* applied) {
  const char* fn = "ncclSignLionStep";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  if (l->opt->onDevice()) {
    WARN("%s: the optimizer works on device buffers: step it with ncclSignLionStepAsync", fn);
    return ncclInvalidUsage;
  }
  const bool empty = l->opt->count() == 0;
  ARGCHECK(empty || params != nullptr, fn, "params", "NULL");
  ARGCHECK(empty || grads != nullptr, fn, "grads", "NULL");
  bool done = false;
  ncclResult_t res = l->opt->step(params, grads, &done);
  if (applied != nullptr) *applied = done ? 1 : 0;
  return res;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionGetStepCount(const ncclSignLion_t lion,
                                                                              uint64_t* applied, uint64_t* skipped) {
  const char* fn = "ncclSignLionGetStepCount";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  return l->opt->stepCounts(applied, skipped);
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionGetStateSize(const ncclSignLion_t lion,
                                                                              size_t* bytes) {
  const char* fn = "ncclSignLionGetStateSize";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  ARGCHECK(bytes != nullptr, fn, "bytes", "NULL");
  *bytes = l->opt->stateSize();
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionSaveState(const ncclSignLion_t lion, void* buffer,
                                                                           size_t bytes) {
  ncclSignLion* l = checkLion(lion, "ncclSignLionSaveState");
  if (l == nullptr) return ncclInvalidArgument;
  return l->opt->saveState(buffer, bytes);
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionLoadState(ncclSignLion_t lion, const void* buffer,
                                                                           size_t bytes) {
  ncclSignLion* l = checkLion(lion, "ncclSignLionLoadState");
  if (l == nullptr) return ncclInvalidArgument;
  return l->opt->loadState(buffer, bytes);
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionRecordPhases(ncclSignLion_t lion, int enable) {
  const char* fn = "ncclSignLionRecordPhases";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  if (l->opt->onDevice()) {
    WARN("%s: the optimizer works on device buffers, whose steps the host only enqueues: time them with the "
         "CUDA profiler",
         fn);
    return ncclInvalidUsage;
  }
  l->opt->recordPhases(enable != 0);
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionGetPhases(const ncclSignLion_t lion,
                                                                           ncclSignLionPhaseTime_t* phases,
                                                                           int capacity, int* count) {
  const char* fn = "ncclSignLionGetPhases";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  ARGCHECK(count != nullptr, fn, "count", "NULL");
  ARGCHECK(capacity >= 0, fn, "capacity", "%d", capacity);
  ARGCHECK(phases != nullptr || capacity == 0, fn, "phases", "NULL with capacity %d", capacity);
  const std::vector<ncclSignLionPhaseTime_t>& recorded = l->opt->phases();
  const size_t n = std::min(recorded.size(), (size_t)capacity);
  std::copy(recorded.begin(), recorded.begin() + n, phases);
  *count = (int)recorded.size();
  return ncclSuccess;
}

#ifdef SIGNLION_LION_ON_NCCL

__attribute__((visibility("default"))) ncclResult_t ncclSignLionCreateNccl(ncclSignLion_t* lion, size_t count,
                                                                            ncclDataType_t datatype,
                                                                            const ncclSignLionConfig_t* config,
                                                                            ncclComm_t comm) {
  const char* fn = "ncclSignLionCreateNccl";
  ncclSignLionConfig_t c;
  NCCLCHECK(checkCreate(lion, count, datatype, config, comm != nullptr, fn, &c));
  std::unique_ptr<signlion::lion::NcclCommunicator> device;
  NCCLCHECK(signlion::lion::NcclCommunicator::create(comm, rulesOf(c), fn, &device));
  signlion::lion::NcclCommunicator* d = device.get();
  NCCLCHECK(makeLion(lion, count, datatype, c, std::move(device), fn));
  (*lion)->device = d;
  return ncclSuccess;
}

__attribute__((visibility("default"))) ncclResult_t ncclSignLionStepAsync(ncclSignLion_t lion, void* params,
                                                                           const void* grads, cudaStream_t stream) {
  const char* fn = "ncclSignLionStepAsync";
  ncclSignLion* l = checkLion(lion, fn);
  if (l == nullptr) return ncclInvalidArgument;
  if (l->device == nullptr) {
    WARN("%s: the optimizer works on host buffers: step it with ncclSignLionStep", fn);
    return ncclInvalidUsage;
  }
  if (l->opt->count() > 0) {
    ARGCHECK(params != nullptr, fn, "params", "NULL");
    ARGCHECK(grads != nullptr, fn, "grads", "NULL");
    NCCLCHECK(l->device->checkBuffer(params, fn, "params"));
    NCCLCHECK(l->device->checkBuffer(grads, fn, "grads"));
  }
  return l->opt->step(params, grads, nullptr, stream);
}

#endif  // SIGNLION_LION_ON_NCCL

}  // extern "C"
