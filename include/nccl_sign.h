/*************************************************************************
 * signlion: sign all-reduce for Distributed Lion.
 *
 * This is the public C ABI of libnccl-sign.so. It follows NCCL's conventions:
 * every call returns an ncclResult_t, handles are opaque, configuration
 * structs carry their size/magic/version and come with an _INITIALIZER macro,
 * and arguments are checked at entry (ncclInvalidArgument plus a WARN log line
 * that names the offending argument).
 *
 * Semantics shared by every sign collective (see docs/SEMANTICS.md):
 *  - Each rank's vote for an element is the sign of its value: x > 0 votes +1,
 *    x < 0 votes -1. Zero (+0, -0) and NaN are "zero" and follow the zero rule.
 *  - op = ncclSignMajority: result is sign(sum of votes) in {-1, 0, +1}; a sum
 *    of zero (a tie) follows the tie rule.
 *  - op = ncclSignAverage: result is (float)(sum of votes) / (float)nranks,
 *    rounded once to float, then converted to the output datatype with
 *    round-to-nearest-even. Floating-point datatypes only.
 *  - The result is written in the input datatype, identical on every rank.
 ************************************************************************/
#ifndef NCCL_SIGN_H_
#define NCCL_SIGN_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl_sign_version.h"

/* ncclResult_t and ncclDataType_t come from NCCL when its header is available
 * (the normal case: frameworks already include it). A build without NCCL gets
 * ABI-identical declarations of the two enums so the host-side API still works. */
#if !defined(NCCL_SIGN_WITHOUT_NCCL) && defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define NCCL_SIGN_HAVE_NCCL 1
#endif
#endif

#ifndef NCCL_SIGN_HAVE_NCCL
#ifndef NCCL_H_
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9
} ncclDataType_t;
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version: NCCL_SIGN_VERSION_CODE == NCCL_SIGN_VERSION(MAJOR, MINOR, PATCH).
 * NCCL_SIGN_MAJOR, _MINOR and _PATCH come from nccl_sign_version.h, which the
 * build generates from the CMake project version and installs beside this
 * header. */
#define NCCL_SIGN_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define NCCL_SIGN_VERSION_CODE NCCL_SIGN_VERSION(NCCL_SIGN_MAJOR, NCCL_SIGN_MINOR, NCCL_SIGN_PATCH)

/* Returns the version of the loaded library as NCCL_SIGN_VERSION_CODE would
 * spell it. Compare with the header's code to detect a mismatched install.
 * Errors: ncclInvalidArgument when version is NULL. */
ncclResult_t ncclSignGetVersion(int* version);

/* A human-readable string for any ncclResult_t value (never NULL). */
const char* ncclSignGetErrorString(ncclResult_t result);

/* How the votes of all ranks are combined. */
typedef enum {
  ncclSignMajority = 0, /* sign(sum of votes): the majority vote ("mavo") */
  ncclSignAverage = 1,  /* (sum of votes) / nranks, in [-1, 1] */
  ncclSignNumOps = 2
} ncclSignOp_t;

/* What an input of zero (+0, -0, or NaN) votes. On the 1-bit wire a vote is a
 * single bit, so zero must either be mapped onto a side or travel as a second
 * bit plane (abstain). */
typedef enum {
  ncclSignZeroPositive = 0, /* zero votes +1 (the bit is "x is not negative"); default */
  ncclSignZeroNegative = 1, /* zero votes -1 (the bit is "x is positive") */
  ncclSignZeroAbstain = 2,  /* exact ternary mode: zero casts no vote; two planes travel */
  ncclSignNumZeroRules = 3
} ncclSignZeroRule_t;

/* What a majority vote returns when the sum of votes is zero (possible for an
 * even number of voters, or whenever zeros abstain). */
typedef enum {
  ncclSignTieZero = 0,     /* a tie yields 0: exact sign(sum); default */
  ncclSignTiePositive = 1, /* a tie yields +1 (the result fits in one bit) */
  ncclSignTieNegative = 2, /* a tie yields -1 (the result fits in one bit) */
  ncclSignNumTieRules = 3
} ncclSignTieRule_t;

/* Algorithms of the sign all-reduce. Auto lets the cost model decide per call;
 * SIGNLION_ALGO=ring|hd|allgather|fieldsum|hier|direct|tree forces one from the environment. */
typedef enum {
  ncclSignAlgoAuto = 0,
  ncclSignAlgoRing = 1,            /* reduce-scatter with growing width, then all-gather */
  ncclSignAlgoHalvingDoubling = 2, /* recursive halving-doubling, folded for non powers of two */
  ncclSignAlgoAllGather = 3,       /* all-gather of 1-bit votes, local vote */
  ncclSignAlgoFieldSum = 4,        /* votes in narrow integer fields summed by a sum all-reduce */
  ncclSignAlgoHierarchical = 5,    /* count inside each node, halving-doubling of counters between nodes */
  ncclSignAlgoDirect = 6,          /* 1-bit votes straight to each shard's owner, decided shards to every rank */
  ncclSignAlgoTree = 7,            /* double binary tree: counters up, decided results down, pipelined */
  ncclSignNumAlgos = 8
} ncclSignAlgo_t;

/* Communicator configuration. Always start from NCCL_SIGN_CONFIG_INITIALIZER,
 * then set the fields you care about: size, magic and version let the library
 * detect a struct from a different header version. */
typedef struct ncclSignConfig_v1 {
  size_t size;           /* sizeof(ncclSignConfig_t), set by the initializer */
  unsigned int magic;    /* NCCL_SIGN_CONFIG_MAGIC, set by the initializer */
  unsigned int version;  /* NCCL_SIGN_VERSION_CODE of the header used */
  int algorithm;         /* ncclSignAlgo_t; ncclSignAlgoAuto by default */
  int zeroRule;          /* ncclSignZeroRule_t; ncclSignZeroPositive by default */
  int tieRule;           /* ncclSignTieRule_t; ncclSignTieZero by default */
  int timeoutMs;         /* bound on any wait for a peer, ms; 0 = SIGNLION_TIMEOUT_MS (default 60000) */
  const char* netPlugin; /* NCCL net plugin to carry host traffic: NULL = SIGNLION_NET_PLUGIN
                            if set (the same forms), else signlion's own socket transport;
                            "" or "signlion" = that built-in transport, in this library (no
                            library is loaded); another name "foo" loads libnccl-net-foo.so
                            ("signlion-ucx" the UCX transport); a name containing '/' or
                            ending in .so is a path, loaded as another plugin even when it
                            is libnccl-net-signlion.so */
  const char* hostId;    /* this rank's node identity for the hierarchical algorithm and the
                            cost model: ranks with equal ids share a node. NULL = SIGNLION_HOSTID,
                            else NCCL_HOSTID, else hostname + boot id (NCCL's rule). On an NCCL
                            comm it is read at the comm's first ncclSignAllReduce. Set per rank when ranks are threads of one
                            process that should act as several nodes. A struct of an older
                            header without this field is accepted (its size says so). */
} ncclSignConfig_t;

#define NCCL_SIGN_CONFIG_MAGIC 0x5349474eu /* "SIGN" */
#define NCCL_SIGN_CONFIG_INITIALIZER                                                           \
  {                                                                                            \
    sizeof(ncclSignConfig_t), NCCL_SIGN_CONFIG_MAGIC, NCCL_SIGN_VERSION_CODE, ncclSignAlgoAuto, \
        ncclSignZeroPositive, ncclSignTieZero, 0, NULL, NULL                                   \
  }

/* Checks a configuration the way a communicator will at creation, so callers
 * can validate early. NULL is valid and means all defaults.
 * Errors: ncclInvalidArgument (with a WARN naming the field) for a wrong
 * size/magic/version or an out-of-range enum or timeout. */
ncclResult_t ncclSignConfigCheck(const ncclSignConfig_t* config);

/* Vote rules that travel with one call or one optimizer instead of living
 * on a communicator. A communicator's rules (the config of
 * ncclSignCommInitRank, or of ncclSignCommSetConfig on an NCCL comm) are
 * shared by every caller of that communicator: one library, optimizer or
 * thread setting them changes them for all the others, and
 * ncclSignCommRelease resets an NCCL comm's to the defaults. Rules given
 * here are the call's own: nothing done to the communicator changes them.
 * A field left at NCCL_SIGN_RULE_OF_COMM (the initializer's value) takes
 * the communicator's rule at the time of the call, as the calls without a
 * config do. Every rank must pass the same rules in the same call, as for
 * count, datatype and op. */
#define NCCL_SIGN_RULE_OF_COMM (-1)

typedef struct ncclSignCallConfig_v1 {
  size_t size;          /* sizeof(ncclSignCallConfig_t), set by the initializer */
  unsigned int magic;   /* NCCL_SIGN_CALL_CONFIG_MAGIC, set by the initializer */
  unsigned int version; /* NCCL_SIGN_VERSION_CODE of the header used */
  int zeroRule;         /* ncclSignZeroRule_t, or NCCL_SIGN_RULE_OF_COMM (default) */
  int tieRule;          /* ncclSignTieRule_t, or NCCL_SIGN_RULE_OF_COMM (default) */
} ncclSignCallConfig_t;

#define NCCL_SIGN_CALL_CONFIG_MAGIC 0x43414c4cu /* "CALL" */
#define NCCL_SIGN_CALL_CONFIG_INITIALIZER                                                                      \
  {                                                                                                            \
    sizeof(ncclSignCallConfig_t), NCCL_SIGN_CALL_CONFIG_MAGIC, NCCL_SIGN_VERSION_CODE, NCCL_SIGN_RULE_OF_COMM, \
        NCCL_SIGN_RULE_OF_COMM                                                                                 \
  }

/* ---------------------------------------------------------------------------
 * Host communicator: sign all-reduce over CPU buffers.
 *
 * Ranks find each other through a unique id made by one of them (as with
 * ncclGetUniqueId) and shared out of band; links between ranks are ncclNet
 * connections: signlion's own socket transport by default, or any NCCL net
 * plugin named in the config. Every wait is bounded by the config's timeout:
 * a dead or stalled peer makes the call return an error, never hang.
 * ------------------------------------------------------------------------- */

#define NCCL_SIGN_UNIQUE_ID_BYTES 128
/* Carries the root's address and port and a fresh random secret. */
typedef struct {
  char internal[NCCL_SIGN_UNIQUE_ID_BYTES];
} ncclSignUniqueId;

/* A communicator handle. A "bad comm" below is NULL where a comm is needed,
 * or a pointer that is not a live communicator: never returned by
 * ncclSignCommInitRank, or already destroyed or aborted. Each call looks the
 * handle up among the process's live communicators before reading anything
 * through it: ncclInvalidArgument with a WARN "not a live ncclSignComm_t",
 * never a read of freed memory. The lookup is by address, so a destroyed
 * handle whose memory a newer communicator of the process now occupies is
 * that newer communicator: drop a handle once it is destroyed. The same holds
 * for ncclSignLion_t (WARN "not a live optimizer"). */
typedef struct ncclSignComm* ncclSignComm_t;

/* Makes a unique id and starts, in this process, the rendezvous that all
 * nranks ranks of the communicator join in ncclSignCommInitRank (it ends once
 * they have, or after SIGNLION_TIMEOUT_MS). The root listens on the first
 * interface SIGNLION_SOCKET_IFNAME selects.
 * Errors: ncclInvalidArgument when uniqueId is NULL; ncclSystemError when no
 * socket could be opened (SIGNLION_SOCKET_PORT_RANGE malformed or full: a WARN
 * names it). A malformed or out-of-range tuning variable (SIGNLION_TIMEOUT_MS,
 * SIGNLION_ALGO, ...) is never an error: a WARN names it and its default is
 * kept (docs/PARAMETERS.md). */
ncclResult_t ncclSignGetUniqueId(ncclSignUniqueId* uniqueId);

/* Creates rank `rank` of an nranks-rank communicator. Collective: every rank
 * calls it with the same id and nranks. config may be NULL (all defaults); it
 * is checked as by ncclSignConfigCheck.
 * Errors: ncclInvalidArgument (comm NULL, nranks < 1, rank outside
 * [0, nranks), an id not made by ncclSignGetUniqueId, a bad config; a
 * SIGNLION_NET_PLUGIN that cannot be loaded), ncclRemoteError /
 * ncclSystemError when a peer cannot be reached within the timeout, or when
 * no socket can be opened on what SIGNLION_SOCKET_IFNAME (or the interface
 * variables after it) and SIGNLION_SOCKET_PORT_RANGE select; a WARN names the
 * variable. A malformed or out-of-range tuning variable is not an error: a
 * WARN names it and its default is kept (docs/PARAMETERS.md). */
ncclResult_t ncclSignCommInitRank(ncclSignComm_t* comm, int nranks, ncclSignUniqueId commId, int rank,
                                  const ncclSignConfig_t* config);

/* Frees the communicator once its operations are done. Not collective. */
ncclResult_t ncclSignCommDestroy(ncclSignComm_t comm);

/* Frees the communicator at once, whatever its state. Its links end first,
 * all of them, as they would if this process had died: a peer waiting in a
 * call to receive from it or to send to it fails at once (with signlion's own
 * transports; with another net plugin, when that plugin's close tells it),
 * and nothing waits on a peer (a frozen one never answers). Use after an
 * error; then make a new one.
 * Like every call on a communicator, it must not overlap another call on the
 * same communicator from another thread. */
ncclResult_t ncclSignCommAbort(ncclSignComm_t comm);

ncclResult_t ncclSignCommCount(const ncclSignComm_t comm, int* count);
ncclResult_t ncclSignCommUserRank(const ncclSignComm_t comm, int* rank);

/* Blocks until every rank has entered the barrier (or the timeout passes). */
ncclResult_t ncclSignBarrier(ncclSignComm_t comm);

/* The communicator's sticky error, as NCCL's async error: ncclSuccess while
 * every call on it has succeeded, else the error of the first call that
 * failed. A communicator that has seen an error refuses every further call
 * (collectives and barrier) with that error, so what the failed call left on
 * the links can never be read as a later call's result: abort or destroy it
 * and make a new one. May be called from any thread.
 * Errors: ncclInvalidArgument (a bad comm, asyncError NULL). */
ncclResult_t ncclSignCommGetAsyncError(ncclSignComm_t comm, ncclResult_t* asyncError);

/* Bytes this rank has put on and taken off the wire through its links, since
 * the communicator was made (payload and transport headers). Benchmarks
 * difference two readings to get the bytes of one call. Counted by
 * signlion's built-in socket transport (config.netPlugin NULL with
 * SIGNLION_NET_PLUGIN unset, "" or "signlion"); with any plugin loaded from
 * a library (another name, or a path, libnccl-net-signlion.so's included)
 * both read 0. */
ncclResult_t ncclSignCommGetWireBytes(const ncclSignComm_t comm, uint64_t* sentBytes, uint64_t* recvBytes);

/* The part of ncclSignCommGetWireBytes that went to and came from ranks on
 * other nodes (host identities traded at init: config.hostId, else
 * SIGNLION_HOSTID, else NCCL_HOSTID, else hostname and boot id), and *node,
 * this rank's node:
 * 0, 1, ... in the order of each node's lowest rank. What a node's NIC
 * carries is the sum of these over the node's ranks.
 * Errors: ncclInvalidArgument (a bad comm, a NULL pointer). */
ncclResult_t ncclSignCommGetInterNodeWireBytes(const ncclSignComm_t comm, int* node, uint64_t* sentBytes,
                                               uint64_t* recvBytes);

/* The rate of a link between nodes, in Mbit/s, as the communicator learned
 * it at init (docs/PARAMETERS.md, "Link rate"; SIGNLION_COST_BETA_MBPS x 8
 * when that is set), the same on every rank; 0 when it learned none (one
 * node, loopback, one network namespace). The cost model, the chunk, the
 * socket transport's streams and the pacing of the links follow it.
 * Errors: ncclInvalidArgument (a bad comm, mbits NULL). */
ncclResult_t ncclSignCommGetLinkRate(const ncclSignComm_t comm, int64_t* mbits);

/* The sign all-reduce on host buffers: every rank's recvbuff receives the
 * majority vote (or average) of the signs of all ranks' sendbuff, as defined
 * at the top of this header. sendbuff == recvbuff is in place. count may be 0.
 * Synchronous: returns when this rank's result is complete.
 * Collective: every rank calls it, in the same order as its other calls on
 * comm, with the same count, datatype and op; the zero rule, tie rule and
 * algorithm (config, SIGNLION_ALGO), SIGNLION_HOST_SEGMENT,
 * SIGNLION_HOST_CHUNK_BYTES, SIGNLION_FIELD_BITS, SIGNLION_RESULT_CODING and
 * the SIGNLION_COST_* parameters must be the same on every rank too (they are compared at ncclSignCommInitRank, which
 * fails with ncclInvalidUsage otherwise). Each call carries its sequence
 * number and these values in its messages: a rank that passed something
 * else makes the call fail on every rank (ncclInvalidUsage on a rank that
 * sees the difference, with a WARN naming the field and both values; an
 * error within the timeout on the others), never a result.
 * Errors: ncclInvalidArgument (NULL buffers with count > 0, a datatype other
 * than fp32/fp16/bf16/int8, an op out of range, average with int8, count
 * elements of more than PTRDIFF_MAX bytes, a bad comm), ncclInvalidUsage
 * (the ranks disagree, as above), ncclRemoteError / ncclSystemError on a
 * peer failure; after any of the last three the comm keeps the error (see
 * ncclSignCommGetAsyncError) and must be aborted or destroyed. */
ncclResult_t ncclSignHostAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclSignOp_t op, ncclSignComm_t comm);

/* ncclSignHostAllReduce with this call's own vote rules (config, see
 * ncclSignCallConfig_t; NULL: the communicator's, as ncclSignHostAllReduce).
 * One communicator serves calls with different rules; each call's rules
 * travel in its messages, so ranks that pass different rules fail the call
 * as any other disagreement does.
 * Errors: those of ncclSignHostAllReduce, and ncclInvalidArgument for a
 * config of a wrong size, magic or version or with a rule out of range. */
ncclResult_t ncclSignHostAllReduceWithConfig(const void* sendbuff, void* recvbuff, size_t count,
                                             ncclDataType_t datatype, ncclSignOp_t op,
                                             const ncclSignCallConfig_t* config, ncclSignComm_t comm);

/* A plain sum all-reduce (ring reduce-scatter + all-gather) of fp32 or bf16
 * on the same communicator and links: what plain Lion or AdamW would send,
 * the baseline the sign all-reduce is measured against. bf16 is summed in
 * fp32 per hop and rounded to bf16 (round to nearest even) after each hop.
 * Collective with the same rules as ncclSignHostAllReduce: every rank passes
 * the same count and datatype, and a disagreement is an error on every rank;
 * errors are sticky likewise. */
ncclResult_t ncclSignHostSumAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclSignComm_t comm);

/* ---------------------------------------------------------------------------
 * Sign all-reduce on the user's NCCL communicator (device buffers).
 *
 * Declared when nccl.h is available (it brings cudaStream_t). The library
 * uses the libnccl.so already loaded in the process (the framework's); it
 * never carries its own copy. Per communicator it caches scratch buffers,
 * schedules and events, made on the first call of a size: warm a
 * communicator up outside CUDA graph capture, then calls are capturable and
 * allocate nothing. The first call on a communicator also learns which
 * ranks share a node: host ids (config.hostId, SIGNLION_HOSTID, NCCL_HOSTID,
 * else hostname + boot id) all-gathered over comm, waiting for the stream
 * once, and, when comm spans several nodes with several ranks on one, a
 * node communicator made with ncclCommSplit (docs/NCCL.md, "Nodes"); so
 * make each rank's first call from its own thread. ncclSignCommRelease
 * frees that cache and destroys the node communicator (NCCL has no
 * destruction hook): call it before ncclCommDestroy/ncclCommAbort.
 * ------------------------------------------------------------------------- */
#ifdef NCCL_SIGN_HAVE_NCCL

/* The sign all-reduce of this header's semantics on device buffers, in the
 * style of ncclAllReduce: stream-ordered and asynchronous (returns once the
 * work is enqueued on `stream`), collective over every rank of comm, with
 * the same count, datatype and op. sendbuff == recvbuff is in place. The
 * zero rule, tie rule and algorithm are the communicator's (see
 * ncclSignCommSetConfig; SIGNLION_ALGO forces an algorithm); a call with
 * rules of its own is ncclSignAllReduceWithConfig. Calls on one
 * comm run one after another even when made on different streams (they
 * share its scratch). The call issues NCCL operations and kernels that
 * depend on one another, so it must not be made between ncclGroupStart and
 * ncclGroupEnd (docs/NCCL.md says why).
 * Errors: ncclInvalidArgument (NULL buffers with count > 0, host buffers, a
 * datatype other than fp32/fp16/bf16/int8, an op out of range, average with
 * int8, a count whose bytes overflow, a NULL comm, a comm NCCL rejects),
 * ncclInvalidUsage (scratch would have to grow during graph capture),
 * NCCL's and CUDA's errors otherwise. */
ncclResult_t ncclSignAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                               ncclSignOp_t op, ncclComm_t comm, cudaStream_t stream);

/* ncclSignAllReduce with this call's own vote rules (config, see
 * ncclSignCallConfig_t; NULL: the communicator's, as ncclSignAllReduce).
 * Libraries and optimizers that share the framework's comm should pass
 * their rules here rather than set them on the comm with
 * ncclSignCommSetConfig: the rules given are used whatever another user of
 * comm sets, and ncclSignCommRelease does not reset them. Calls with
 * different rules share the comm's cache (schedules are kept per rule set).
 * Errors: those of ncclSignAllReduce, and ncclInvalidArgument for a config
 * of a wrong size, magic or version or with a rule out of range. */
ncclResult_t ncclSignAllReduceWithConfig(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclSignOp_t op, const ncclSignCallConfig_t* config, ncclComm_t comm,
                                         cudaStream_t stream);

/* Sets the zero rule, tie rule and algorithm of ncclSignAllReduce on comm
 * (timeoutMs and netPlugin do not apply to NCCL communicators); the calls
 * enqueued after it use them. Every rank must set the same. NULL restores
 * the defaults. The rules so set are the comm's, shared by every user of
 * comm; a call or an optimizer that names its own rules
 * (ncclSignAllReduceWithConfig, ncclSignLionConfig_t) is not affected. SIGNLION_ALGO, when set, still forces the algorithm. The
 * hostId is used by the comm's first call (set it before); a later change
 * is ignored with a WARN until ncclSignCommRelease.
 * Errors: ncclInvalidArgument (a NULL comm, a config ncclSignConfigCheck
 * rejects, a comm NCCL rejects). */
ncclResult_t ncclSignCommSetConfig(ncclComm_t comm, const ncclSignConfig_t* config);

/* Frees what signlion cached for comm (scratch, schedules, events, the
 * node communicator, and the config of ncclSignCommSetConfig) once the
 * work already enqueued on it outside graph capture is done; CUDA graphs that captured calls on comm
 * must not be replayed afterwards. Not collective; comm may be used again
 * afterwards (the cache is made anew, with the default config: rules set
 * with ncclSignCommSetConfig are gone, rules passed with a call or an
 * optimizer's config stay theirs). A comm never used is fine.
 * Errors: ncclInvalidArgument (a NULL comm), CUDA's errors (everything is
 * freed regardless). */
ncclResult_t ncclSignCommRelease(ncclComm_t comm);

#endif /* NCCL_SIGN_HAVE_NCCL */

/* ---------------------------------------------------------------------------
 * Distributed Lion (Liu et al., Algorithm 1) on flat buffers.
 *
 * One optimizer object updates `count` parameters held in one flat buffer of
 * fp32, fp16 or bf16 (gradients in the same datatype). Every rank keeps its own
 * fp32 momentum m. A step is two fused passes around one collective:
 *   pass 1, per element: g' = g / d (d = N for "global", else 1),
 *     c = beta1*m + (1-beta1)*g',  m <- beta2*m + (1-beta2)*g',
 *     and c's vote goes to a scratch buffer;
 *   the votes are combined (sign all-reduce, or nothing for "local");
 *   pass 2, per element: p <- p - lr*(u + weightDecay*p), u the combined update.
 * Weight decay and momentum never travel. All arithmetic is fp32, one rounding
 * per operation in the order written (1-beta is computed in fp32), and
 * fp16/bf16 parameters are rounded to nearest even when stored.
 * ------------------------------------------------------------------------- */

/* How the ranks' updates are combined. */
typedef enum {
  ncclSignLionMajority = 0, /* "mavo": u = majority vote of the ranks' sign(c) (ncclSignMajority) */
  ncclSignLionAverage = 1,  /* u = mean of the ranks' sign(c), in [-1, 1] (ncclSignAverage) */
  ncclSignLionGlobal = 2,   /* plain Lion on the mean gradient (fp32 sum all-reduce, / N): the baseline */
  ncclSignLionLocal = 3,    /* plain Lion on this rank's gradient, no communication */
  ncclSignLionNumAggregations = 4
} ncclSignLionAggregation_t;

typedef struct ncclSignLionConfig_v1 {
  size_t size;          /* sizeof(ncclSignLionConfig_t), set by the initializer */
  unsigned int magic;   /* NCCL_SIGN_LION_CONFIG_MAGIC */
  unsigned int version; /* NCCL_SIGN_VERSION_CODE of the header used */
  float lr;             /* learning rate, >= 0 (0: parameters stay, momentum moves); default 1e-4 */
  float beta1;          /* interpolation factor of the update, in [0, 1); default 0.9 */
  float beta2;          /* momentum decay, in [0, 1); default 0.99 */
  float weightDecay;    /* decoupled, local, multiplied by lr, outside the sign; >= 0; default 0 */
  int aggregation;      /* ncclSignLionAggregation_t; ncclSignLionMajority by default */
  int masterWeights;    /* 1: fp16/bf16 parameters are updated through an fp32 master copy,
                           taken from the parameters at the first step (or from a loaded state) */
  int momentumAverageEvery; /* K > 0: after every K-th step (applied or skipped) the momenta are
                               averaged over the ranks (Lion Cub; fp32 sum all-reduce); 0 = never */
  int skipNonFinite;    /* 1: a step in which any rank has a non-finite gradient changes
                           nothing on any rank (the ranks agree through the communicator) */
  /* The vote rules of this optimizer's sign all-reduces, its own whatever
     other users of the communicator set (ncclSignCallConfig_t):
     ncclSignZeroRule_t / ncclSignTieRule_t, or NCCL_SIGN_RULE_OF_COMM (the
     initializer's) for the communicator's rule at each step. A struct of an
     older header without these two fields is accepted (its size says so) and
     takes the communicator's rules. */
  int zeroRule;
  int tieRule;
} ncclSignLionConfig_t;

#define NCCL_SIGN_LION_CONFIG_MAGIC 0x4c494f4eu /* "LION" */
#define NCCL_SIGN_LION_CONFIG_INITIALIZER                                                        \
  {                                                                                              \
    sizeof(ncclSignLionConfig_t), NCCL_SIGN_LION_CONFIG_MAGIC, NCCL_SIGN_VERSION_CODE, 1e-4f, 0.9f, \
        0.99f, 0.0f, ncclSignLionMajority, 0, 0, 0, NCCL_SIGN_RULE_OF_COMM, NCCL_SIGN_RULE_OF_COMM  \
  }

typedef struct ncclSignLion* ncclSignLion_t;

/* Creates an optimizer for `count` parameters of `datatype` (fp32, fp16,
 * bf16) on host buffers. comm is the host communicator the ranks share (it
 * must outlive the optimizer); it may be NULL only for ncclSignLionLocal.
 * Collective on comm only in that every rank must create its optimizer with
 * the same count, datatype and config before its first step.
 * The zero and tie rules of the votes are config's zeroRule and tieRule,
 * or comm's where they are NCCL_SIGN_RULE_OF_COMM (docs/LION.md).
 * Errors: ncclInvalidArgument (a NULL lion, a bad datatype, a bad config:
 * a wrong size or magic, a value out of range, a rule that is neither an
 * ncclSignZeroRule_t / ncclSignTieRule_t nor NCCL_SIGN_RULE_OF_COMM),
 * ncclSystemError when the state cannot be allocated. */
ncclResult_t ncclSignLionCreate(ncclSignLion_t* lion, size_t count, ncclDataType_t datatype,
                                const ncclSignLionConfig_t* config, ncclSignComm_t comm);

ncclResult_t ncclSignLionDestroy(ncclSignLion_t lion);

/* Changes the hyperparameters for the next steps (learning-rate schedules;
 * lr = 0 is valid). Errors: ncclInvalidArgument, as for the config. */
ncclResult_t ncclSignLionSetHyperparameters(ncclSignLion_t lion, float lr, float beta1, float beta2,
                                            float weightDecay);

/* One step: updates params (count elements of the datatype) in place from
 * grads. Collective: every rank of comm calls it. *applied (may be NULL) is
 * set to 0 when the step was skipped for a non-finite gradient, else 1.
 * A majority or average step over more than SIGNLION_LION_CHUNK elements
 * (default 1M; read when the optimizer is created) runs its all-reduces
 * chunk by chunk on a thread of comm's (one per communicator, shared by its
 * optimizers, started at the first such step, idle between steps, joined
 * when the last optimizer on comm is destroyed) while the calling thread runs the passes over the chunks
 * around it; the result is bit for bit the same. The step returns only once
 * every all-reduce it started has completed, so comm is free on return. No
 * other call on comm may overlap a step.
 * Errors: ncclInvalidArgument (NULL buffers with count > 0), ncclInvalidUsage
 * (an optimizer on device buffers: ncclSignLionStepAsync), the
 * communicator's errors (the optimizer state is then undefined). */
ncclResult_t ncclSignLionStep(ncclSignLion_t lion, void* params, const void* grads, int* applied);

/* Steps applied and skipped since creation (or as restored by a load). */
ncclResult_t ncclSignLionGetStepCount(const ncclSignLion_t lion, uint64_t* applied, uint64_t* skipped);

/* This rank's state (momentum, master copy, counters) as bytes: the size,
 * then a save into a caller buffer of at least that size. Loading it into an
 * optimizer made with the same count, datatype, aggregation and master option
 * continues training bit for bit. Not collective.
 * Errors: ncclInvalidArgument (a buffer too small, a state of another shape
 * or a corrupt one). */
ncclResult_t ncclSignLionGetStateSize(const ncclSignLion_t lion, size_t* bytes);
ncclResult_t ncclSignLionSaveState(const ncclSignLion_t lion, void* buffer, size_t bytes);
ncclResult_t ncclSignLionLoadState(ncclSignLion_t lion, const void* buffer, size_t bytes);

/* When each phase of a step ran, for a timeline of the step (profiling).
 * A host optimizer's ncclSignLionStep runs, per chunk (one chunk unless the
 * step is pipelined, see ncclSignLionStep), pass 1 (the momentum interpolation
 * and this rank's vote), the sign all-reduce of the votes and pass 2 (the
 * update applied); pipelined, chunk i's all-reduce runs on comm's thread while
 * the calling thread runs pass 1 of chunk i + 1 and pass 2 of chunk i - 1.
 * With aggregation ncclSignLionGlobal the all-reduce is the fp32 sum of the
 * gradients, before pass 1; ncclSignLionLocal has none. The other collectives
 * of a step (skipNonFinite's flag, momentumAverageEvery's mean) are not
 * recorded. Times are microseconds of CLOCK_MONOTONIC (std::chrono::steady_clock),
 * read on the thread that ran the phase (an all-reduce: from when that thread
 * began the call to when it returned). */
typedef enum {
  ncclSignLionPhaseVote = 0,      /* pass 1 */
  ncclSignLionPhaseAllReduce = 1, /* the collective */
  ncclSignLionPhaseApply = 2,     /* pass 2 */
  ncclSignLionNumPhases = 3
} ncclSignLionPhase_t;

typedef struct {
  int phase;       /* ncclSignLionPhase_t */
  int chunk;       /* which chunk of the step, from 0 */
  int64_t beginUs; /* when it began and ended */
  int64_t endUs;
} ncclSignLionPhaseTime_t;

/* enable != 0: every later step records its phases (ncclSignLionGetPhases
 * reads the last step's); 0 (the default) stops: a step then reads no clock
 * and records nothing. Not collective. Errors: ncclInvalidArgument,
 * ncclInvalidUsage for an optimizer on device buffers (its steps are
 * enqueued by the call, not run). */
ncclResult_t ncclSignLionRecordPhases(ncclSignLion_t lion, int enable);

/* The phases of the last step recorded, in the order the step finished with
 * them (per chunk: pass 1, the all-reduce, pass 2): copies the first
 * min(capacity, *count) into phases (may be NULL when capacity is 0) and sets
 * *count to how many the step recorded (0 before the first recorded step; a
 * step skipped for a non-finite gradient records its pass 2 only).
 * Errors: ncclInvalidArgument (a NULL count, capacity < 0, a NULL phases with
 * capacity > 0). */
ncclResult_t ncclSignLionGetPhases(const ncclSignLion_t lion, ncclSignLionPhaseTime_t* phases, int capacity,
                                   int* count);

#ifdef NCCL_SIGN_HAVE_NCCL
/* ---------------------------------------------------------------------------
 * Distributed Lion on the user's NCCL communicator (device buffers).
 *
 * The same optimizer, the same arithmetic bit for bit, with its state on the
 * communicator's GPU: the two passes are CUDA kernels, the votes go through
 * ncclSignAllReduce, the fp32 sums ("global", momentum averaging, the
 * non-finite agreement) through ncclAllReduce of the NCCL the process has
 * loaded. A step is enqueued on a stream like an NCCL collective and never
 * waits for the GPU; whether it was skipped for a non-finite gradient is
 * decided and counted on the device. The calls above apply to a device
 * optimizer too, except ncclSignLionStep (use ncclSignLionStepAsync):
 *  - ncclSignLionGetStepCount, ncclSignLionSaveState and ncclSignLionLoadState
 *    wait for every step enqueued so far, and every launch of a graph that
 *    captured one (on any stream), then copy between
 *    the device and host memory: the state format is the host optimizer's,
 *    so a state moves freely between the two kinds;
 *  - ncclSignLionDestroy waits for the steps in flight, then frees the state.
 * ------------------------------------------------------------------------- */

/* Creates an optimizer for `count` parameters of `datatype` (fp32, fp16,
 * bf16) on device buffers of comm's GPU (comm: the framework's ncclComm_t;
 * it must outlive the optimizer; destroy the optimizer before
 * ncclCommDestroy). comm may be NULL only for ncclSignLionLocal: the GPU is
 * then the current device. The fp32 momentum, the master copy and the vote
 * scratch (5 to 13 bytes per parameter) are allocated here, once; a step
 * allocates nothing of its own. Not collective, but every rank must create
 * its optimizer with the same count, datatype and config. The zero and tie
 * rules of the votes are config's zeroRule and tieRule: two optimizers on
 * one comm may vote by different rules, and neither ncclSignCommSetConfig
 * nor ncclSignCommRelease changes them. Where config leaves them at
 * NCCL_SIGN_RULE_OF_COMM (or is of an older header without them), each step
 * takes comm's rules (ncclSignCommSetConfig) at the time it is enqueued.
 * Errors: ncclInvalidArgument (a NULL lion, a bad datatype, a bad config, a
 * NULL comm with another aggregation, a comm NCCL rejects), ncclInvalidUsage
 * (an NCCL older than 2.19, a nonblocking comm still being initialized),
 * ncclUnhandledCudaError (no usable GPU, out of device memory),
 * ncclSystemError (no NCCL in the process), comm's pending asynchronous error. */
ncclResult_t ncclSignLionCreateNccl(ncclSignLion_t* lion, size_t count, ncclDataType_t datatype,
                                    const ncclSignLionConfig_t* config, ncclComm_t comm);

/* One step on device buffers, enqueued on `stream`: reads grads and updates
 * params (count elements of the datatype, device memory of the optimizer's
 * GPU) in stream order, then returns without waiting, as ncclAllReduce does.
 * Collective: every rank of comm calls it, in the same order as its other
 * operations on comm, and not between ncclGroupStart and ncclGroupEnd (it
 * issues NCCL operations and kernels that depend on one another). With
 * skipNonFinite, a step in which any rank's gradient holds an inf or a NaN
 * changes nothing on any rank and is counted as skipped on the device
 * (ncclSignLionGetStepCount); the host never learns it during the step.
 * Steps run one after another whatever streams they are enqueued on (they
 * share the optimizer's state). A step may be captured in a CUDA graph
 * after one eager step: it waits for and marks the optimizer's last step as
 * external event nodes, as ncclSignAllReduce's calls do, so each launch of
 * the graph runs after the last step enqueued or launched before it, and the
 * steps, copies and destruction after the launch wait for it. The host
 * counts steps called: the K of momentumAverageEvery and the first step's
 * master copy are decided when the call enqueues, so a captured step replays
 * the decisions of the call it captured, and its replays are not counted
 * (ncclSignLionGetStepCount's applied count is then wrong).
 * Errors: ncclInvalidArgument (NULL or host buffers with count > 0, buffers
 * of another GPU), ncclInvalidUsage (a host optimizer), the errors of
 * ncclSignAllReduce, NCCL and CUDA (the optimizer state is then undefined). */
ncclResult_t ncclSignLionStepAsync(ncclSignLion_t lion, void* params, const void* grads, cudaStream_t stream);

#endif /* NCCL_SIGN_HAVE_NCCL */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_SIGN_H_ */
