#!/usr/bin/env bash
# Records the traces that benches/data ships, on a machine with a GPU, from
# the GPU bundle (ci/gpu-bundle.sh copies this script into it):
#
#   bash dist/gpu-cuda/record-traces.sh OUT [PYDIR]
#
#   pipeline.trace  the seeds' pipeline (examples/pipeline.rs --record)
#   stress.trace    the stress test, 8 threads x 3 streams, 2000 operations
#                   per thread (SOMALLOC_STRESS_TRACE)
#   gpt2.trace      3 GPT-2 training steps through the C ABI
#   mix.trace       3 steps of GPT-2 and ResNet-50 together, each on a
#                   stream of its own, through the C ABI
#   resnet50.trace  3 ResNet-50 training steps through the C ABI
#
# The last three need PYDIR, the folder python/tests/gpu-bundle.sh made (the
# wheel and benches/models.py), and PyTorch, torchvision and transformers;
# without them they are skipped. Each trace is summarised with
# somalloc-trace into OUT/NAME.txt. Copy OUT/*.trace into benches/data/
# (each should stay well under 1 MiB).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: record-traces.sh OUT [PYDIR]}
pydir=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
status=0

step() {
  local name=$1
  shift
  echo "=== $name: $*"
  if ! "$@"; then
    echo "=== $name: FAILED"
    status=1
  fi
}

step pipeline "$here/bin/example-pipeline" --record "$out/pipeline.trace"
step stress env SOMALLOC_STRESS_THREADS=8 SOMALLOC_STRESS_OPS=2000 \
  SOMALLOC_STRESS_TRACE="$out/stress.trace" "$here/bin/stress" --test-threads=1

if [ -n "$pydir" ] && python3 -c 'import torch, torchvision, transformers' 2>/dev/null; then
  pydir=$(cd "$pydir" && pwd)
  mkdir -p /tmp/somalloc-site
  python3 -m zipfile -e "$pydir"/somalloc_*.whl /tmp/somalloc-site
  export PYTHONPATH=/tmp/somalloc-site${PYTHONPATH:+:$PYTHONPATH}
  for w in gpt2:gpt2 both:mix resnet50:resnet50; do
    workload=${w%%:*} name=${w##*:}
    rm -rf "$out/models-$name"
    step "$name" python3 "$pydir/models.py" --workloads "$workload" --modes somalloc-cache --steps 3 \
      --out "$out/models-$name" --somalloc-conf "trace:$out/$name-%p.trace"
    # One process recorded: name its trace without the pid.
    for f in "$out/$name"-*.trace; do
      [ -f "$f" ] && mv "$f" "$out/$name.trace"
    done
  done
else
  echo "=== gpt2, mix, resnet50: skipped (no PYDIR, or no PyTorch, torchvision and transformers)"
fi

echo "=== traces"
for f in "$out"/*.trace; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .trace)
  "$here/bin/somalloc-trace" summary "$f" >"$out/$name.txt" 2>&1 || status=1
  printf '%-16s %8d bytes  %s\n' "$name.trace" "$(stat -c %s "$f")" "$(head -n 1 "$out/$name.txt")"
done
exit $status
