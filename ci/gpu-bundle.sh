#!/usr/bin/env bash
# Builds every test binary of one backend (with the test kernels) and the
# pipeline example into dist/gpu-<backend>/, with a run.sh that runs them on
# a machine without cargo (and record-traces.sh, which records the traces
# of benches/data there):
#
#   bash ci/gpu-bundle.sh cuda        # -> dist/gpu-cuda/run.sh
#   (on the GPU machine) bash dist/gpu-cuda/run.sh
#
# run.sh prints passed / failed / skipped per binary and exits non-zero on
# any failure.
set -euo pipefail
backend=${1:-cuda}
features=${2:-$backend,kernels}
cd "$(dirname "$0")/.."
# shellcheck source=ci/setup.sh
source ci/setup.sh "$backend"

out="dist/gpu-$backend"
rm -rf "$out"
mkdir -p "$out/bin"

# Release profile keeps the binaries small enough to carry around.
cargo test --release --no-run --features "$features" --message-format=json >"$out/build.json"
python3 - "$out/bin" "$out/build.json" <<'PY'
import json, shutil, sys, os
dest = sys.argv[1]
seen = set()
for line in open(sys.argv[2]):
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
        continue
    if not msg.get("profile", {}).get("test"):
        continue
    kind = msg["target"]["kind"][0]
    name = msg["target"]["name"] if kind != "lib" else "unit"
    # trybuild needs cargo: compile-fail tests run in CI, not in the bundle.
    if name in seen or name == "compile_fail":
        continue
    seen.add(name)
    shutil.copy(msg["executable"], os.path.join(dest, name))
    print(f"bundled {name} ({kind})")
PY
rm -f "$out/build.json"
# The examples that run on a GPU: the main job and the benchmark, and
# with the cudarc feature the graph replay (its kernel is PTX loaded
# through cudarc) and the cudarc interop.
examples=(pipeline bench)
case ",$features," in *,cudarc,*) examples+=(graph cudarc) ;; esac
for ex in "${examples[@]}"; do
  cargo build --release --features "$features" --example "$ex"
  cp "${CARGO_TARGET_DIR:-target}/release/examples/$ex" "$out/bin/example-$ex"
done
# The trace tool (no backend), the traces the benchmark replays by default
# (found by the bench beside its binary, in ../traces), and the script that
# records new ones (ci/record-traces.sh).
cargo build --release -p somalloc-trace
cp "${CARGO_TARGET_DIR:-target}/release/somalloc-trace" "$out/bin/somalloc-trace"
mkdir -p "$out/traces"
cp benches/data/*.trace benches/data/*.csv "$out/traces/" 2>/dev/null || true
cp ci/record-traces.sh "$out/record-traces.sh"
strip "$out"/bin/* 2>/dev/null || true
# The probe ci/sanitize.sh runs before racecheck (plain CUDA, static runtime).
if [ "$backend" = cuda ]; then
  bash ci/build-racecheck-probe.sh "$out/tools/racecheck-probe"
fi

cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled test binaries; prints passed/failed/skipped per binary.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# The unit tests replay the recorded traces from here, wherever the bundle lies.
export SOMALLOC_TRACES="$here/traces"
threads=${TEST_THREADS:-4}
total_pass=0 total_fail=0 total_skip=0 bad=0
printf '%-16s %7s %7s %8s\n' binary passed failed skipped
for bin in "$here"/bin/*; do
  name=$(basename "$bin")
  case "$name" in example-* | somalloc-trace) continue ;; esac
  log=$(mktemp)
  "$bin" --test-threads="$threads" >"$log" 2>&1
  rc=$?
  pass=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
  fail=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  skip=$(grep -oE 'SKIP [A-Za-z0-9_:]+: ' "$log" | wc -l)
  if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
    bad=1
    echo "---- $name (exit $rc) ----"
    grep -vE '^test .* \.\.\. ok$' "$log" | tail -n 60
  fi
  grep -oE '(SKIP [A-Za-z0-9_:]+: .*|^[a-z_]+::[a-z_]+: .*)' "$log" || true
  printf '%-16s %7s %7s %8s\n' "$name" "$pass" "$fail" "$skip"
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_skip=$((total_skip + skip))
  rm -f "$log"
done
echo "gpu-suite: $((total_pass - total_skip)) passed, $total_fail failed, $total_skip skipped"
exit "$bad"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
