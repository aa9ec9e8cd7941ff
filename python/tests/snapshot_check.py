"""Checks, without a GPU and without PyTorch, the conversion of somalloc
traces into PyTorch's memory-snapshot format (somalloc.snapshot, which
somalloc.torch.trace_to_snapshot is): the recorded traces of DATA_DIR
(benches/data/*.trace) and a small trace written here with every kind of
record.

For each: the snapshot's keys and actions are PyTorch's; in each device's
trace every allocation lies in a segment that appeared before it and
overlaps no live allocation, every free follows an allocation of the same
address and size and is free_requested followed at once by free_completed,
times never go back; the segments at the end are tiled exactly by their
blocks, whose active ones are the allocations live at the end; the pickle
is protocol 4 and reads back equal. With the trace tool (SOMALLOC_TRACE, or
target/release/somalloc-trace), the counts of allocations and frees are the
tool's.

    python3 python/tests/snapshot_check.py benches/data
"""

import glob
import os
import pickle
import re
import subprocess
import sys
import tempfile

try:
    import somalloc.snapshot as snapshot
except ImportError:  # from the source tree, without the wheel
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("snapshot", os.path.join(here, "..", "somalloc", "snapshot.py"))
    snapshot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snapshot)

checks = []


def check(name, ok, detail=""):
    checks.append(bool(ok))
    print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail), flush=True)


ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"}
ENTRY_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
OOM_KEYS = {"action", "device_free", "size", "stream", "time_us", "frames"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}


def problems(snap, allow_early_frees=False):
    """What is wrong with a snapshot, as a list of strings (empty: nothing)."""
    bad = []
    if not {"segments", "device_traces"} <= set(snap):
        return ["top-level keys %s" % sorted(snap)]
    final_live = {}
    for dev, entries in enumerate(snap["device_traces"]):
        segs = []  # (start, end) opened in this trace so far
        known = [(s["address"], s["address"] + s["total_size"]) for s in snap["segments"] if s["device"] == dev]
        opened_in_trace = {(e["addr"], e["addr"] + e["size"]) for e in entries if e["action"] == "segment_alloc"}
        segs = [k for k in known if k not in opened_in_trace]  # there from the start
        live = {}
        last_t = None
        for i, e in enumerate(entries):
            a = e.get("action")
            if a not in ACTIONS:
                bad.append("device %d entry %d: action %r" % (dev, i, a))
                continue
            keys = OOM_KEYS if a == "oom" else ENTRY_KEYS
            if set(e) != keys:
                bad.append("device %d entry %d (%s): keys %s" % (dev, i, a, sorted(e)))
                continue
            if last_t is not None and e["time_us"] < last_t:
                bad.append("device %d entry %d: time goes back" % (dev, i))
            last_t = e["time_us"]
            if a == "segment_alloc":
                if (e["addr"], e["addr"] + e["size"]) not in known:
                    bad.append("device %d entry %d: a segment not in the final list" % (dev, i))
                segs.append((e["addr"], e["addr"] + e["size"]))
            elif a == "alloc":
                lo, hi = e["addr"], e["addr"] + e["size"]
                if not any(s <= lo and hi <= t for s, t in segs):
                    bad.append("device %d entry %d: alloc %#x+%d in no open segment" % (dev, i, lo, e["size"]))
                for b, n in live.items():
                    if b < hi and lo < b + n:
                        bad.append("device %d entry %d: alloc %#x+%d overlaps live %#x+%d" % (dev, i, lo, e["size"], b, n))
                        break
                live[lo] = e["size"]
            elif a == "free_requested":
                nxt = entries[i + 1] if i + 1 < len(entries) else {}
                if nxt.get("action") != "free_completed" or nxt.get("addr") != e["addr"] or nxt.get("size") != e["size"]:
                    bad.append("device %d entry %d: free_requested without its free_completed" % (dev, i))
                if live.get(e["addr"]) != e["size"] and not allow_early_frees:
                    bad.append("device %d entry %d: free of %#x+%d matches no live allocation" % (dev, i, e["addr"], e["size"]))
            elif a == "free_completed":
                live.pop(e["addr"], None)
        final_live[dev] = live
    for s in snap["segments"]:
        if set(s) != SEGMENT_KEYS:
            bad.append("segment %#x: keys %s" % (s.get("address", 0), sorted(s)))
            continue
        addr, active = s["address"], 0
        for b in s["blocks"]:
            if set(b) != BLOCK_KEYS or b["address"] != addr or b["state"] not in ("active_allocated", "inactive"):
                bad.append("segment %#x: block %r" % (s["address"], {k: b.get(k) for k in ("address", "size", "state")}))
                break
            if b["state"] == "active_allocated":
                active += b["size"]
                if final_live.get(s["device"], {}).pop(b["address"], None) != b["size"]:
                    bad.append("segment %#x: active block %#x+%d is not live at the end" % (s["address"], b["address"], b["size"]))
            addr += b["size"]
        if addr != s["address"] + s["total_size"]:
            bad.append("segment %#x: blocks cover %d of %d bytes" % (s["address"], addr - s["address"], s["total_size"]))
        if active != s["allocated_size"]:
            bad.append("segment %#x: allocated_size %d, active blocks %d" % (s["address"], s["allocated_size"], active))
    for dev, live in final_live.items():
        if live:
            bad.append("device %d: %d allocations live at the end are no block" % (dev, len(live)))
    return bad


def trace_tool():
    for p in (os.environ.get("SOMALLOC_TRACE"), os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "release", "somalloc-trace")):
        if p and os.access(p, os.X_OK):
            return p
    return None


def recorded(data_dir):
    files = sorted(glob.glob(os.path.join(data_dir, "*.trace")))
    check("recorded traces found in %s" % data_dir, files, str(len(files)))
    tool = trace_tool()
    out = tempfile.mkdtemp()
    for path in files:
        name = os.path.basename(path)
        target = os.path.join(out, name + ".pickle")
        snap = snapshot.trace_to_snapshot(path, target)
        bad = problems(snap)
        n = {a: sum(1 for t in snap["device_traces"] for e in t if e["action"] == a) for a in ("alloc", "free_completed", "segment_alloc")}
        check("%s: a consistent snapshot" % name, not bad, "%s %s" % (n, bad[:3]))
        check("%s: every free matched an allocation, no marker left out" % name, snap["somalloc"]["frees_without_allocation"] == 0, str(snap["somalloc"]))
        with open(target, "rb") as f:
            raw = f.read()
        check("%s: the pickle is protocol 4 and reads back equal" % name, raw[:2] == b"\x80\x04" and pickle.loads(raw) == snap)
        if tool:
            text = subprocess.run([tool, "summary", path, "--top", "1"], capture_output=True, text=True).stdout
            m = re.search(r"events: allocate (\d+), free (\d+)", text)
            want = (int(m.group(1)), int(m.group(2))) if m else None
            check("%s: the trace tool counts the same allocations and frees" % name, want == (n["alloc"], n["free_completed"]), "tool %s, snapshot %s" % (want, n))
    if not tool:
        print("SKIP counts against the trace tool: no somalloc-trace (set SOMALLOC_TRACE)", flush=True)


# --- a trace written here ------------------------------------------------------
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag(v):
    return (v << 1) ^ (v >> 63) if v >= 0 else ((-v) << 1) - 1


def string(s):
    b = s.encode()
    return varint(len(b)) + b


def record(tag, payload):
    return bytes([tag]) + varint(len(payload)) + payload


class Writer:
    def __init__(self):
        self.out = bytearray(b"somalloc-trace/1\n")
        self.t = self.addr = self.n = 0

    def meta(self, k, v):
        self.out += record(1, string(k) + string(v))

    def thread(self, i, name):
        self.out += record(2, varint(i) + string(name))

    def stream(self, i, dev, handle):
        self.out += record(3, varint(i) + varint(dev) + varint(handle))

    def backtrace(self, i, text):
        self.out += record(4, varint(i) + string(text))

    def event(self, action, t, dev, stream, nbytes, addr, bt=None):
        p = bytes([action]) + varint(0) + varint(zigzag(t - self.t)) + varint(dev) + varint(0 if stream is None else stream + 1)
        p += varint(nbytes) + varint(zigzag(addr - self.addr)) + varint(0 if bt is None else bt + 1)
        self.t, self.addr = t, addr
        self.n += 1
        self.out += record(5, p)

    def end(self):
        self.out += record(7, varint(self.n) + varint(0))


BT = """   0: app::layer::forward
             at /src/app/layer.rs:42:9
   1: app::main
             at /src/app/main.rs:7:5
   2: <unknown>"""
MiB = 1 << 20


def written(out_dir):
    w = Writer()
    w.meta("start_unix_ns", "1700000000000000000")
    w.meta("program", "written by snapshot_check.py")
    w.thread(0, "main")
    w.stream(0, 0, 0x1000)
    w.stream(1, 1, 0x2000)
    w.backtrace(0, BT)
    base0, base1 = 0x7F0000000000, 0x7F1000000000
    w.event(1, 1000, 0, 0, 3 * MiB, base0, bt=0)  # alloc, with a backtrace
    w.event(3, 2000, 0, 0, 1 << 40, 0)  # refused
    w.event(4, 2500, 0, None, 0, 0)  # a flush marker
    w.event(1, 3000, 1, 1, 512, base1 + 4 * MiB)  # device 1
    w.event(2, 3500, 1, 1, 256, base1 + 4 * MiB + 1024)  # freed, made before the trace
    w.event(1, 4000, 0, 0, MiB, base0 + 64 * MiB)  # another segment on device 0
    w.event(2, 5000, 0, 0, 3 * MiB, base0)  # the first one freed
    w.event(1, 6000, 0, 0, 2 * MiB, base0 + 3 * MiB)  # next to where it was
    w.end()
    path = os.path.join(out_dir, "written.trace")
    with open(path, "wb") as f:
        f.write(w.out)
    snap = snapshot.trace_to_snapshot(path, os.path.join(out_dir, "written.pickle"))
    bad = problems(snap, allow_early_frees=True)
    check("the written trace: a consistent snapshot", not bad, str(bad[:3]))
    d0, d1 = snap["device_traces"]
    check("one trace per device", len(snap["device_traces"]) == 2)
    check(
        "device 0: segment_alloc, alloc, oom, segment_alloc, alloc, free_requested, free_completed, alloc",
        [e["action"] for e in d0] == ["segment_alloc", "alloc", "oom", "segment_alloc", "alloc", "free_requested", "free_completed", "alloc"],
        str([e["action"] for e in d0]),
    )
    frames = d0[1]["frames"]
    check(
        "the backtrace as PyTorch's frames, innermost first",
        frames == [{"name": "app::layer::forward", "filename": "/src/app/layer.rs", "line": 42}, {"name": "app::main", "filename": "/src/app/main.rs", "line": 7}, {"name": "<unknown>", "filename": "??", "line": 0}],
        str(frames),
    )
    check("a free carries its allocation's frames", d0[5]["frames"] == frames and d0[6]["frames"] == frames)
    check("times in microseconds since the epoch, handles as streams", d0[1]["time_us"] == 1700000000000001 and d0[1]["stream"] == 0x1000 and d1[0]["stream"] == 0x2000 if d1 else False, str(d0[1]))
    oom = d0[2]
    check("a refused allocation is an oom entry", oom["size"] == 1 << 40 and oom["device_free"] == 0 and oom["frames"] == [], str(oom))
    seg0 = [(s["address"], s["total_size"]) for s in snap["segments"] if s["device"] == 0]
    check("device 0's segments: ranges rounded out to 2 MiB and merged", seg0 == [(base0, 6 * MiB), (base0 + 64 * MiB, 2 * MiB)], str([(hex(a), n) for a, n in seg0]))
    check(
        "device 1: a free of an allocation made before the trace puts its segment there from the start (no segment_alloc)",
        [e["action"] for e in d1] == ["alloc", "free_requested", "free_completed"] and snap["somalloc"]["frees_without_allocation"] == 1,
        str([e["action"] for e in d1]),
    )
    first = snap["segments"][0]
    check(
        "the live allocation at the end is the segment's active block, the rest inactive",
        [(b["address"] - base0, b["size"], b["state"]) for b in first["blocks"]] == [(0, 3 * MiB, "inactive"), (3 * MiB, 2 * MiB, "active_allocated"), (5 * MiB, MiB, "inactive")],
        str([(b["address"] - base0, b["size"], b["state"]) for b in first["blocks"]]),
    )
    check("the markers left out are counted", snap["somalloc"]["markers_left_out"] == {"flush": 1}, str(snap["somalloc"]["markers_left_out"]))
    # Cut short (a crashed program): what came before the cut is read.
    cut = os.path.join(out_dir, "cut.trace")
    with open(cut, "wb") as f:
        f.write(bytes(w.out[: len(w.out) - 10]))
    t = snapshot.read_trace(cut)
    check("a trace cut short is read up to the cut", not t["complete"] and 0 < len(t["events"]) < 8, "%d events" % len(t["events"]))
    try:
        snapshot.trace_to_snapshot(os.path.abspath(__file__))
        check("a file that is not a trace is refused", False)
    except ValueError as e:
        check("a file that is not a trace is refused", "not a somalloc trace" in str(e), str(e)[:100])


def main():
    data_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benches", "data")
    recorded(data_dir)
    written(tempfile.mkdtemp())
    print("%d passed, %d failed" % (sum(checks), len(checks) - sum(checks)))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
