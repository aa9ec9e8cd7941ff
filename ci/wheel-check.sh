#!/usr/bin/env bash
# Builds the Python wheel of one vendor (a debug build: cheap) and imports it
# in a fresh virtual environment, on a machine without a GPU: the package
# must import, say which vendor it is for, refuse a bad configuration, and
# report the missing GPU as somalloc.SomallocError with the library's text.
#
#   bash ci/wheel-check.sh [cuda|rocm]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
vendor=${1:-cuda}
maturin_version=1.16.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "maturin==$maturin_version"
MATURIN="$work/venv/bin/maturin" bash python/build-wheel.sh "$vendor" "$work/dist" --quiet
ls "$work/dist"
"$work/venv/bin/python" -m pip install --quiet --no-index "$work"/dist/somalloc_"$vendor"-*.whl
cd "$work"
SOMALLOC_CUDART=/nonexistent/libcudart.so.13 SOMALLOC_AMDHIP=/nonexistent/libamdhip64.so \
  "$work/venv/bin/python" - "$vendor" <<'PY'
import os
import sys

import somalloc
import somalloc.cupy
import somalloc.torch

vendor = sys.argv[1]
checks = []


def check(name, ok, detail=""):
    checks.append(ok)
    print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail))


check("the wheel is for its vendor", somalloc.backend() == vendor, somalloc.backend())
check("the extension exports the C entry points", os.path.exists(somalloc.library_path()))
import ctypes

lib = ctypes.CDLL(somalloc.library_path())
check("PyTorch's entry points are in it", bool(lib.somalloc_torch_alloc) and bool(lib.somalloc_torch_free))
try:
    somalloc.configure("bogus:1")
    check("a bad configuration is refused", False)
except somalloc.SomallocError as e:
    check("a bad configuration is refused", e.args[1] == "Config" and "bogus" in e.args[0], e.args[0][:60])
somalloc.configure("cache:off")
ok, why = somalloc.available()
check("no GPU here, and it says why", not ok and "could not be loaded" in why, why[:60])
try:
    somalloc.stats(0)
    check("stats without a GPU is an error", False)
except somalloc.SomallocError as e:
    check("stats without a GPU is an error", e.args[1] == "RuntimeNotFound", e.args[1])
somalloc.configure("cache:on")
check("the configuration stays free while no device was used", True)
print("%d passed, %d failed" % (sum(checks), len(checks) - sum(checks)))
sys.exit(0 if all(checks) else 1)
PY
# How the package builds its raising entry points for PyTorch (no PyTorch
# needed: a stand-in with the two headers' worth it uses).
"$work/venv/bin/python" "$repo/python/tests/oom_shim_check.py" "$work"
# The PyTorch-shaped API without PyTorch or a GPU (statistics' names, the
# shared allocator object, the up-front refusal), and traces converted to
# PyTorch's memory snapshot.
"$work/venv/bin/python" "$repo/python/tests/torch_api_check.py"
"$work/venv/bin/python" "$repo/python/tests/snapshot_check.py" "$repo/benches/data"
