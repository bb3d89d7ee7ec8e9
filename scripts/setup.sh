#!/usr/bin/env bash
# Installs the Debian packages signlion needs to build and test. Idempotent:
# when everything is already installed it changes nothing. Run as root.
# CUDA 13 and NCCL come preinstalled under /usr/local/cuda and are optional.
# ninja-build: the README's builds use -G Ninja, and the wheel's CMake build
# (scikit-build-core) uses it instead of fetching ninja from the registry.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 iperf3 procps
  libucx-dev ucx-utils libibverbs-dev rdma-core
  openmpi-bin libopenmpi-dev
  python3-matplotlib
  python3-torch python3-sklearn python3-numpy python3-pip python3-venv python3-setuptools
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
