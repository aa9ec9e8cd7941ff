#!/usr/bin/env bash
# The GPU checks of the C ABI and the Python package, then (with --bench)
# the model benchmark. Built elsewhere, run on a machine with a GPU,
# PyTorch, torchvision, transformers and CuPy:
#
#   bash python/tests/gpu-bundle.sh DIR              # here: wheel, C program, scripts -> DIR
#   bash DIR/gpu-run.sh DIR OUT [--bench]            # there
#   bash DIR/gpu-run.sh DIR OUT --two-gpu            # there: only the two-GPU parts
#
# Prints each part's verdict line ("N passed, N failed") and a summary. The
# two-GPU parts (DDP over NCCL, NCCL's buffer registration; torchrun with two
# processes) run only where two GPUs are visible, and print one SKIP line
# otherwise, so a one-GPU run is the same as without them.
set -uo pipefail
dir=$(cd "$1" && pwd)
out=$2
bench=${3:-}
mkdir -p "$out" /tmp/somalloc-site
python3 -m zipfile -e "$dir"/somalloc_*.whl /tmp/somalloc-site
export PYTHONPATH=/tmp/somalloc-site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

# The C program loads the CUDA runtime by name; point it (and somalloc) at
# one when the loader's path has none (PyTorch's wheels bring their own).
if [ -z "${SOMALLOC_CUDART:-}" ] && ! ldconfig -p | grep -q 'libcudart.so.1[23]'; then
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
  found=$(find "$site/nvidia" /usr/local/cuda*/ -name 'libcudart.so.1[23]*' 2>/dev/null | sort | tail -n 1)
  [ -n "$found" ] && export SOMALLOC_CUDART=$found
fi
echo "SOMALLOC_CUDART=${SOMALLOC_CUDART:-<loader path>}"

status=0
part() {
  local name=$1
  shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}
# (A line from a process under torchrun may come with a "[rank0]:"-like prefix.)
verdicts() {
  echo "=== verdicts"
  grep -hE '^(\[[a-z]*[0-9]+\]: ?)?([0-9]+ passed, [0-9]+ failed|SKIP|nccl-reg )|^loss checks|^capi_cost' "$out"/*.log
}
# GPUs this run can use: nvidia-smi's count (quick, no PyTorch import on a
# one-GPU machine), then, where it says two or more, PyTorch's (which honours
# CUDA_VISIBLE_DEVICES).
gpu_count() {
  local n
  if command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ "${n:-0}" -ge 2 ] || { echo "${n:-0}"; return; }
  fi
  python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0
}
# Two GPUs (nvidia-h200-x2): DDP over NCCL under PyTorch's allocator and each
# way of plugging somalloc in, compared (ddp_gpu_check.py), then NCCL's
# buffer registration of somalloc's arena against ncclMemAlloc. NVLink
# multicast (NVLS) stays off in every process started here: NCCL_NVLS_ENABLE=0
# is exported, and each script sets it again before importing PyTorch.
two_gpu_parts() {
  local n
  n=$(gpu_count)
  if [ "$n" -lt 2 ]; then
    echo "SKIP two-GPU parts (ddp, nccl-reg): $n GPU visible, two needed" | tee "$out/two-gpu.log"
    return
  fi
  export NCCL_NVLS_ENABLE=0
  local trun=(timeout -k 30 900 python3 -m torch.distributed.run --standalone --nproc_per_node=2)
  rm -rf "$out/ddp" "$out/nccl-reg"
  local m
  for m in torch enable enable-avoid mempool enable-vmm; do
    part "ddp-$m" "${trun[@]}" "$dir/ddp_gpu.py" "$m" "$out/ddp"
  done
  part ddp-check python3 "$dir/ddp_gpu_check.py" "$out/ddp"
  part nccl-reg "${trun[@]}" "$dir/nccl_reg_gpu.py" "$out/nccl-reg"
}
if [ "$bench" = --two-gpu ]; then
  two_gpu_parts
  verdicts
  exit $status
fi
part capi "$dir/capi_program"
# The C program again, recording (SOMALLOC_CONF's trace key through its
# configuration): the trace must read back whole, with allocations in it.
rm -f "$out"/capi-*.trace
part capi-trace env CAPI_PROGRAM_TRACE="$out/capi-%p.trace" "$dir/capi_program"
part capi-trace-read bash -c 'f=$(ls "$1"/capi-*.trace) && "$2/somalloc-trace" summary "$f" | tee /dev/stderr | grep -q "events: allocate [1-9]" && ! "$2/somalloc-trace" summary "$f" | grep -q "no end record" && echo "1 passed, 0 failed"' _ "$out" "$dir"
part torch-cache python3 "$dir/torch_gpu.py"
part torch-pool python3 "$dir/torch_gpu.py" cache:off
# Out of memory through the compiled entry point (_torch_oom.cpp) rather than
# the built-in one the runs above take.
part torch-oom-compiled env SOMALLOC_TEST_RAISE_OOM=compiled python3 "$dir/torch_gpu.py" cache:off
# One region on somalloc through torch.cuda.MemPool, the rest on PyTorch's
# allocator; then the statistics under PyTorch's names and a trace in
# PyTorch's memory visualizer.
part torch-mempool python3 "$dir/mempool_gpu.py"
part torch-mempool-vmm python3 "$dir/mempool_gpu.py" pool:vmm
part torch-snapshot python3 "$dir/snapshot_gpu.py" "$out/snapshot"
part cupy python3 "$dir/cupy_gpu.py"
# The virtual-memory arena (pool:vmm): the C ABI's calls, with the cache tier
# in front of it and without; under PyTorch, its own checks and the ones above.
part capi-vmm env SOMALLOC_CONF=pool:vmm "$dir/vmm_program"
part capi-vmm-nocache env SOMALLOC_CONF=pool:vmm,cache:off "$dir/vmm_program"
part torch-vmm python3 "$dir/vmm_gpu.py" pool:vmm
part torch-vmm-nocache python3 "$dir/vmm_gpu.py" pool:vmm,cache:off
part torch-on-vmm python3 "$dir/torch_gpu.py" pool:vmm
# Planned placement: a run recorded, then one served from its plan.
rm -f "$out"/plan.trace*
part plan-record python3 "$dir/plan_gpu.py" record "$out/plan.trace"
part plan-serve python3 "$dir/plan_gpu.py" plan "$out/plan.trace"
# Planned in the run itself (plan:auto): its default (the streams sharing
# one arena, plan_share:10), an arena per stream, and sharing at no lag.
part plan-auto python3 "$dir/plan_gpu.py" auto "$out/plan.trace"
part plan-auto-apart python3 "$dir/plan_gpu.py" auto "$out/plan.trace" plan_share:off
part plan-auto-shared python3 "$dir/plan_gpu.py" auto "$out/plan.trace" plan_share:0
# The same, the two streams sharing one arena (bytes passing between them
# with events).
part plan-serve-shared python3 "$dir/plan_gpu.py" plan "$out/plan.trace" plan_share:0
# The same with plan_divert (deprecated and ignored: it must pass as without it).
part plan-serve-divert python3 "$dir/plan_gpu.py" plan "$out/plan.trace" plan_share:0 plan_divert:64MiB
# The same, every wait timed on the device.
part plan-serve-timed python3 "$dir/plan_gpu.py" plan "$out/plan.trace" plan_share:0 plan_time_waits:on
# Recorded with device times, the streams sharing bytes only where the
# recorded run's device had released them.
part plan-record-device python3 "$dir/plan_gpu.py" record "$out/plan-device.trace" trace_device:on
part plan-serve-device python3 "$dir/plan_gpu.py" plan "$out/plan-device.trace" plan_share:device
part plan-device-times bash -c '"$2/somalloc-trace" summary "$1" | tee /dev/stderr | grep -q "device times: [1-9]" && echo "1 passed, 0 failed"' _ "$out/plan-device.trace" "$dir"
two_gpu_parts
if [ "$bench" = --bench ]; then
  # The C ABI's cost per allocation and free, beside the runtime's own
  # calls: the pool, the cache tier, and a plan (recorded first).
  cost() {
    SOMALLOC_CONF=cache:off "$dir/capi_cost" 2000 &&
      SOMALLOC_CONF=cache:on "$dir/capi_cost" 2000 &&
      SOMALLOC_CONF="trace:$out/cost.trace" "$dir/capi_cost" 3 &&
      SOMALLOC_CONF="plan:$out/cost.trace" "$dir/capi_cost" 2000 &&
      SOMALLOC_CONF="trace:$out/cost-legacy.trace" "$dir/capi_cost" 3 legacy &&
      SOMALLOC_CONF="plan:$out/cost-legacy.trace" "$dir/capi_cost" 2000 legacy
  }
  part capi-cost cost
  part models python3 "$dir/models.py" --out "$out"
fi
verdicts
exit $status
