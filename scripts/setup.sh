#!/usr/bin/env bash
# Installs the Debian packages signlion needs to build and test. Idempotent:
# when everything is already installed it changes nothing. Run as root.
# Python packages Debian lacks come from the Python registry (pip, below).
# CUDA 13 and NCCL come preinstalled under /usr/local/cuda and are optional.
# ninja-build: the README's builds use -G Ninja, and the wheel's CMake build
# (scikit-build-core) uses it instead of fetching ninja from the registry.
# clang, libclang-rt-14-dev: the fuzz targets (tests/fuzz) need clang and its
# libFuzzer and sanitizer runtimes, which clang only recommends.
# libopenblas0-pthread: Debian's torch calls the system BLAS, which is the
# reference one unless an optimized one is installed (a 4096 x 4096 matmul ran
# 15x faster with OpenBLAS); fortunes: the text corpus of examples/train.py's
# language model (docs/TRAINING.md). slurm-wlm, nftables: the netns tests that
# launch with a real Slurm and run behind a firewall (tests/cluster.cmake).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 iperf3 procps
  libucx-dev ucx-utils libibverbs-dev rdma-core
  openmpi-bin libopenmpi-dev slurm-wlm nftables
  python3-matplotlib libopenblas0-pthread
  dataset-fashion-mnist fortunes
  python3-torch python3-sklearn python3-numpy python3-pip python3-venv python3-setuptools
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python packages Debian does not ship, from the Python registry, for the
# interpreter that has Debian's python3-torch (the python tests' SIGNLION_PYTHON).
# --no-deps: they must not replace Debian's torch with a registry build.
# lion-pytorch: python.api.loads_a_lion_pytorch_state_dict loads its state dict.
# nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm: the static.cuda_* tests read the
# kernels' SASS and resource usage with them (the toolkit here lacks both;
# cuobjdump runs nvdisasm for SASS). 13.5 reads CUDA 13.0's sm_80,
# sm_90 and sm_100 objects; about 6 MiB.
PY=/usr/bin/python3
PIP_PACKAGES=(lion-pytorch==0.2.5 nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37)
for spec in "${PIP_PACKAGES[@]}"; do
  name=${spec%%==*}
  want=${spec#*==}
  if [ "$($PY -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')" = "$want" ]; then
    echo "setup: $spec present"
    continue
  fi
  echo "setup: pip installing $spec"
  $SUDO $PY -m pip install -q --no-deps --break-system-packages "$spec"
done
echo "setup: done"
