#!/usr/bin/env bash
# The Python package as a user installs it (README, "Quick start: PyTorch"): builds the wheel
# from a copy of the source tree in a temporary folder (pip, build isolation:
# scikit-build-core comes from the package registry), checks that the build
# wrote nothing into that copy and that the wheel carries both libraries and
# the version of CMakeLists.txt, installs it into a fresh virtual environment
# and runs a 2-rank sign all-reduce from Python, from a folder outside the
# source tree, with SIGNLION_LIBRARY unset (the package finds its own library).
# SIGNLION_SOCKET_IFNAME=lo only keeps the ranks' traffic on loopback.
#   wheel_install_test.sh PYTHON SOURCE_DIR
# WHEEL_CUDA=ON|OFF|AUTO (default OFF: a host-only wheel, so CI does not
# compile the CUDA kernels a second time).
set -euo pipefail
PY=$1 SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The README makes its virtual environment at the top of the repository: git must ignore it.
if ! git -C "$SRC" check-ignore -q .venv/; then
  echo "FAILED: .venv/ (the README's virtual environment) is not ignored: git status would list it"
  exit 1
fi

# The wheel's CMake build (scikit-build-core) uses the system ninja that
# scripts/setup.sh installs; without one, pip fetches ninja from the registry.
if ! grep -qw ninja-build "$SRC/scripts/setup.sh"; then
  echo "FAILED: scripts/setup.sh does not install ninja-build: the wheel build would fetch ninja from the registry"
  exit 1
fi
if ! command -v ninja > /dev/null; then
  echo "FAILED: no ninja on PATH (bash scripts/setup.sh installs ninja-build)"
  exit 1
fi

# The files git would commit (tracked, and untracked but not ignored): a clean clone's tree.
mkdir "$TMP/src"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard) |
  (cd "$SRC" && xargs -0 cp --parents -t "$TMP/src" 2>/dev/null || true)
test -f "$TMP/src/pyproject.toml"
(cd "$TMP/src" && find . -print | sort) > "$TMP/tree.before"

"$PY" -m venv --system-site-packages "$TMP/venv"
PIP=("$TMP/venv/bin/python" -m pip --disable-pip-version-check)
ARGS=(--config-settings "cmake.define.SIGNLION_ENABLE_CUDA=${WHEEL_CUDA:-OFF}")
if command -v ccache > /dev/null; then  # a developer's machine: reuse its compiler cache
  ARGS+=(--config-settings cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache --config-settings cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
start=$(date +%s)
if ! "${PIP[@]}" wheel -v --no-deps -w "$TMP/wheels" "${ARGS[@]}" "$TMP/src" > "$TMP/wheel.log" 2>&1; then
  cat "$TMP/wheel.log"
  echo "FAILED: pip wheel (log above; scikit-build-core comes from the package registry)"
  exit 1
fi
echo "wheel built in $(($(date +%s) - start)) s"
# pip -v lists what build isolation collected: scikit-build-core, but no ninja.
if grep -iE "Collecting (ninja|cmake)\b" "$TMP/wheel.log"; then
  echo "FAILED: pip fetched a build tool from the registry (lines above) instead of using the system one"
  exit 1
fi

(cd "$TMP/src" && find . -print | sort) > "$TMP/tree.after"
if ! diff "$TMP/tree.before" "$TMP/tree.after"; then
  echo "FAILED: the wheel build wrote into the source tree (lines with > above)"
  exit 1
fi

WHEEL=$(ls "$TMP"/wheels/signlion-*.whl)
VERSION=$(sed -n 's/^project(signlion VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")
echo "wheel: $(basename "$WHEEL") (CMake project version $VERSION)"
case $(basename "$WHEEL") in
  signlion-"$VERSION"-*) ;;
  *) echo "FAILED: the wheel's version is not the CMake project version $VERSION"; exit 1 ;;
esac
"$PY" - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for want in ("signlion/libnccl-sign.so", "signlion/libnccl-net-signlion.so", "signlion/_version.py",
             "signlion/capi.py", "signlion/torch.py"):
    assert want in names, "%s not in the wheel: %s" % (want, names)
assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names), names
PY

"${PIP[@]}" install -q --no-index --no-deps "$WHEEL"
cd "$TMP"
cat > "$TMP/two_ranks.py" <<'PY'
import ctypes
import multiprocessing as mp
import os
import sys

import signlion
import signlion.capi as capi

# Votes of 2 ranks: every pair of {+, -, 0}; majority, a 0 votes +1 (zero rule
# "positive"), a tie gives 0 (tie rule "zero").
A = [1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 2.5, -0.5]
B = [1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 3.0, -7.0]


def vote(x):
    return 1 if x >= 0 else -1


def expected():
    s = [vote(a) + vote(b) for a, b in zip(A, B)]
    return [float((v > 0) - (v < 0)) for v in s]


def rank_main(rank, uid, out):
    comm = capi.Comm(2, uid, rank, zero_rule="positive", tie_rule="zero")
    src = (ctypes.c_float * len(A))(*(A if rank == 0 else B))
    dst = (ctypes.c_float * len(A))()
    comm.sign_all_reduce(ctypes.addressof(src), ctypes.addressof(dst), len(A), capi.FLOAT32, capi.MAJORITY)
    comm.destroy()
    out.put((rank, list(dst)))


def main(version):
    venv = os.path.dirname(os.path.dirname(sys.executable))
    assert signlion.__file__.startswith(venv), signlion.__file__
    assert signlion.library_path().startswith(os.path.dirname(signlion.__file__)), signlion.library_path()
    assert signlion.net_plugin_path() and os.path.exists(signlion.net_plugin_path())
    assert signlion.__version__ == version == signlion.version(), (signlion.__version__, signlion.version())
    print("signlion", signlion.__version__, "library", signlion.version(), "at", signlion.library_path())
    ctx = mp.get_context("spawn")  # fresh processes: each loads the library itself
    uid = capi.get_unique_id()
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, uid, out)) for r in range(2)]
    try:
        for p in procs:
            p.start()
        results = dict(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
            assert p.exitcode == 0, "a rank exited with %s" % p.exitcode
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    for r in range(2):
        assert results[r] == expected(), "rank %d: %s, expected %s" % (r, results[r], expected())
    print("2-rank sign all-reduce from the installed wheel:", results[0])


if __name__ == "__main__":
    main(sys.argv[1])
PY
env -u SIGNLION_LIBRARY SIGNLION_SOCKET_IFNAME=lo timeout 300 "$TMP/venv/bin/python" "$TMP/two_ranks.py" "$VERSION"
echo "wheel install test passed"
