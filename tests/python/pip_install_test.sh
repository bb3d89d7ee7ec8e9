#!/usr/bin/env bash
# `pip install ./python` as docs/LION.md says: a venv that sees Debian's
# python3-torch (--system-site-packages), no build isolation, no index (no
# network). Installs a copy (the source tree stays clean), then imports the
# package from elsewhere with SIGNLION_LIBRARY pointing at the built library.
#   pip_install_test.sh PYTHON SOURCE_DIR LIBRARY
set -euo pipefail
PY=$1 SRC=$2 LIB=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$SRC/python" "$TMP/src"
"$PY" -m venv --system-site-packages "$TMP/venv"
"$TMP/venv/bin/pip" install -q --no-build-isolation --no-index "$TMP/src"
cd "$TMP"
SIGNLION_LIBRARY=$LIB "$TMP/venv/bin/python" - <<'PY'
import signlion, signlion.capi
assert "/venv/" in signlion.__file__, signlion.__file__
print("signlion", signlion.__version__, "library version", signlion.version(), "at", signlion.library_path())
try:
    import torch  # noqa: F401
except ImportError:
    print("torch not importable: signlion.torch not checked")
else:
    import signlion.torch
    p = torch.nn.Parameter(torch.ones(4))
    opt = signlion.torch.DistributedLion([p], lr=0.5, aggregation="local")
    p.grad = torch.tensor([1.0, -1.0, 0.0, 2.0])
    opt.step()
    assert p.tolist() == [0.5, 1.5, 1.0, 0.5], p.tolist()
    print("signlion.torch: a local step OK")
PY
