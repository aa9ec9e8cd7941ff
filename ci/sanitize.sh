#!/usr/bin/env bash
# Runs compute-sanitizer's four tools over the test binaries of a GPU bundle
# (see ci/gpu-bundle.sh) on an NVIDIA machine, and prints one summary line
# per tool:
#
#   bash ci/sanitize.sh dist/gpu-cuda        # on the GPU machine
#
# memcheck runs with --leak-check full; every tool with --error-exitcode, so
# an error fails the run. API errors are not reported: the suite provokes
# them on purpose (out-of-memory and bad-input tests) and checks each one.
# Binaries that exhaust the device on purpose (oom) are left out: the
# sanitizer's own allocations would change what they test. Instrumented
# kernels are slow, so the largest test buffer is 64 MiB instead of 1 GiB
# (SOMALLOC_TEST_MAX_BYTES) and the stress test is shorter
# (SOMALLOC_STRESS_OPS, SOMALLOC_STRESS_THREADS); each binary gets
# SANITIZE_TIMEOUT seconds.
set -uo pipefail
bundle=${1:-dist/gpu-cuda}
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$cs" ]; then
  echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
  exit 2
fi
logs=${SANITIZE_LOGS:-$(mktemp -d)}
bins=()
for b in "$bundle"/bin/*; do
  case "$(basename "$b")" in example-* | oom | unit | environment | compile_fail) continue ;; esac
  bins+=("$b")
done
declare -A flags=(
  [memcheck]="--tool memcheck --leak-check full"
  [racecheck]="--tool racecheck"
  [synccheck]="--tool synccheck"
  [initcheck]="--tool initcheck"
)
export SOMALLOC_TEST_MAX_BYTES=${SOMALLOC_TEST_MAX_BYTES:-67108864}
export SOMALLOC_STRESS_OPS=${SOMALLOC_STRESS_OPS:-500}
export SOMALLOC_STRESS_THREADS=${SOMALLOC_STRESS_THREADS:-2}
per_binary=${SANITIZE_TIMEOUT:-240}
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
bad=0
for tool in $tools; do
  errors=0 runs=0 failed=0 passed=0 skipped=0 t0=$SECONDS
  for b in "${bins[@]}"; do
    name=$(basename "$b")
    log="$logs/$tool-$name.log"
    t1=$SECONDS
    # shellcheck disable=SC2086
    timeout "$per_binary" "$cs" ${flags[$tool]} --report-api-errors no --error-exitcode 99 \
      --target-processes all "$b" --test-threads=${SANITIZE_TEST_THREADS:-4} >"$log" 2>&1
    rc=$?
    echo "sanitize: $tool $name: exit $rc, $((SECONDS - t1)) s" >&2
    runs=$((runs + 1))
    n=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | awk '{s+=$3} END {print s+0}')
    errors=$((errors + n))
    # A run only counts if the tests really ran on the GPU under the tool.
    p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
    k=$(grep -oE 'SKIP [A-Za-z0-9_:]+: no GPU' "$log" | wc -l)
    passed=$((passed + p - k)) skipped=$((skipped + k))
    echo "sanitize: $tool $name: $((p - k)) tests ran, $k skipped, $n errors" >&2
    [ "$k" -eq 0 ] || { echo "---- $tool $name: $k tests skipped for lack of a GPU ----"; rc=98; }
    if [ "$rc" -ne 0 ]; then
      failed=$((failed + 1))
      echo "---- $tool $name (exit $rc) ----"
      grep -E 'ERROR SUMMARY|=========|panicked|FAILED' "$log" | head -n 30
    fi
  done
  echo "sanitize: $tool: $runs binaries, $passed tests ran on the GPU, $skipped skipped, $errors errors, $failed failed runs ($((SECONDS - t0)) s)"
  [ "$errors" -eq 0 ] && [ "$failed" -eq 0 ] || bad=1
done
exit "$bad"
