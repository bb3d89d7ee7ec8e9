#!/usr/bin/env bash
# Builds signlion and runs every test: the full CTest suite (unit, multirank,
# plugin, netns, python under Debian's PyTorch 1.13 and torch2.* under a
# PyTorch 2.x that scripts/setup_torch2.sh installs in a virtual environment;
# gpu tests skip without a device), then the unit, multirank and concurrency tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, then the multirank and plugin tests
# under ThreadSanitizer (host only), then a short run of every fuzz target
# (tests/fuzz, docs/dev/FUZZING.md). README command (2).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD:-build}
BUILD_SAN=${BUILD_SAN:-build-asan}
BUILD_TSAN=${BUILD_TSAN:-build-tsan}
BUILD_FUZZ=${BUILD_FUZZ:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}  # per target
LOGDIR=$(mktemp -d)
trap 'rm -rf "$LOGDIR"' EXIT

summarize() {  # ctest log -> "passed failed skipped"
  local log=$1 total failed skipped
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  skipped=$(grep -c '\*\*\*Skipped\|Not Run (Disabled)' "$log" || true)
  echo "$((total - failed - skipped)) $failed $skipped"
}

echo "== PyTorch 2.x beside Debian's 1.13 (scripts/setup_torch2.sh) =="
# The torch2.* tests run signlion.torch and the training example under it.
# SIGNLION_TORCH2=0 leaves them out (CTest then says so at configure time).
TORCH2_PYTHON=${SIGNLION_TORCH2_VENV:-$HOME/.cache/signlion/torch2-venv}/bin/python
if [ "${SIGNLION_TORCH2:-1}" != 0 ]; then
  bash scripts/setup_torch2.sh
else
  TORCH2_PYTHON=/nonexistent
fi

echo "== build ($BUILD) =="
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSIGNLION_TORCH2_PYTHON="$TORCH2_PYTHON"
cmake --build "$BUILD" -j "$JOBS"

echo "== ctest ($BUILD) =="
rc=0
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 600) 2>&1 | tee "$LOGDIR/main.log" || rc=1

echo "== build ($BUILD_SAN: address,undefined) =="
cmake -S . -B "$BUILD_SAN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIGNLION_SANITIZE=address,undefined \
  -DSIGNLION_ENABLE_CUDA=OFF -DSIGNLION_BUILD_PERF=OFF
cmake --build "$BUILD_SAN" -j "$JOBS"

echo "== ctest ($BUILD_SAN, labels unit, multirank and concurrency) =="
(cd "$BUILD_SAN" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$JOBS" -L "unit|multirank|concurrency" --timeout 900) 2>&1 | tee "$LOGDIR/san.log" || rc=1

# Ranks as threads and the transport's helper threads: every data race is a
# failure (TSan exits 66 on a report). The netns test runs in the main pass.
echo "== build ($BUILD_TSAN: thread) =="
cmake -S . -B "$BUILD_TSAN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIGNLION_SANITIZE=thread \
  -DSIGNLION_ENABLE_CUDA=OFF -DSIGNLION_BUILD_PERF=OFF
cmake --build "$BUILD_TSAN" -j "$JOBS"

echo "== ctest ($BUILD_TSAN, labels multirank and plugin) =="
(cd "$BUILD_TSAN" && TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
  ctest --output-on-failure -j "$JOBS" -L "multirank|plugin" -LE netns --timeout 900) 2>&1 | tee "$LOGDIR/tsan.log" || rc=1

# Every parser of a peer's bytes under libFuzzer (clang): each target starts
# from its seed corpus (tests/fuzz/corpus/<target>, read only) and runs
# FUZZ_SECONDS; a crash, leak, sanitizer report, input slower than 10 s or
# 2 GiB of memory fails it. What it finds is kept under $BUILD_FUZZ, never in
# the tree.
echo "== build ($BUILD_FUZZ: fuzz targets, clang) =="
CC=clang CXX=clang++ cmake -S . -B "$BUILD_FUZZ" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIGNLION_BUILD_FUZZERS=ON \
  -DSIGNLION_ENABLE_CUDA=OFF -DSIGNLION_BUILD_PERF=OFF -DSIGNLION_BUILD_TESTS=OFF
cmake --build "$BUILD_FUZZ" -j "$JOBS" --target signlion_fuzzers

fuzz_passed=0 fuzz_failed=0
for seeds in tests/fuzz/corpus/*/; do
  target=$(basename "$seeds")
  echo "== fuzz $target (${FUZZ_SECONDS} s) =="
  mkdir -p "$BUILD_FUZZ/fuzz-corpus/$target" "$BUILD_FUZZ/fuzz-artifacts"
  if "$BUILD_FUZZ/tests/fuzz/$target" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
       -max_len=4096 -print_final_stats=1 -artifact_prefix="$BUILD_FUZZ/fuzz-artifacts/$target-" \
       "$BUILD_FUZZ/fuzz-corpus/$target" "$seeds" > "$LOGDIR/fuzz-$target.log" 2>&1; then
    fuzz_passed=$((fuzz_passed + 1))
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units' "$LOGDIR/fuzz-$target.log" || true
  else
    fuzz_failed=$((fuzz_failed + 1))
    rc=1
    tail -n 60 "$LOGDIR/fuzz-$target.log"
  fi
done

read -r p1 f1 s1 < <(summarize "$LOGDIR/main.log")
read -r p2 f2 s2 < <(summarize "$LOGDIR/san.log")
read -r p3 f3 s3 < <(summarize "$LOGDIR/tsan.log")
echo
echo "ctest ($BUILD): $p1 passed, $f1 failed, $s1 skipped"
echo "ctest ($BUILD_SAN): $p2 passed, $f2 failed, $s2 skipped"
echo "ctest ($BUILD_TSAN): $p3 passed, $f3 failed, $s3 skipped"
echo "total: $((p1 + p2 + p3)) passed, $((f1 + f2 + f3)) failed, $((s1 + s2 + s3)) skipped"
echo "fuzz ($BUILD_FUZZ): $fuzz_passed targets passed, $fuzz_failed failed (${FUZZ_SECONDS} s each)"
exit $rc
