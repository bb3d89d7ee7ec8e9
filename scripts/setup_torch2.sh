#!/usr/bin/env bash
# Makes the virtual environment with a current PyTorch 2.x from the Python
# registry, beside Debian's PyTorch 1.13 (scripts/setup.sh), so that the tests
# of signlion.torch and of the training example run under both (torch2.* in
# CTest, tests/python_torch.cmake). Idempotent: when the environment already
# holds the pinned versions it changes nothing. The registry's Linux wheel is
# the CUDA build (about 5 GiB with its CUDA libraries, which also run on a
# machine without a GPU); the environment lives outside the clone, in
# ~/.cache/signlion, so one machine downloads it once.
#
#   bash scripts/setup_torch2.sh            # makes or checks the environment, prints its python
#   SIGNLION_TORCH2_VENV=DIR bash ...        # somewhere else
set -euo pipefail
VENV=${SIGNLION_TORCH2_VENV:-$HOME/.cache/signlion/torch2-venv}
BASE_PY=/usr/bin/python3  # Debian's, the interpreter the library's Python package is tested with
PACKAGES=(torch==2.15.0 numpy==2.4.6 lion-pytorch==0.2.5)

have() {  # every pinned version installed in the environment
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "${PACKAGES[@]}" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    if m.version(name).split("+")[0] != want:
        sys.exit(1)
PY
}

if have; then
  echo "setup_torch2: ${PACKAGES[*]} present in $VENV"
else
  echo "setup_torch2: installing ${PACKAGES[*]} into $VENV (downloads about 5 GiB once)"
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || "$BASE_PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
  have || { echo "setup_torch2: $VENV does not hold ${PACKAGES[*]} after the install" >&2; exit 1; }
fi
"$VENV/bin/python" -c 'import torch; print("setup_torch2: torch", torch.__version__, "at", torch.__file__)'
