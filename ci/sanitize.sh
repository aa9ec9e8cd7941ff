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
# sanitizer's own allocations would change what they test. initcheck leaves
# out `host` (it runs under the other three tools): initcheck does not see
# the CPU's writes into pinned memory from a host pool, so every copy out of
# a HostBuffer that the host filled reads to it as uninitialised memory. Instrumented
# kernels are slow, so the largest test buffer is 64 MiB instead of 1 GiB
# (SOMALLOC_TEST_MAX_BYTES) and the stress test is shorter
# (SOMALLOC_STRESS_OPS), and each graph of the capture tests is replayed 20
# times instead of 1000 (SOMALLOC_CAPTURE_REPLAYS); each binary gets
# SANITIZE_TIMEOUT seconds.
#
# Host threads and racecheck: some racecheck versions do not finish a program
# whose host threads use the GPU at the same time (compute-sanitizer
# 2025.3.1 with driver 580 hangs on ci/racecheck-probe.cu, plain CUDA with 8
# threads, which finishes in a second under the other three tools). So
# before the racecheck pass this script runs that probe under racecheck. If
# the probe finishes, racecheck runs exactly what the other tools run. If it
# does not, racecheck runs the tests one at a time, leaves out the tests that
# drive the GPU from several threads at once (CONCURRENT_TESTS) and runs the
# stress test with one thread (still three streams, still cross-stream use);
# the summary line says so and counts what was left out. Those tests still
# run under memcheck, synccheck and initcheck with 8 threads. racecheck looks
# for shared-memory hazards inside kernels, and the kernels these tests
# launch are the ones the single-threaded tests launch.
set -uo pipefail
bundle=${1:-dist/gpu-cuda}
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$cs" ]; then
  echo "sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2
  exit 2
fi
logs=${SANITIZE_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
bins=()
# (Not test binaries: the examples and the trace tool.)
for b in "$bundle"/bin/*; do
  case "$(basename "$b")" in example-* | somalloc-trace | oom | unit | environment | compile_fail | bench) continue ;; esac
  bins+=("$b")
done
declare -A flags=(
  [memcheck]="--tool memcheck --leak-check full"
  [racecheck]="--tool racecheck"
  [synccheck]="--tool synccheck"
  [initcheck]="--tool initcheck"
)
# Tests that drive the GPU from several host threads at the same time
# (a name here matches every test whose name contains it).
CONCURRENT_TESTS=${CONCURRENT_TESTS:-eight_threads_with_own_streams_never_overlap}
export SOMALLOC_TEST_MAX_BYTES=${SOMALLOC_TEST_MAX_BYTES:-67108864}
export SOMALLOC_STRESS_OPS=${SOMALLOC_STRESS_OPS:-500}
export SOMALLOC_CAPTURE_REPLAYS=${SOMALLOC_CAPTURE_REPLAYS:-20}
stress_threads=${SOMALLOC_STRESS_THREADS:-8}
per_binary=${SANITIZE_TIMEOUT:-240}
test_threads=${SANITIZE_TEST_THREADS:-4}
tools=${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
"$cs" --version | tail -n 1

# racecheck_serial=1 when racecheck cannot run concurrent host threads.
racecheck_serial=0 probe_note=""
if [[ " $tools " == *" racecheck "* ]]; then
  probe="$bundle/tools/racecheck-probe"
  if [ ! -x "$probe" ]; then
    racecheck_serial=1 probe_note="no $probe to ask, so host threads were serialised"
  else
    probe_timeout=${PROBE_TIMEOUT:-60}
    t0=$SECONDS
    timeout "$probe_timeout" "$cs" --tool racecheck --error-exitcode 99 "$probe" 1 200 >"$logs/probe-1.log" 2>&1
    rc1=$?
    if [ "$rc1" -ne 0 ]; then
      echo "sanitize: racecheck fails the probe with one host thread (exit $rc1):"
      tail -n 20 "$logs/probe-1.log"
      exit 1
    fi
    t1=$SECONDS
    timeout "$probe_timeout" "$cs" --tool racecheck --error-exitcode 99 "$probe" 8 200 >"$logs/probe-8.log" 2>&1
    rc8=$?
    if [ "$rc8" -eq 0 ]; then
      probe_note="probe with 8 host threads finished in $((SECONDS - t1)) s"
    elif [ "$rc8" -eq 124 ]; then
      racecheck_serial=1
      probe_note="probe: 1 host thread finished in $((t1 - t0)) s, 8 host threads did not finish in $probe_timeout s"
    else
      echo "sanitize: racecheck probe with 8 host threads exited $rc8:"
      tail -n 20 "$logs/probe-8.log"
      exit 1
    fi
  fi
  echo "sanitize: racecheck: $probe_note" >&2
fi

bad=0
for tool in $tools; do
  errors=0 runs=0 failed=0 passed=0 skipped=0 left_out=0 t0=$SECONDS
  for b in "${bins[@]}"; do
    name=$(basename "$b")
    log="$logs/$tool-$name.log"
    threads=$test_threads st=$stress_threads extra=()
    if [ "$tool" = initcheck ] && [ "$name" = host ]; then
      echo "sanitize: initcheck host: left out (host writes into pinned pool memory are invisible to it)" >&2
      continue
    fi
    if [ "$tool" = racecheck ] && [ "$racecheck_serial" -eq 1 ]; then
      threads=1 st=1
      for t in $CONCURRENT_TESTS; do
        extra+=(--skip "$t")
        left_out=$((left_out + $("$b" --list 2>/dev/null | grep -c -- "$t.*: test$")))
      done
    fi
    t1=$SECONDS
    # shellcheck disable=SC2086
    SOMALLOC_STRESS_THREADS=$st timeout "$per_binary" "$cs" ${flags[$tool]} --report-api-errors no \
      --error-exitcode 99 --target-processes all "$b" --test-threads="$threads" "${extra[@]}" >"$log" 2>&1
    rc=$?
    echo "sanitize: $tool $name: exit $rc, $((SECONDS - t1)) s" >&2
    runs=$((runs + 1))
    n=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | awk '{s+=$3} END {print s+0}')
    h=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' "$log" | awk '{s+=$3} END {print s+0}')
    n=$((n + h))
    errors=$((errors + n))
    # A run only counts if the tests really ran on the GPU under the tool.
    p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
    k=$(grep -oE 'SKIP [A-Za-z0-9_:]+: ' "$log" | wc -l)
    nogpu=$(grep -oE 'SKIP [A-Za-z0-9_:]+: no GPU' "$log" | wc -l)
    passed=$((passed + p - k)) skipped=$((skipped + k))
    echo "sanitize: $tool $name: $((p - k)) tests ran, $k skipped, $n errors" >&2
    [ "$nogpu" -eq 0 ] || { echo "---- $tool $name: $nogpu tests skipped for lack of a GPU ----"; rc=98; }
    if [ "$rc" -ne 0 ]; then
      failed=$((failed + 1))
      echo "---- $tool $name (exit $rc) ----"
      grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|=========|panicked|FAILED|running for over' "$log" | head -n 30
    fi
  done
  note=""
  if [ "$tool" = racecheck ] && [ "$racecheck_serial" -eq 1 ]; then
    note="; one test at a time, $left_out tests with concurrent host threads left to the other tools, stress with 1 thread ($probe_note)"
  fi
  echo "sanitize: $tool: $runs binaries, $passed tests ran on the GPU, $skipped skipped, $errors errors, $failed failed runs ($((SECONDS - t0)) s)$note"
  [ "$errors" -eq 0 ] && [ "$failed" -eq 0 ] || bad=1
done
exit "$bad"
