#!/usr/bin/env bash
# The README's Python install, as a user runs it, offline: a venv over Debian's python3 (numpy, setuptools
# and pybind11 from tools/deps.sh), `pip install --no-build-isolation .` (setup.py builds api/python with
# CMake; CPU only, which is what CI can run), then `import edgevit` classifies the digits 3 and 7 from a
# directory outside the checkout. Called by tools/test.sh after the packages; by hand: tools/pip_install_test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m venv --system-site-packages "$work/venv"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 EDGEVIT_CMAKE_ARGS="-DEDGEVIT_CUDA=OFF" \
  "$work/venv/bin/pip" install -q --no-build-isolation . >"$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; exit 1; }
repo=$PWD
out=$(cd "$work" && "$work/venv/bin/python" - "$repo" <<'PYEOF'
import sys
import edgevit
repo = sys.argv[1]
e = edgevit.Engine(f"{repo}/config/models/vit-digits.yaml", device="host-cpu")
for d in (3, 7):
    top = int(e.run_image(f"{repo}/tests/data/digits/digit-{d}.png")["logits"].argmax())
    print(f"digit-{d}.png -> {top}")
    assert top == d, f"digit-{d}.png classified as {top}"
print("module:", edgevit.__file__)
PYEOF
)
echo "$out"
grep -q "$work/venv" <<<"$out" || { echo "pip_install_test: the module did not come from the venv" >&2; exit 1; }
echo "pip_install_test: ok"
