"""Real models under PyTorch's allocators and under somalloc.

    python3 benches/models.py [--out DIR] [--steps 25] [--workloads resnet50,gpt2,both,infer]
                              [--modes caching,async,expandable,somalloc-pool,somalloc-cache]

Workloads (random weights from configs; nothing is downloaded):
  resnet50  torchvision's ResNet-50, batch 64 of 224x224 images
  gpt2      GPT-2 small (transformers' GPT2Config), 8 sequences of 512 tokens
  both      both models every step, each on a stream of its own
  infer     GPT-2 small serving --requests requests (300), each a forward
            pass (eval, no grad) of a batch of 1 to 32 sequences of 16 to
            1024 tokens, drawn uniformly from a fixed seed (the same
            requests in every mode): the shapes that fragment a caching
            allocator. A step is a request; its figures are requests per
            second and ms per request (the ms/step column), both over the
            requests after the first 20
  alloc     not a model and not run unless named: the allocator's cost to the
            host through PyTorch, a step being 100 rounds of 64 tensors
            (256 B to 8 MiB, torch.empty) freed in reverse order on the
            default stream; ms/step x 1e6 / 6400 is ns per allocation + free
Every training step: bf16 autocast, forward, backward, AdamW. 25 steps;
ms/step is the median of the last 20. Peak is the largest drop of the
device's free memory (cudaMemGetInfo) after a step (a request), from before
the models were made.

After the last step every run measures what the allocator gives back: the
step's tensors freed (gradients too), the allocator's empty-cache called
(torch.cuda.empty_cache(); somalloc.empty_cache() under somalloc), the
device synchronized, the drop of free memory is "after empty, model kept";
then the models are freed too and the same again gives "after empty". The
run's line gives both, and somalloc's live bytes at each (PyTorch's
memory_allocated under PyTorch), and with the arena (pool:vmm) the bytes
the arena still maps.

Modes, one process each (per workload), all in one run:
  caching          PyTorch's caching allocator (the default)
  async            PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  expandable       PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  somalloc-pool    somalloc through CUDAPluggableAllocator, pool only (cache:off)
  somalloc-cache   somalloc with its cache tier (caps of 2 GiB per stream, 4 GiB in all)
  somalloc-vmm     somalloc on its virtual-memory arena (pool:vmm), no cache tier
  somalloc-vmm-cache  the arena with the cache tier in front (the caps of somalloc-cache)
  somalloc-vmm-nomoves  the arena without moving free chunks where it grows
                   (arena_moves:off)
  somalloc-vmm-nowaits  the arena without device waits for other streams' frees
                   (arena_stream_waits:off)
  somalloc-plan    somalloc serving a placement planned from a trace of an earlier
                   run: a first process runs 3 steps with trace:, the measured one
                   runs with plan: (the cache tier, default caps, serves the rest)
  somalloc-plan-shared  the same with plan_share:10, the streams sharing one arena
  somalloc-plan-device  the same with plan_share:device+15: bytes pass between the
                   streams only where the recorded run's device had released
                   them 15 ms before (the recording run has trace_device:on)
  somalloc-default somalloc with its cache tier at its default caps (what plan modes
                   serve with before their plan and beside it)
  somalloc-auto    plan:auto with an arena per stream (plan_share:off), one process:
                   the first steps recorded in memory, the repeated step planned and
                   served from a later step (the cache tier serves before); -shared:
                   with plan_share:10, plan:auto's default
  somalloc-vmm-auto  the same on the virtual-memory arena (pool:vmm), the plan's
                   arena drawn from it; somalloc-vmm-auto-shared: with plan_share:10
--plan-mode NAME=CONF adds a plan mode with its own keys (recorded, then
  served), e.g. --plan-mode "plan-share-5=cache:on,plan_share:5" or
  --plan-mode "timed=cache:on,plan_share:device,plan_time_waits:on".
--serial makes the second model's stream wait for the first's every step
  (workload both): the two models then never run at once, which separates
  the device's work from how the streams overlap.
--somalloc-conf adds keys to both somalloc modes (e.g. pool:default).
--cpus LIST runs every process on these CPUs (e.g. 2-5). On a machine whose
  cores run at different speeds, or a virtual machine whose CPUs do, a
  process lands on fast or slow ones by chance and its host-bound steps
  follow; pinned, every mode gets the same cores.
--repeat N runs the modes of each workload N times in turn (A B C A B C ...):
  the table gives each mode's median ms/step (infer: median ms/request and
  req/s), its largest peak and its median footprints after empty-cache, the
  JSON every run (a machine whose speed drifts then drifts under every
  mode). Under the table, a line per workload names the smallest of the
  PyTorch modes' median peaks and gives each somalloc mode's largest peak
  over it (the arena's target: at most 1).
--requests N: the requests of the infer workload (default 300).
--mode NAME=CONF (repeatable) adds a somalloc mode with its own keys, e.g.
  --mode "guarded=cache:on,cache_headroom:on"; name it in --modes too or it
  runs after the others.

Each run's line also gives the host's part of a step (until the step's
work is enqueued; near the step's time, the host bounds the step), and
each run's line and the table the fastest measured step: a
median far above it means the run fell into a burst of slow steps (every
allocator's runs do on a machine whose speed jumps; compare the rows of
one run, and use --repeat there). It gives the range of the device's SM
clock (NVML) as the measured steps ended, too: a step that slows while its
host part stays is the device slowing, and a clock that fell says why.

Prints a table with the loss check (step 0 equal to caching's, last step
within 1e-3 relative), writes models.json and models.svg to --out.

    python3 benches/models.py --from benches/data/models-h200.json --out DIR

runs nothing: it prints the table of recorded runs (several files merge;
several rows of one workload and mode are taken as its runs) and writes
their models.json and models.svg to DIR.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The child process (models_child.py) lies beside this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models_child import INFER_REQUESTS, INFER_WARMUP, MODES, PLAN_KEY, child, measured  # noqa: E402

WORKLOADS = ["resnet50", "gpt2", "both", "infer"]
# PyTorch's allocators: the modes a somalloc mode's peak is held against.
TORCH_MODES = ("caching", "async", "expandable")



# ---------------------------------------------------------------------------
# Recorded runs.


def warmup(r):
    """The steps before those a recorded run `r` is measured by."""
    return INFER_WARMUP if r.get("workload") == "infer" else 5


# ---------------------------------------------------------------------------
# The driver.


def svg(rows, workloads, modes, path):
    """Two grouped bar charts (ms/step, peak MiB), written by hand."""
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
    w, h, pad, gap = 900, 330, 60, 30
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (w, 2 * h + 40 + 16 * ((len(modes) - 1) // 5))]
    parts.append('<rect width="100%" height="100%" fill="white"/>')
    for panel, (key, title) in enumerate([("ms_per_step", "ms per step (median of the last 20; infer: ms per request)"), ("peak_mib", "peak device memory (MiB)")]):
        top = panel * (h + 20) + 20
        vals = [r[key] for r in rows.values() if r]
        vmax = max(vals) * 1.15 if vals else 1
        parts.append('<text x="%d" y="%d" font-size="14">%s</text>' % (pad, top + 14, title))
        group_w = (w - 2 * pad) / max(1, len(workloads))
        bar_w = (group_w - gap) / max(1, len(modes))
        base = top + h - 40
        for gi, wl in enumerate(workloads):
            gx = pad + gi * group_w
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (gx + (group_w - gap) / 2, base + 16, wl))
            for mi, m in enumerate(modes):
                r = rows.get((wl, m))
                if not r:
                    continue
                bh = (h - 80) * r[key] / vmax
                x = gx + mi * bar_w
                parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (x, base - bh, bar_w - 2, bh, colors[mi % len(colors)]))
                parts.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%.0f</text>' % (x + bar_w / 2, base - bh - 3, r[key]))
        parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (pad, base, w - pad, base))
    for mi, m in enumerate(modes):
        lx, ly = pad + (mi % 5) * 160, 2 * h + 25 + (mi // 5) * 16
        parts.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>' % (lx, ly, colors[mi % len(colors)], lx + 14, ly + 9, m))
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def fastest(r):
    """The fastest of the measured steps: what the step takes where nothing
    else slowed the machine. A median far above it says the run fell into a
    burst of slow steps, whatever the allocator."""
    return min(measured(r["step_ms"], warmup(r)))


def clock(r):
    """The run's SM clock over its measured steps, for its line."""
    mhz = [m for m in measured(r.get("step_sm_mhz") or [], warmup(r)) if m]
    if not mhz:
        return ""
    return "  SM %d-%d MHz" % (min(mhz), max(mhz))


def unit(r):
    """What a run's ms_per_step is per: a step, or (infer) a request."""
    return "ms/req " if r.get("workload") == "infer" else "ms/step"


def mib(n):
    return "%.0f" % n if n is not None else "-"


def after_empty(r):
    """The run's figures after the last step (absent from runs recorded
    before they were taken): requests per second (infer), and after
    empty-cache with the models kept and freed, the drop of free memory,
    the live bytes and the arena's mapped bytes."""
    out = "  %.1f req/s" % r["req_per_s"] if "req_per_s" in r else ""
    if "after_empty_mib" not in r:
        return out
    for suffix, what in (("_kept", "model kept"), ("", "freed")):
        live = r.get("live_bytes_after_empty" + suffix)
        arena = r.get("arena_mapped_after_empty%s_mib" % suffix)
        out += "  after empty (%s) %s MiB, live %s MiB%s" % (
            what, mib(r.get("after_empty%s_mib" % suffix)), mib(live / 2**20 if live is not None else None),
            ", arena mapped %s MiB" % mib(arena) if arena is not None else "")
    return out


def waits(r):
    """A shared plan's waits a step (made, and not needed because the device had passed the free), how long
    the made ones held their streams where timed (plan_time_waits:on), and with pool:vmm the arena's moves,
    time in virtual-memory calls and waits for its lock a step, from somalloc's statistics."""
    st, n = r.get("somalloc") or {}, len(r["step_ms"])
    share = "  plan served %.1f %% of steady allocations" % (100 * r["plan_steady_share"]) if "plan_steady_share" in r else ""
    share += "  arena a step: %.1f moves, %.2f ms in VM calls, %.1f lock waits (%.2f ms)" % (st["arena_moves"] / n, st["arena_vmm_ns"] / 1e6 / n, st["arena_lock_waits"] / n, st["arena_lock_wait_ns"] / 1e6 / n) if st.get("arena_enabled") and "arena_vmm_ns" in st else ""
    if "switch_step" in r:
        share += "  switched at step %d, after it %.0f MiB, %.2f ms/step" % (r["switch_step"], r.get("after_switch_peak_mib", 0), r.get("after_switch_ms_per_step", 0))
    if not st.get("plan_waits") and not st.get("plan_waits_passed"):
        return share
    out = share + "  waits %.1f a step (%.1f passed)" % (st.get("plan_waits", 0) / n, st.get("plan_waits_passed", 0) / n)
    if st.get("plan_waits_timed"):
        out += ", stood still %.2f ms a step" % (st["plan_wait_stall_ns"] / 1e6 / n)
    return out


def vm_calls(r):
    """With an arena, its virtual-memory calls once warm: a step from the
    fourth step on (training), or per 100 allocations over the second half
    of the requests (infer)."""
    v = r.get("step_arena_vmm_calls") or []
    if not v or not r.get("somalloc", {}).get("arena_enabled"):
        return ""
    if r.get("workload") == "infer":
        a, h = r.get("step_allocations") or [], len(v) // 2
        n = a[-1] - a[h - 1] if len(a) == len(v) and h > 0 else 0
        return "  VM calls %.2f per 100 allocations in the second half" % (100.0 * (v[-1] - v[h - 1]) / n) if n else ""
    if len(v) <= 3:
        return ""
    return "  VM calls %.1f a step after step 3" % ((v[-1] - v[2]) / (len(v) - 3))


def parse_cpus(text):
    """The CPUs of a list such as "2-5" or "0,2,4-7"."""
    cpus = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError("not a CPU list (e.g. 2-5 or 0,2,4-7): %r" % part)
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError("a range that runs backwards: %r" % part)
        cpus.update(range(first, last + 1))
    return cpus


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benches/data")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--requests", type=int, default=INFER_REQUESTS,
                    help="requests of the infer workload (default %d; the first %d are its warm-up)" % (INFER_REQUESTS, INFER_WARMUP))
    ap.add_argument("--record-steps", type=int, default=3,
                    help="steps of the earlier, recorded run of a plan mode (default 3)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the modes of a workload this many times in turn; the table gives the median ms/step and the largest peak")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--somalloc-conf", default="", help="keys added to both somalloc modes")
    ap.add_argument("--mode", action="append", default=[], metavar="NAME=CONF", help="a somalloc mode of your own")
    ap.add_argument("--plan-mode", action="append", default=[], metavar="NAME=CONF", help="a plan mode of your own")
    ap.add_argument("--serial", action="store_true", help="workload both: the second stream waits for the first every step")
    ap.add_argument("--cpus", default="", metavar="LIST",
                    help="run every process on these CPUs (e.g. 2-5 or 0,2,4-7): each mode then gets the same cores")
    ap.add_argument("--from", dest="recorded", action="append", default=[], metavar="JSON",
                    help="run nothing: the table and plot of recorded runs (models.json files, merged in order)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.recorded:
        return from_recorded(args.recorded, args.out)
    for kind, given in (("somalloc", args.mode), ("plan", args.plan_mode)):
        for m in given:
            name, sep, conf = m.partition("=")
            if not sep or not name:
                ap.error("--mode and --plan-mode take NAME=CONF, got %r" % m)
            MODES[name] = (kind, conf)
    if args.cpus:
        try:
            cpus = parse_cpus(args.cpus)
            # Inherited by every process started from here on.
            os.sched_setaffinity(0, cpus)
        except (ValueError, OSError) as e:
            ap.error("--cpus %s: %s" % (args.cpus, e))
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.somalloc_conf, args.serial, args.requests)
        return 0
    workloads = args.workloads.split(",")
    modes = args.modes.split(",")
    modes += [m.partition("=")[0] for m in args.mode + args.plan_mode if m.partition("=")[0] not in modes]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error("unknown modes: %s" % ", ".join(unknown))
    unknown = [w for w in workloads if w not in WORKLOADS + ["alloc"]]
    if unknown:
        ap.error("unknown workloads: %s" % ", ".join(unknown))
    if args.repeat < 1:
        ap.error("--repeat takes 1 or more")
    if args.requests < 1:
        ap.error("--requests takes 1 or more")
    rows = {}
    runs = {}
    for wl, rep, m in [(wl, rep, m) for wl in workloads for rep in range(args.repeat) for m in modes]:
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        kind, conf = MODES[m]
        if kind == "torch" and conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        t0 = time.time()
        cmd = [sys.executable, __file__, "--child", m, wl, "--steps", str(args.steps), "--requests", str(args.requests),
               "--somalloc-conf", args.somalloc_conf]
        if args.serial:
            cmd.append("--serial")
        for extra in args.mode:
            cmd += ["--mode", extra]
        for extra in args.plan_mode:
            cmd += ["--plan-mode", extra]
        if kind == "plan":
            # The earlier run: by default three steps (the first, and two
            # of the step it repeats), recorded.
            os.makedirs(args.out, exist_ok=True)
            trace = os.path.abspath(os.path.join(args.out, "%s.%s.trace" % (wl, m)))
            rec = list(cmd)
            rec[rec.index("--steps") + 1] = str(args.record_steps)
            key = "trace:" + trace
            if "plan_share:device" in conf:
                key += ",trace_device:on"
            p = subprocess.run(rec, env=dict(env, **{PLAN_KEY: key}), capture_output=True, text=True)
            if p.returncode != 0:
                print("%-9s %-15s FAILED recording (rc %d)\n%s" % (wl, m, p.returncode, (p.stdout + p.stderr)[-3000:]), flush=True)
                runs.setdefault((wl, m), []).append(None)
                continue
            env[PLAN_KEY] = "plan:" + trace
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        res = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not res:
            print("%-9s %-15s FAILED (rc %d)\n%s" % (wl, m, p.returncode, (p.stdout + p.stderr)[-3000:]), flush=True)
            runs.setdefault((wl, m), []).append(None)
            continue
        r = json.loads(res[-1][len("RESULT "):])
        r["repeat"] = rep
        runs.setdefault((wl, m), []).append(r)
        print("%-9s %-15s %8.2f %s (fastest %.2f, host %.2f) %9.0f MiB  loss %.6f -> %.6f  (%.0f s)%s" % (wl, m, r["ms_per_step"], unit(r), fastest(r), r["host_ms"], r["peak_mib"], r["losses"][0], r["losses"][-1], time.time() - t0, clock(r) + waits(r) + vm_calls(r) + after_empty(r)), flush=True)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "models.partial.json"), "w") as f:
            json.dump([r for v in runs.values() for r in v if r], f)
    # A mode's row: its runs' median ms/step and largest peak (a failed run
    # fails the row).
    for key, rs in runs.items():
        rows[key] = aggregate(rs) if all(rs) else None
    meta = {"steps": args.steps, "requests": args.requests, "repeat": args.repeat, "serial": args.serial}
    return report(rows, workloads, modes, args.out, meta)


# A run's figures a row gives the median of (those its runs have: runs
# recorded before some of them were taken lack them).
MEDIAN_KEYS = ("req_per_s", "after_empty_mib", "after_empty_kept_mib", "arena_mapped_after_empty_mib",
               "arena_mapped_after_empty_kept_mib", "live_bytes_after_empty", "live_bytes_after_empty_kept")


def aggregate(rs):
    """A mode's row from its runs: their median ms/step, largest peak and
    fastest step, the median of the figures of MEDIAN_KEYS, every run kept
    (in `runs`) when there are several."""
    r = dict(rs[0])
    r["ms_per_step"] = statistics.median(x["ms_per_step"] for x in rs)
    r["peak_mib"] = max(x["peak_mib"] for x in rs)
    r["fastest_ms"] = min(fastest(x) for x in rs)
    for key in MEDIAN_KEYS:
        vals = [x[key] for x in rs if x.get(key) is not None]
        if vals:
            r[key] = statistics.median(vals)
    if len(rs) > 1:
        keep = ("workload", "ms_per_step", "peak_mib", "step_ms", "host_ms", "step_host_ms", "losses",
                "step_sm_mhz", "step_clock_reasons", "cpus") + MEDIAN_KEYS
        r["runs"] = [{k: x[k] for k in keep if k in x} for x in rs]
    return r


def median_peak(r):
    """The median of a row's runs' peaks (its one run's peak)."""
    return statistics.median(x["peak_mib"] for x in r.get("runs") or [r])


def peak_targets(rows, workloads, modes):
    """Per workload: the smallest of the PyTorch modes' median peaks, the
    mode it is of, and each somalloc mode's largest peak over it."""
    targets = {}
    for wl in workloads:
        torch_peaks = [(median_peak(rows[(wl, m)]), m) for m in TORCH_MODES if rows.get((wl, m))]
        if not torch_peaks:
            continue
        low, low_mode = min(torch_peaks)
        ratios = {m: rows[(wl, m)]["peak_mib"] / low for m in modes
                  if m not in TORCH_MODES and rows.get((wl, m)) and low > 0}
        targets[wl] = {"lowest_torch_median_peak_mib": low, "lowest_torch_mode": low_mode, "peak_over_lowest": ratios}
    return targets


def from_recorded(paths, out):
    """The table and plot of the rows of recorded models.json files: the
    workloads and modes in the order they first appear. Several rows of one
    workload and mode (from several files, or a file that keeps every run
    as a row) are the runs of one row, as with --repeat."""
    grouped, workloads, modes, meta = {}, [], [], {}
    for path in paths:
        try:
            with open(path) as f:
                rec = json.load(f)
            recorded = rec["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("models.py: cannot read %s: %s" % (path, e), file=sys.stderr)
            return 2
        meta = meta or {k: rec.get(k) for k in ("steps", "requests", "repeat", "serial")}
        for r in recorded:
            wl, m = r["workload"], r["mode"]
            workloads += [wl] if wl not in workloads else []
            modes += [m] if m not in modes else []
            grouped.setdefault((wl, m), []).append(r)
    rows = {k: rs[0] if len(rs) == 1 else aggregate(rs) for k, rs in grouped.items()}
    meta["from"] = paths
    return report(rows, workloads, modes, out, meta)


def report(rows, workloads, modes, out, meta):
    """Prints the table with the loss check and writes models.json and
    models.svg to `out`; 0 when every loss check passed."""
    for r in rows.values():
        if r and "fastest_ms" not in r:
            # A row recorded before the fastest step was kept.
            r["fastest_ms"] = min(fastest(x) for x in r.get("runs", [r]))
    targets = peak_targets(rows, workloads, modes)
    print()
    print("ms/step: the median over a mode's runs of each run's median step (infer: of its mean ms per request);")
    print("peak: the largest over the runs; vs lowest PyTorch: over the smallest of PyTorch's modes' median peaks;")
    print("req/s and after empty (drop of free memory after empty-cache, models kept / freed): medians over the runs.")
    print()
    print("| workload | mode | ms/step (infer: ms/request) | vs caching | fastest step | peak MiB | vs lowest PyTorch | loss check | req/s "
          "| after empty MiB, model kept | after empty MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for wl in workloads:
        base = rows.get((wl, "caching"))
        lowest = targets.get(wl, {}).get("lowest_torch_median_peak_mib")
        for m in modes:
            r = rows.get((wl, m))
            if not r:
                print("| %s | %s | failed | | | | | | | | |" % (wl, m))
                verdicts.append(False)
                continue
            check = "no baseline"
            if base:
                every = r.get("runs", [r])
                first = all(x["losses"][0] == base["losses"][0] for x in every)
                last = all(abs(x["losses"][-1] - base["losses"][-1]) <= 1e-3 * abs(base["losses"][-1]) for x in every)
                check = "ok" if first and last else "step 0 %s, last %s" % ("equal" if first else "differs", "within 1e-3" if last else "off")
                r["loss_check"] = check
                verdicts.append(first and last)
            print("| %s | %s | %.2f | %s | %.2f | %.0f | %s | %s | %s | %s | %s |" % (
                wl, m, r["ms_per_step"],
                "%.3f" % (r["ms_per_step"] / base["ms_per_step"]) if base else "",
                r["fastest_ms"], r["peak_mib"], "%.3f" % (r["peak_mib"] / lowest) if lowest else "", check,
                "%.1f" % r["req_per_s"] if "req_per_s" in r else "",
                mib(r.get("after_empty_kept_mib")) if "after_empty_kept_mib" in r else "",
                mib(r.get("after_empty_mib")) if "after_empty_mib" in r else ""))
    print()
    print("peaks against PyTorch's: each somalloc mode's largest peak over the smallest of the PyTorch modes' median peaks")
    print("(the arena's target, somalloc-vmm and somalloc-vmm-cache: at most 1)")
    for wl in workloads:
        t = targets.get(wl)
        if not t:
            print("peaks %s: no PyTorch mode ran" % wl)
            continue
        print("peaks %s: smallest PyTorch median peak %.0f MiB (%s); %s" % (
            wl, t["lowest_torch_median_peak_mib"], t["lowest_torch_mode"],
            ", ".join("%s %.3f%s" % (m, q, "" if q <= 1 else " (above)") for m, q in t["peak_over_lowest"].items()) or "no somalloc mode ran"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump(dict(meta, rows=[r for r in rows.values() if r], failed=["%s/%s" % k for k, v in rows.items() if not v],
                       peak_targets=targets), f, indent=1)
    svg(rows, workloads, modes, os.path.join(out, "models.svg"))
    print("\nwrote %s and %s" % (os.path.join(out, "models.json"), os.path.join(out, "models.svg")))
    print("loss checks: %d passed, %d failed" % (sum(verdicts), len(verdicts) - sum(verdicts)))
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
