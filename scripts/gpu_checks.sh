#!/usr/bin/env bash
# What a machine with an NVIDIA GPU runs to validate the CUDA kernels
# (kernels/) and ncclSignAllReduce (src/nccl/): build, the gpu tests (none may
# be skipped), compute-sanitizer memcheck over the gpu test binaries, then the
# kernel benchmark and sign_allreduce_perf --nccl at N = 2 and 4. Fails
# loudly, before building, when no GPU is visible.
#
#   bash scripts/gpu_checks.sh            # BUILD=build-gpu JOBS=$(nproc) by default
#   MEMCHECK_FILTER='*Pack*' bash scripts/gpu_checks.sh   # a gtest filter for the memcheck run
#   BENCH_ARGS='--elems=64M' bash scripts/gpu_checks.sh
#   NCCL_MEMCHECK_FILTER='*' PERF_ARGS='-b 8 -e 1G -f 2' bash scripts/gpu_checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

die() {
  echo "gpu_checks: FAILED: $*" >&2
  exit 1
}

echo "== device =="
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this machine has no NVIDIA driver, so no GPU to check"
nvidia-smi -L || die "nvidia-smi lists no GPU"
[ -n "$(nvidia-smi -L)" ] || die "nvidia-smi lists no GPU"

SANITIZER=${COMPUTE_SANITIZER:-}
if [ -z "$SANITIZER" ]; then
  for c in "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer" \
           "$(command -v compute-sanitizer || true)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then SANITIZER=$c; break; fi
  done
fi
[ -n "$SANITIZER" ] || die "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)"

echo "== build ($BUILD) =="
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSIGNLION_ENABLE_CUDA=ON
cmake --build "$BUILD" -j "$JOBS" --target signlion_gpu_kernel_tests kernel_bench signlion_gpu_nccl_tests \
  sign_allreduce_perf nccl-net-signlion

echo "== ctest -L gpu =="
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 1800) 2>&1 | tee "$log" || die "gpu tests failed"
if grep -q '\*\*\*Skipped' "$log"; then
  die "gpu tests were skipped: the test binary found no CUDA device although nvidia-smi lists one"
fi
grep -q "tests passed" "$log" || die "no gpu test ran"

echo "== compute-sanitizer memcheck =="
"$SANITIZER" --tool memcheck --error-exitcode 1 --leak-check full \
  "$BUILD/tests/signlion_gpu_kernel_tests" --gtest_filter="${MEMCHECK_FILTER:-*}" \
  || die "compute-sanitizer memcheck reported errors"

# ncclSignAllReduce: its ranks are forked processes, which compute-sanitizer
# follows. The default filter keeps it to the short tests (the matrix under
# memcheck takes long).
echo "== compute-sanitizer memcheck: ncclSignAllReduce =="
SIGNLION_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo \
  "$SANITIZER" --tool memcheck --error-exitcode 1 \
  "$BUILD/tests/signlion_gpu_nccl_tests" --gtest_filter="${NCCL_MEMCHECK_FILTER:-*ReleaseThenReuse*:*Captured*}" \
  || die "compute-sanitizer memcheck reported errors in ncclSignAllReduce"

echo "== kernel_bench =="
set +e
"$BUILD/perf/kernel_bench" ${BENCH_ARGS:-}
rc=$?
set -e
[ $rc -eq 77 ] && die "kernel_bench found no CUDA device"
[ $rc -eq 0 ] || die "kernel_bench exited with $rc"

# Ranks r on GPU r % devices; ranks that share a GPU get one NCCL_HOSTID each,
# so NCCL connects them through its network (loopback here), not NVLink.
echo "== sign_allreduce_perf --nccl =="
for n in 2 4; do
  NCCL_SOCKET_IFNAME=lo "$BUILD/perf/sign_allreduce_perf" --nccl -t "$n" ${PERF_ARGS:--b 8 -e 256M -f 4} -o mavo -d all \
    || die "sign_allreduce_perf --nccl -t $n failed"
done
# Issue 3 on a GPU: NCCL itself over the signlion net plugin. NCCL_NET=signlion
# makes NCCL fail rather than fall back to its own sockets; its INFO log must
# name the plugin, and NCCL's fp32 ncclAllReduce result is checked (-c 1).
echo "== NCCL over the signlion net plugin =="
for n in 2 4; do
  NCCL_SOCKET_IFNAME=lo SIGNLION_SOCKET_IFNAME=lo NCCL_NET_PLUGIN="$PWD/$BUILD/lib/libnccl-net-signlion.so" \
    NCCL_NET=signlion NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
    "$BUILD/perf/sign_allreduce_perf" --nccl -t "$n" -b 1M -e 16M -f 4 -c 1 -o mavo -d float >"$log" 2>&1 \
    || { cat "$log"; die "NCCL over the signlion plugin failed at N = $n"; }
  grep -iE "NET/Plugin.*signlion|Using network signlion" "$log" || { cat "$log"; die "NCCL's log does not name the signlion plugin"; }
  grep -E "ncclAllReduce fp32 sum check.*OK" "$log" || { cat "$log"; die "ncclAllReduce over the plugin gave wrong sums"; }
done
echo "gpu_checks: all passed"
