#!/usr/bin/env bash
# The real-models benchmark's table and plot, no GPU needed: every recorded
# run in benches/data (models-*.json) is read back by `benches/models.py
# --from`, which must print a row and pass the loss check for each of its
# modes, keep the figures as recorded (a file that keeps several runs of a
# mode as rows gets their median time and largest peak, as --repeat does),
# and write a plot that is well-formed SVG. A file that cannot be read must
# be refused. The CPU list of --cpus and the clock reader are checked too.
#
#   bash ci/models-table-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${CARGO_TARGET_DIR:-target}/models-table-check
rm -rf "$out"
mkdir -p "$out"
n=0
for f in benches/data/models-*.json; do
  name=$(basename "$f" .json)
  python3 benches/models.py --from "$f" --out "$out/$name" > "$out/$name.log"
  python3 - "$f" "$out/$name" <<'PY'
import json, statistics, sys, xml.etree.ElementTree as ET
src, out = sys.argv[1], sys.argv[2]
groups = {}
for r in json.load(open(src))["rows"]:
    groups.setdefault((r["workload"], r["mode"]), []).append(r)
log = open(out + ".log").read().splitlines()
again = json.load(open(out + "/models.json"))
assert again["from"] == [src], again.get("from")
assert [(r["workload"], r["mode"]) for r in again["rows"]] == list(groups), (src, "rows")
for r in again["rows"]:
    rs = groups[(r["workload"], r["mode"])]
    # One row as recorded; several as the runs of one row.
    assert r["ms_per_step"] == statistics.median(x["ms_per_step"] for x in rs), (src, r["mode"])
    assert r["peak_mib"] == max(x["peak_mib"] for x in rs), (src, r["mode"])
    assert r["losses"] == rs[0]["losses"], (src, r["mode"])
    line = [l for l in log if l.startswith("| %s | %s | " % (r["workload"], r["mode"]))]
    assert len(line) == 1, (src, r["workload"], r["mode"], line)
    cells = [c.strip() for c in line[0].strip("|").split("|")]
    assert float(cells[2]) == round(r["ms_per_step"], 2), (src, cells)
    assert float(cells[4]) <= float(cells[2]), ("fastest step above the median", src, cells)
    if r["mode"] == "caching":
        assert cells[3] == "1.000", (src, cells)
    assert cells[7] == "ok", (src, cells)
assert ("loss checks: %d passed, 0 failed" % len(groups)) in log, (src, log[-1])
root = ET.parse(out + "/models.svg").getroot()
assert root.tag.endswith("svg") and len(root) > 10, src
PY
  n=$((n + 1))
done
if python3 benches/models.py --from "$out/missing.json" --out "$out/missing" > /dev/null 2>&1; then
  echo "models-table-check: a missing file was not refused" >&2
  exit 1
fi
# --cpus: a CPU list is read as such, a bad one is refused before anything
# runs, and without NVML (no driver) the clock reads None instead of failing.
python3 - <<'PY'
import importlib.util, types
spec = importlib.util.spec_from_file_location("models", "benches/models.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
assert m.parse_cpus("0,2,4-7") == {0, 2, 4, 5, 6, 7}
assert m.parse_cpus("3") == {3}
for bad in ("", "a", "1-", "5-2", "1,,2"):
    try:
        m.parse_cpus(bad)
    except ValueError:
        continue
    raise AssertionError("accepted %r" % bad)
import models_child  # beside models.py, which put its folder on the path
c = models_child.Clocks(types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0, pci_device_id=0))
if c.lib is None:
    assert c.sm_mhz() is None and c.reasons() is None
assert m.clock({"step_sm_mhz": [0] * 5 + [1980, 1755, None]}) == "  SM 1755-1980 MHz"
assert m.clock({"step_ms": [1.0]}) == ""
# The arena's virtual-memory calls once warm: a step after step 3, or per
# 100 allocations over the second half of the requests.
arena = {"somalloc": {"arena_enabled": 1}}
assert m.vm_calls(dict(arena, workload="gpt2", step_arena_vmm_calls=[10, 20, 30, 30, 36])) == "  VM calls 3.0 a step after step 3"
assert m.vm_calls(dict(arena, workload="infer", step_arena_vmm_calls=[5, 9, 9, 10], step_allocations=[100, 200, 300, 400])) == "  VM calls 0.50 per 100 allocations in the second half"
assert m.vm_calls({"workload": "gpt2", "step_arena_vmm_calls": [1, 2, 3, 4]}) == ""
PY
if err=$(python3 benches/models.py --cpus 5-2 --out "$out/cpus" 2>&1); then
  echo "models-table-check: --cpus 5-2 was not refused" >&2
  exit 1
fi
case "$err" in
  *"--cpus 5-2: a range that runs backwards"*) ;;
  *) echo "models-table-check: --cpus 5-2 refused without saying why: $err" >&2; exit 1 ;;
esac
echo "models-table-check: $n recorded runs read back"
