/* ncclSignAllReduce on an NCCL communicator, in plain C: the smallest
 * complete program. A framework already has the communicator, a stream and
 * the update on the GPU; vote_on_update() below is the part it adds.
 *
 *   nccl_sign_allreduce_minimal [NRANKS]      (default 2)
 *
 * Starts NRANKS processes, one rank each, on device rank % (number of GPUs),
 * makes their ncclComm_t with ncclCommInitRank, runs one majority vote over
 * 1M fp32 elements and checks every rank's result against a plain loop.
 * Where ranks outnumber GPUs, each rank gets its own NCCL_HOSTID, so NCCL
 * treats the ranks as separate hosts and connects them through its network
 * plugin (set NCCL_NET_PLUGIN to signlion's to use it), as in a multi-node job.
 * Exit status 0 when every rank's result is right.
 *
 * Build against an installed signlion (README, "Quick start", "NCCL"):
 *   cmake -S examples/nccl_minimal -B build-minimal -DCMAKE_PREFIX_PATH=PREFIX
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <nccl_sign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT ((size_t)1 << 20)

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));              \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(call)                                                                      \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, ncclGetErrorString(r_));              \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

/* The part a training framework adds: every rank's Lion update (any sign,
 * fp32 here; fp16 and bf16 work alike) becomes the majority vote of all
 * ranks, in place, ordered on the stream like ncclAllReduce. */
static int vote_on_update(int rank, ncclComm_t comm, cudaStream_t stream, float* d_update, size_t count) {
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER; /* a zero votes +1; a tie gives 0 */
  CHECK_NCCL(ncclSignCommSetConfig(comm, &config));      /* optional; every rank sets the same */
  CHECK_NCCL(ncclSignAllReduce(d_update, d_update, count, ncclFloat32, ncclSignMajority, comm, stream));
  return 0;
}

/* Rank r's update: element i is +1 where bit (r % 20) of i is set, else -1. */
static float update_of(int r, size_t i) { return ((i >> (r % 20)) & 1) ? 1.0f : -1.0f; }

static int rank_main(int rank, int nranks, int id_in, const int* id_out) {
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  if (nranks > devices) { /* ranks share a GPU: one "host" each, so NCCL goes through its network plugin */
    char host[64];
    snprintf(host, sizeof host, "signlion-minimal-rank%d", rank);
    setenv("NCCL_HOSTID", host, 1);
  }
  CHECK_CUDA(cudaSetDevice(rank % devices));

  /* Rank 0 makes the unique id and hands it to the others through pipes. */
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    for (int r = 1; r < nranks; ++r)
      if (write(id_out[r], &id, sizeof id) != (ssize_t)sizeof id) return 1;
  } else if (read(id_in, &id, sizeof id) != (ssize_t)sizeof id) {
    fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
    return 1;
  }
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  float* host = (float*)malloc(COUNT * sizeof(float));
  float* d_update = NULL;
  if (!host) return 1;
  for (size_t i = 0; i < COUNT; ++i) host[i] = update_of(rank, i);
  CHECK_CUDA(cudaMalloc((void**)&d_update, COUNT * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(d_update, host, COUNT * sizeof(float), cudaMemcpyHostToDevice));

  if (vote_on_update(rank, comm, stream, d_update, COUNT) != 0) return 1;

  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(host, d_update, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < COUNT; ++i) {
    int sum = 0;
    for (int r = 0; r < nranks; ++r) sum += update_of(r, i) > 0 ? 1 : -1;
    float want = (float)((sum > 0) - (sum < 0));
    if (host[i] != want) ++wrong;
  }
  printf("rank %d of %d on GPU %d: majority vote of %zu fp32 elements, %zu wrong\n", rank, nranks,
         rank % devices, (size_t)COUNT, wrong);

  CHECK_NCCL(ncclSignCommRelease(comm)); /* before ncclCommDestroy: frees signlion's per-comm cache */
  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_CUDA(cudaFree(d_update));
  CHECK_CUDA(cudaStreamDestroy(stream));
  free(host);
  return wrong == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 1 || nranks > 64) {
    fprintf(stderr, "usage: %s [NRANKS]  (1 to 64 ranks, one process each; default 2)\n", argv[0]);
    return 2;
  }
  /* This process stays CUDA-free (a child cannot use its parent's CUDA context). */
  int pipes[64][2];
  for (int r = 0; r < nranks; ++r)
    if (pipe(pipes[r]) != 0) return perror("pipe"), 1;
  pid_t pids[64];
  for (int r = 0; r < nranks; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) return perror("fork"), 1;
    if (pids[r] == 0) {
      int out[64];
      for (int q = 0; q < nranks; ++q) {
        out[q] = pipes[q][1];
        if (q != r) close(pipes[q][0]);
        if (r != 0) close(pipes[q][1]); /* only rank 0 writes: the others see EOF if it dies */
      }
      _exit(rank_main(r, nranks, pipes[r][0], out));
    }
  }
  for (int r = 0; r < nranks; ++r) close(pipes[r][0]), close(pipes[r][1]);
  int failed = 0;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    if (waitpid(pids[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "rank %d failed\n", r);
      failed = 1;
    }
  }
  if (!failed) printf("nccl_sign_allreduce_minimal: %d ranks, every result right\n", nranks);
  return failed;
}
