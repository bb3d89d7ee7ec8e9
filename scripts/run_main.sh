#!/usr/bin/env bash
# README command (1): builds signlion (Release) and runs the main job: the vote
# self-check, the host sign all-reduce demo, a short Distributed Lion
# convergence study (docs/CONVERGENCE.md has the full one) and the vote-algebra
# micro-benchmark with its ratio summary.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS"
echo
"$BUILD"/examples/vote_selfcheck 8 1000003
echo
# 4 ranks over loopback: the sign all-reduce (each algorithm) vs the fp32 sum all-reduce.
"$BUILD"/examples/host_allreduce_demo 4 4194304 5
echo
# Distributed Lion on Fashion-MNIST, 4 workers: majority vote, average, global Lion, AdamW,
# local Lion (the full study: examples/convergence_study.py --byzantine; docs/CONVERGENCE.md).
SIGNLION_LIBRARY="$(cd "$BUILD" && pwd)/src/host/libnccl-sign.so" /usr/bin/python3 examples/convergence_study.py --workers 4 --seeds 1 --steps 200 --grid small || {
  rc=$?; [ $rc -eq 77 ] && echo "(convergence study skipped: no torch for /usr/bin/python3, or no dataset-fashion-mnist)" || exit $rc; }
echo
# 64M elements, as in docs/PERFORMANCE.md; BENCH_MIN_TIME trades time for noise.
"$BUILD"/perf/bits_bench --benchmark_min_time="${BENCH_MIN_TIME:-0.2}" --benchmark_repetitions="${BENCH_REPS:-3}" \
  --benchmark_report_aggregates_only=true --benchmark_color=false
