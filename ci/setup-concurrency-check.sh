#!/usr/bin/env bash
# Checks that two `source ci/setup.sh cuda` started at the same time on a
# fresh tools directory both succeed and export the same SOMALLOC_NVCC (one
# installs, the other waits for it), that the set-up leaves no descriptor of
# its lock open in the shell that sourced it, and that a failed install
# returns non-zero without ending that shell. No network, a few seconds:
# `python3` and `pip` are fakes on PATH, and the fake pip refuses to run
# while another pip installs into the same venv (as two real ones corrupt
# it), after creating the venv's `nvidia/cu13/bin/nvcc` a second later.
#
#   bash ci/setup-concurrency-check.sh [SETUP_SCRIPT]   # default ci/setup.sh
set -uo pipefail
cd "$(dirname "$0")/.."
setup=$(realpath "${1:-ci/setup.sh}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fake="$work/bin"
mkdir -p "$fake"

# python3 -m venv DIR: the venv's bin/pip, written anew as ensurepip does
# (absent for a moment).
cat >"$fake/python3" <<'EOF'
#!/usr/bin/env bash
set -eu
[ "${1:-}" = -m ] && [ "${2:-}" = venv ] && [ -n "${3:-}" ] || {
  echo "fake python3: only '-m venv DIR'" >&2
  exit 2
}
mkdir -p "$3/bin"
rm -f "$3/bin/pip"
sleep 0.1
cp "$(dirname "$0")/pip" "$3/bin/pip"
EOF

# DIR/bin/pip install ...: one install at a time per venv, counted.
cat >"$fake/pip" <<'EOF'
#!/usr/bin/env bash
set -eu
venv=$(cd "$(dirname "$0")/.." && pwd)
[ -z "${FAKE_PIP_FAIL:-}" ] || { echo "fake pip: no network" >&2; exit 1; }
mkdir "$venv/.installing" 2>/dev/null || {
  echo "fake pip: another pip is installing into $venv" >&2
  exit 1
}
echo install >>"$venv/../pip-runs"
sleep 1
mkdir -p "$venv/lib/python3.12/site-packages/nvidia/cu13/bin"
printf '#!/bin/sh\necho fake nvcc\n' >"$venv/lib/python3.12/site-packages/nvidia/cu13/bin/nvcc"
chmod +x "$venv/lib/python3.12/site-packages/nvidia/cu13/bin/nvcc"
rmdir "$venv/.installing"
EOF
chmod +x "$fake/python3" "$fake/pip"

failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

# One set-up in a shell of its own (`set -euo pipefail`, as the CI scripts
# have): prints SOMALLOC_NVCC, then the descriptors left on the lock files.
run_setup() {
  PATH="$fake:$PATH" SOMALLOC_TOOLS="$1" SETUP="$setup" bash -c '
    set -euo pipefail
    source "$SETUP" cuda
    echo "nvcc=$SOMALLOC_NVCC"
    for fd in /proc/$$/fd/*; do
      case "$(readlink "$fd")" in *.lock) echo "open lock descriptor: $fd";; esac
    done'
}

# Two set-ups at once on a fresh tools directory.
tools="$work/tools"
run_setup "$tools" >"$work/a.out" 2>"$work/a.err" &
a=$!
run_setup "$tools" >"$work/b.out" 2>"$work/b.err" &
b=$!
wait "$a"
rc_a=$?
wait "$b"
rc_b=$?
for x in a b; do
  echo "--- set-up $x: stdout"
  cat "$work/$x.out"
  echo "--- set-up $x: stderr"
  cat "$work/$x.err"
done
[ "$rc_a" -eq 0 ] || fail "set-up a returned $rc_a"
[ "$rc_b" -eq 0 ] || fail "set-up b returned $rc_b"
nvcc_a=$(sed -n 's/^nvcc=//p' "$work/a.out")
nvcc_b=$(sed -n 's/^nvcc=//p' "$work/b.out")
[ -n "$nvcc_a" ] && [ -x "$nvcc_a" ] || fail "set-up a exported no nvcc ('$nvcc_a')"
[ "$nvcc_a" = "$nvcc_b" ] || fail "the set-ups exported different nvcc: '$nvcc_a' and '$nvcc_b'"
runs=$(cat "$tools/pip-runs" 2>/dev/null | wc -l)
[ "$runs" -eq 1 ] || fail "pip installed $runs times, not once"
if grep -h "open lock descriptor" "$work/a.out" "$work/b.out"; then
  fail "a lock descriptor stayed open in the sourcing shell"
fi

# A set-up on the installed tools: no install, the same nvcc.
out=$(run_setup "$tools" 2>&1) || fail "a set-up on installed tools failed: $out"
[ "$(sed -n 's/^nvcc=//p' <<<"$out")" = "$nvcc_a" ] || fail "a later set-up exported another nvcc: $out"

# A failed install returns non-zero; the sourcing shell goes on.
out=$(PATH="$fake:$PATH" FAKE_PIP_FAIL=1 SOMALLOC_TOOLS="$work/tools-failing" SETUP="$setup" bash -c '
  source "$SETUP" cuda && echo "unexpectedly succeeded"
  echo "still here"' 2>&1)
grep -q "still here" <<<"$out" || fail "a failed set-up ended the shell that sourced it: $out"
if grep -q "unexpectedly succeeded" <<<"$out"; then
  fail "a failed install was reported as a success: $out"
fi

if [ "$failed" -ne 0 ]; then
  echo "setup-concurrency-check: FAILED ($setup)"
  exit 1
fi
echo "setup-concurrency-check: ok ($setup): both set-ups exported $nvcc_a, pip ran once"
