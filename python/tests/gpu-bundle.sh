#!/usr/bin/env bash
# Builds what python/tests/gpu-run.sh needs into DIR: the wheel (CPython
# >= 3.8, abi3), libsomalloc.so and the C programs and the C ABI's cost
# benchmark linked against it (found beside it), the PyTorch and CuPy test
# scripts (the two-GPU ones too), and the model benchmark.
#
#   bash python/tests/gpu-bundle.sh DIR [cuda|rocm]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$1
vendor=${2:-cuda}
mkdir -p "$dir"
rm -f "$dir"/somalloc_*.whl
bash python/build-wheel.sh "$vendor" "$dir" --release --quiet
cargo build --release --quiet -p somalloc-capi --features "$vendor"
target=${CARGO_TARGET_DIR:-target}/release
cp "$target/libsomalloc.so" "$dir/"
strip "$dir/libsomalloc.so"
cc -std=c11 -O1 -Wall -Wextra -Werror -Icapi/include -Icapi/tests/c capi/tests/c/capi_program.c -o "$dir/capi_program" \
  -L"$dir" -lsomalloc -Wl,-rpath,'$ORIGIN' -ldl -lpthread
cc -std=c11 -O1 -Wall -Wextra -Werror -Icapi/include -Icapi/tests/c capi/tests/c/vmm_program.c -o "$dir/vmm_program" \
  -L"$dir" -lsomalloc -Wl,-rpath,'$ORIGIN' -ldl
cc -std=c11 -O2 -Wall -Wextra -Werror -Icapi/include -Icapi/tests/c benches/capi_cost.c -o "$dir/capi_cost" \
  -L"$dir" -lsomalloc -Wl,-rpath,'$ORIGIN' -ldl
cp python/tests/torch_gpu.py python/tests/cupy_gpu.py python/tests/plan_gpu.py python/tests/vmm_gpu.py python/tests/mempool_gpu.py python/tests/snapshot_gpu.py python/tests/gpu-run.sh benches/models.py benches/models_child.py "$dir/"
# The two-GPU scripts (gpu-run.sh runs them where two GPUs are visible).
cp python/tests/ddp_gpu.py python/tests/ddp_gpu_check.py python/tests/nccl_reg_gpu.py "$dir/"
# The trace tool, to read the C program's recorded trace back.
cargo build --release --quiet -p somalloc-trace
cp "$target/somalloc-trace" "$dir/"
ls -la "$dir"
