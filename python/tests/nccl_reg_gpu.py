"""NCCL user-buffer registration of somalloc's arena (``pool:vmm``) segments,
on two GPUs, against NCCL's own allocator: which operations take NCCL's
registered (zero-copy) path with NVLink multicast off, and what bandwidth
each kind of memory gets.

    torchrun --standalone --nproc_per_node=2 python/tests/nccl_reg_gpu.py OUTDIR [--sizes 1,4,16,64,256] [--iters 20] [--trials 3]
    python3 python/tests/nccl_reg_gpu.py OUTDIR [...]     # starts torchrun itself

The memory, all live at once in one process per rank (one NCCL communicator):

    (a) somalloc's arena through torch.cuda.MemPool(somalloc's allocator),
        registered with ProcessGroupNCCL's register_mem_pool (each of the
        pool's segments through ncclCommRegister);
    (b) the same kind of pool, a second one, not registered;
    (c) PyTorch's NCCL pool, torch.cuda.MemPool(backend.mem_allocator) over
        ncclMemAlloc, registered the same way;
    (d) PyTorch's own caching allocator (cudaMalloc), not registered.

For each of all_reduce (in place, as PyTorch issues it),
all_gather_into_tensor, reduce_scatter_tensor and a send/receive exchange
(batch_isend_irecv with the peer) at each size (MiB; for all_gather the
output, for reduce_scatter the input, for send/receive each direction), per
memory: 3 trials of 20 iterations, each iteration timed with CUDA events
behind a GPU sleep (so the host's enqueueing is not timed); the figure is the
median over the trials of the larger rank's median. Bandwidth is NCCL-tests'
bus bandwidth (all_reduce x 2(n-1)/n, all_gather and reduce_scatter x
(n-1)/n). Every result is checked once per memory, operation and size.

NCCL logs at INFO for INIT, ENV, REG and TUNING into OUTDIR/nccl-debug-rankR.log;
the script cuts each log at the start and end of every measurement and says,
per memory, operation and size, whether NCCL took the registered path (its
"IPC register buffer" / "IPC reuse buffer" lines), failed to register, or
never looked the buffer up, and with which algorithm and protocol. Rank 0
prints the table with the ratio (a)/(c) per operation and size (target 0.98),
a line starting "nccl-reg registered path:" (or saying that no operation took
it, with the debug lines), a line starting "nccl-reg target", one line per
check and "N passed, N failed"; OUTDIR/nccl-reg.json has every figure. Without
PyTorch, two GPUs, NCCL, torch.cuda.MemPool or ProcessGroupNCCL's
register_mem_pool it prints one SKIP line and exits 0.

NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set below before
PyTorch is imported (and passed to torchrun when this script starts it); the
pools are registered without symm (ncclCommRegister, not a symmetric window),
and nothing here creates a multicast object. The measurement of (a) comes
last: on an NCCL that registers a buffer of one physical allocation only, a
buffer over several of the arena's chunks is the case to watch, and the
figures of (d), (b) and (c) are printed before it starts.
"""

import os

# Before anything can load NCCL: NVLink multicast stays off, whatever the
# caller's environment says.
os.environ["NCCL_NVLS_ENABLE"] = "0"

import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

MIB = 1 << 20
OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
CONFIGS = (
    ("d", "(d) PyTorch's caching allocator, not registered"),
    ("b", "(b) somalloc pool:vmm MemPool, not registered"),
    ("c", "(c) ncclMemAlloc MemPool (backend.mem_allocator), registered"),
    ("a", "(a) somalloc pool:vmm MemPool, registered"),
)
TARGET = 0.98
WARMUP = 5
# GPU clock cycles for torch.cuda._sleep before each timed batch: about 25 ms
# at the 1.7-2 GHz of an H100 or H200, far longer than the host takes to
# enqueue the batch.
SLEEP_CYCLES = 50_000_000

results = []


def usage():
    print("usage: nccl_reg_gpu.py OUTDIR [--sizes 1,4,16,64,256] [--iters 20] [--trials 3]", file=sys.stderr)
    return 2


def parse(argv):
    """(outdir, sizes in MiB, iterations, trials), or None."""
    out, sizes, iters, trials = None, [1, 4, 16, 64, 256], 20, 3
    i = 0
    try:
        while i < len(argv):
            a = argv[i]
            if a == "--sizes":
                sizes = [int(x) for x in argv[i + 1].split(",") if x]
                i += 2
            elif a == "--iters":
                iters = int(argv[i + 1])
                i += 2
            elif a == "--trials":
                trials = int(argv[i + 1])
                i += 2
            elif out is None and not a.startswith("-"):
                out = a
                i += 1
            else:
                return None
    except (IndexError, ValueError):
        return None
    if out is None or not sizes or iters < 1 or trials < 1 or min(sizes) < 1:
        return None
    return out, sizes, iters, trials


ARGS = parse(sys.argv[1:])
LOG = None
if ARGS is not None and "RANK" in os.environ:
    # A rank under torchrun: NCCL's debug lines into a file of our own (read
    # back below), registration only where this script asks for it.
    os.makedirs(ARGS[0], exist_ok=True)
    LOG = os.path.abspath(os.path.join(ARGS[0], "nccl-debug-rank%s.log" % os.environ["RANK"]))
    if os.path.exists(LOG):
        os.remove(LOG)  # NCCL truncates it when it opens it: no stale offsets
    os.environ.update({
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,REG,TUNING",
        "NCCL_DEBUG_FILE": LOG,
        "NCCL_LOCAL_REGISTER": "1",
        "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0",
    })


def check(rank, name, ok, detail=""):
    results.append(bool(ok))
    say(rank, "%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""))


def say(rank, text):
    if rank == 0:
        print(text, flush=True)


def skip_reason():
    try:
        import torch
    except ImportError as e:
        return "no PyTorch (%s)" % e
    if not torch.cuda.is_available():
        return "no GPU"
    if torch.cuda.device_count() < 2:
        return "%d GPU (two needed)" % torch.cuda.device_count()
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return "PyTorch %s has no NCCL backend" % torch.__version__
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return "PyTorch %s has no torch.cuda.MemPool" % torch.__version__
    return None


def relaunch(argv):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", os.path.abspath(__file__)] + argv
    print("starting: %s" % " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))


def nccl_version(torch):
    """NCCL's version as a tuple of ints, or None."""
    try:
        import torch.cuda.nccl

        v = torch.cuda.nccl.version()
        return tuple(int(x) for x in v[:3]) if isinstance(v, tuple) else (v // 10000, v // 100 % 100, v % 100)
    except Exception:  # only for the report and the guard below
        return None


def log_pos():
    try:
        return os.path.getsize(LOG)
    except (OSError, TypeError):
        return 0


def log_lines(p0, p1):
    try:
        with open(LOG, "rb") as f:
            f.seek(p0)
            text = f.read(max(0, p1 - p0)).decode("utf-8", "replace")
    except (OSError, TypeError):
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


TUNING = re.compile(r"(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+)")
IPC_OK = re.compile(r"\bIPC (register|reuse) buffer\b")


def classify(lines):
    """What NCCL's REG and TUNING lines of one measurement say."""
    ok = [ln for ln in lines if IPC_OK.search(ln) or ("IPC" in ln and "regAddr" in ln and "fail" not in ln.lower())]
    failed = [ln for ln in lines if "fail" in ln.lower() and "regist" in ln.lower()]
    skipped = [ln for ln in lines if "skipping registration" in ln.lower()]
    reg_any = [ln for ln in lines if re.search(r"regist|IPC|NVLS", ln) and not TUNING.search(ln)]
    algos = sorted({"%s/%s" % (m.group(3), m.group(4)) for m in map(TUNING.search, lines) if m})
    path = "registered" if ok else "failed" if failed else "skipped" if skipped else "not registered"
    return {"path": path, "ok": len(ok), "failed": len(failed), "algos": algos, "sample": (ok or failed or skipped or reg_any)[:2], "reg_lines": len(reg_any)}


def pattern(torch, n, k, dev):
    """arange(n) % 251 + k in float32 (exact): a chunk out of place shows."""
    return torch.arange(n, device=dev, dtype=torch.float32).remainder_(251).add_(k)


def make_buffers(torch, dev, sizes, world):
    bufs = {}
    for mib in sizes:
        m = mib * MIB // 4 // world  # float32 elements of one rank's part
        n = m * world
        bufs[mib] = {
            "all_reduce": {"x": torch.zeros(n, device=dev)},
            "all_gather": {"in": torch.zeros(m, device=dev), "out": torch.zeros(n, device=dev)},
            "reduce_scatter": {"in": torch.zeros(n, device=dev), "out": torch.zeros(m, device=dev)},
            "sendrecv": {"send": torch.zeros(n, device=dev), "recv": torch.zeros(n, device=dev)},
        }
    return bufs


def op_fn(dist, op, b, nxt, prv):
    if op == "all_reduce":
        return lambda: dist.all_reduce(b["x"])
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(b["out"], b["in"])
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(b["out"], b["in"])

    def sendrecv():
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, b["send"], nxt), dist.P2POp(dist.irecv, b["recv"], prv)]):
            w.wait()

    return sendrecv


def op_bytes(op, b, world):
    """The bytes a measurement's bandwidth is of, and NCCL-tests' bus factor."""
    if op == "all_reduce":
        return b["x"].numel() * 4, 2.0 * (world - 1) / world
    if op == "all_gather":
        return b["out"].numel() * 4, (world - 1) / world
    if op == "reduce_scatter":
        return b["in"].numel() * 4, (world - 1) / world
    return b["send"].numel() * 4, 1.0


def timed(torch, dist, fn, iters, trials):
    """Per trial, the median of `iters` event-timed iterations (ms)."""
    meds = []
    for t in range(trials):
        for _ in range(WARMUP if t == 0 else 2):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda._sleep(SLEEP_CYCLES)
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for s, e in evs:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        meds.append(statistics.median(s.elapsed_time(e) for s, e in evs))
    return meds


def verify(torch, dist, op, b, fn, rank, world, prv, dev):
    """Runs the operation once on patterned inputs and checks the result."""
    total = 1000.0 * sum(range(world))
    if op == "all_reduce":
        n = b["x"].numel()
        b["x"].copy_(pattern(torch, n, 1000.0 * rank, dev))
        fn()
        ok = torch.equal(b["x"], pattern(torch, n, 0, dev).mul_(world).add_(total))
        b["x"].zero_()  # the timed runs double it otherwise
        return ok
    if op == "all_gather":
        m = b["in"].numel()
        b["in"].copy_(pattern(torch, m, 1000.0 * rank, dev))
        fn()
        out = b["out"].view(world, m)
        return all(torch.equal(out[r], pattern(torch, m, 1000.0 * r, dev)) for r in range(world))
    if op == "reduce_scatter":
        m = b["out"].numel()
        b["in"].copy_(pattern(torch, m * world, 1000.0 * rank, dev))
        fn()
        want = pattern(torch, m * world, 0, dev).mul_(world).add_(total).view(world, m)[rank]
        return torch.equal(b["out"], want)
    n = b["send"].numel()
    b["send"].copy_(pattern(torch, n, 1000.0 * rank, dev))
    b["recv"].zero_()
    fn()
    return torch.equal(b["recv"], pattern(torch, n, 1000.0 * prv, dev))


def measure(torch, dist, op, b, iters, trials, rank, world, nxt, prv, dev):
    """One operation on one memory at one size: the trials' medians (ms),
    whether the result was right, and a line for the log."""
    fn = op_fn(dist, op, b, nxt, prv)
    meds = timed(torch, dist, fn, iters, trials)
    good = bool(verify(torch, dist, op, b, fn, rank, world, prv, dev))
    nbytes, factor = op_bytes(op, b, world)
    ms = statistics.median(meds)
    line = "%8.3f ms (trials %s), busbw %7.1f GB/s (this rank), result %s" % (
        ms, " ".join("%.3f" % t for t in meds), nbytes / (ms * 1e-3) * factor / 1e9, "right" if good else "WRONG")
    return meds, good, line


def overlapping(segs, lo, hi):
    """How many of the (address, bytes) segments [lo, hi) touches."""
    return sum(1 for a, n in segs if a < hi and lo < a + n)


def covered(segs, lo, hi):
    """Whether [lo, hi) lies inside the segments (in address order; a buffer
    may span adjacent ones)."""
    at = lo
    for a, n in segs:
        if at >= hi:
            break
        if a <= at < a + n:
            at = a + n
    return at >= hi


def pool_segments(pool):
    return [(s["address"], s["total_size"]) for s in pool.snapshot() if tuple(s.get("segment_pool_id", pool.id)) == tuple(pool.id)]


def run(out, sizes, iters, trials):
    rank, local, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    if world < 2:
        say(rank, "SKIP nccl_reg_gpu: %d process (run it with --nproc_per_node=2)" % world)
        return 0
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    p_init = log_pos()
    # device_id: the communicator is made now (register_mem_pool needs it).
    dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=180))
    dist.barrier()
    backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
    missing = [a for a in ("register_mem_pool", "deregister_mem_pool", "mem_allocator") if not hasattr(backend, a)]
    if missing:
        say(rank, "SKIP nccl_reg_gpu: PyTorch %s's NCCL backend has no %s" % (torch.__version__, ", ".join(missing)))
        dist.destroy_process_group()
        return 0
    import somalloc
    import somalloc.torch

    version = nccl_version(torch)
    nccl = ".".join(map(str, version)) if version else "unknown"
    say(rank, "torch %s, NCCL %s, somalloc %s, %d ranks on %s; NCCL_NVLS_ENABLE=%s NCCL_DEBUG=%s NCCL_DEBUG_SUBSYS=%s; sizes %s MiB, %d trials x %d iterations" % (
        torch.__version__, nccl, somalloc.__version__, world, torch.cuda.get_device_name(dev), os.environ.get("NCCL_NVLS_ENABLE"),
        os.environ.get("NCCL_DEBUG"), os.environ.get("NCCL_DEBUG_SUBSYS"), ",".join(map(str, sizes)), trials, iters))
    check(rank, "NCCL_NVLS_ENABLE=0 in this process (NVLink multicast off)", os.environ.get("NCCL_NVLS_ENABLE") == "0")

    # The pools and every buffer, all live at once (their addresses apart).
    pools = {
        # Whole blocks: NCCL before 2.29.2 registers only a buffer that one
        # physical allocation holds (PyTorch 2.11's wheel has NCCL 2.28).
        "b": somalloc.torch.mem_pool("pool:vmm,arena_whole_blocks:on"),
        "a": somalloc.torch.mem_pool("pool:vmm,arena_whole_blocks:on"),
        "c": torch.cuda.MemPool(backend.mem_allocator),
    }
    bufs = {"d": make_buffers(torch, dev, sizes, world)}
    for key in ("b", "c", "a"):
        with torch.cuda.use_mem_pool(pools[key]):
            bufs[key] = make_buffers(torch, dev, sizes, world)
    torch.cuda.synchronize()
    st = somalloc.stats(local)
    chunks = somalloc.segments(local)
    say(rank, "somalloc: arena_enabled %d, %d chunks mapped (%d MiB), live %d MiB" % (
        st.get("arena_enabled", 0), len(chunks), sum(n for _, n in chunks) // MIB, st["live_bytes"] // MIB))
    spans = {}
    for key in ("a", "b"):
        segs = pool_segments(pools[key])
        spans[key] = {"segments": len(segs), "segment_chunks": [overlapping(chunks, a, a + n) for a, n in segs],
                      "buffers": {"%s %d MiB %s" % (op, mib, name): overlapping(chunks, t.data_ptr(), t.data_ptr() + t.numel() * 4)
                                  for mib, ops in bufs[key].items() for op, b in ops.items() for name, t in b.items()}}
    inside = all(covered(chunks, t.data_ptr(), t.data_ptr() + t.numel() * 4)
                 for key in ("a", "b") for ops in bufs[key].values() for b in ops.values() for t in b.values())
    check(rank, "the somalloc pools' buffers lie in the arena's chunks (somalloc.segments())", st.get("arena_enabled") and inside,
          "arena_enabled %d" % st.get("arena_enabled", 0))
    sc = spans["a"]["segment_chunks"]
    say(rank, "(a): %d PyTorch segments to register; %d of them over more than one arena chunk (most: %d chunks); buffers over more than one chunk: %s" % (
        len(sc), sum(1 for n in sc if n > 1), max(sc or [0]),
        ", ".join("%s (%d)" % (k, n) for k, n in spans["a"]["buffers"].items() if n > 1) or "none"))
    say(rank, "(c): %d PyTorch segments to register (one ncclMemAlloc each)" % len(pool_segments(pools["c"])))

    # NCCL 2.27 and earlier register (IPC) a buffer over several physical
    # allocations as if it were one (the peer maps the first one only); 2.28
    # skips such a buffer; 2.29 maps them all. Where NCCL is older than 2.28
    # (or its version unknown), (a)'s measurements of a buffer over several
    # chunks are left out rather than risk an illegal address; decided from
    # every rank's buffers, so that every rank leaves out the same ones.
    leave_out = set()
    if version is None or version < (2, 28, 0):
        every_spans = [None] * world
        dist.all_gather_object(every_spans, spans["a"]["buffers"])
        for mib in sizes:
            for op in OPS:
                names = [n for n in bufs["a"][mib][op]]
                if max(sp["%s %d MiB %s" % (op, mib, n)] for sp in every_spans for n in names) > 1:
                    leave_out.add((op, mib))
        if leave_out:
            say(rank, "NCCL %s: (a) left out where a buffer lies over several arena chunks: %s" % (
                nccl, ", ".join("%s %d MiB" % k for k in sorted(leave_out))))

    phases = {"init": (p_init, log_pos())}
    for key in ("c", "a"):
        p0 = log_pos()
        try:
            backend.register_mem_pool(pools[key])
            err = None
        except Exception as e:  # reported; the measurement goes on unregistered
            err = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        torch.cuda.synchronize()
        phases["register " + key] = (p0, log_pos())
        check(rank, "register_mem_pool accepted %s" % dict(CONFIGS)[key], err is None, err or "")

    times, correct = {}, {}
    partial = os.path.join(out, "nccl-reg-rank%d.json" % rank)
    for key, title in CONFIGS:
        say(rank, "== %s" % title)
        for mib in sizes:
            for op in OPS:
                k = "%s %s %d" % (key, op, mib)
                if key == "a" and (op, mib) in leave_out:
                    times[k], correct[k] = None, True
                    say(rank, "%s %-14s %4d MiB: left out (NCCL %s, buffer over several chunks)" % (key, op, mib, nccl))
                    continue
                p0 = log_pos()
                times[k], correct[k], line = measure(torch, dist, op, bufs[key][mib][op], iters, trials, rank, world, nxt, prv, dev)
                torch.cuda.synchronize()
                phases[k] = (p0, log_pos())
                say(rank, "%s %-14s %4d MiB: %s" % (key, op, mib, line))
        # What this rank has so far, should a later measurement end the run.
        with open(partial, "w") as f:
            json.dump({"rank": rank, "times_ms": times, "correct": correct}, f, indent=1)

    # Registration undone before the pools go.
    for key in ("a", "c"):
        try:
            backend.deregister_mem_pool(pools[key])
        except Exception as e:  # reported only
            say(rank, "deregister_mem_pool(%s) raised %s: %s" % (key, type(e).__name__, e))
    torch.cuda.synchronize()

    # Every rank's figures and its log's verdicts, to rank 0.
    mine = {"times": times, "correct": correct, "paths": {k: classify(log_lines(*p)) for k, p in phases.items()},
            "init_lines": [ln for ln in log_lines(*phases["init"]) if re.search(r"NVLS|version|NCCL_", ln) and "|" not in ln][:12],
            "nvls_algo": sorted({ln for k, p in phases.items() for ln in log_lines(*p) if re.search(r"Algo NVLS", ln)})[:4]}
    every = [None] * world
    dist.all_gather_object(every, mine)
    report(rank, world, sizes, trials, iters, every, spans, nccl, torch.__version__, out)
    del bufs, pools
    dist.barrier()
    dist.destroy_process_group()
    passed = sum(results)
    say(rank, "%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if passed == len(results) else 1


def report(rank, world, sizes, trials, iters, every, spans, nccl, torch_version, out):
    def ms(key):
        """Median over the trials of the larger rank's median (None where
        it was left out)."""
        if any(e["times"][key] is None for e in every):
            return None
        per_trial = [max(e["times"][key][t] for e in every) for t in range(trials)]
        return statistics.median(per_trial)

    def path(key):
        if key not in every[0]["paths"]:
            return "left out"
        ps = {e["paths"][key]["path"] for e in every}
        return ps.pop() if len(ps) == 1 else "/".join(sorted(ps))

    nbytes_of = {}
    for mib in sizes:
        m = mib * MIB // 4 // world
        nbytes_of[("all_reduce", mib)] = (m * world * 4, 2.0 * (world - 1) / world)
        nbytes_of[("all_gather", mib)] = (m * world * 4, (world - 1) / world)
        nbytes_of[("reduce_scatter", mib)] = (m * world * 4, (world - 1) / world)
        nbytes_of[("sendrecv", mib)] = (m * world * 4, 1.0)

    table, missed = [], []
    for op in OPS:
        for mib in sizes:
            row = {"op": op, "mib": mib}
            nbytes, factor = nbytes_of[(op, mib)]
            for key, _ in CONFIGS:
                k = "%s %s %d" % (key, op, mib)
                t = ms(k)
                row[key] = {"ms": t, "busbw_gbs": nbytes / (t * 1e-3) * factor / 1e9 if t else None, "path": path(k),
                            "algos": sorted({a for e in every for a in e["paths"].get(k, {}).get("algos", [])}),
                            "correct": all(e["correct"][k] for e in every)}
            # The arena chunks under the buffers NCCL would register for this
            # operation (its output; both for send/receive).
            names = ("send", "recv") if op == "sendrecv" else ("x",) if op == "all_reduce" else ("out",)
            row["a_chunks"] = max(spans["a"]["buffers"].get("%s %d MiB %s" % (op, mib, n), 0) for n in names)
            row["a_over_c"] = row["a"]["busbw_gbs"] / row["c"]["busbw_gbs"] if row["a"]["busbw_gbs"] else None
            if row["a_over_c"] is None:
                missed.append("%s %d MiB (not measured)" % (op, mib))
            elif row["a_over_c"] < TARGET:
                missed.append("%s %d MiB (%.3f)" % (op, mib, row["a_over_c"]))
            table.append(row)

    say(rank, "")
    say(rank, "bus bandwidth, GB/s (median over %d trials of the larger rank's median of %d iterations); path: NCCL's REG lines for (a) and (c)" % (trials, iters))
    def num(x, f):
        return f % x if x is not None else "-"

    say(rank, "%-14s %6s %9s %9s %9s %9s %7s %-16s %6s %-16s %s" % ("operation", "MiB", "(a)", "(b)", "(c)", "(d)", "(a)/(c)", "path (a)", "chunks", "path (c)", "algo/proto"))
    for row in table:
        say(rank, "%-14s %6d %9s %9s %9s %9s %7s %-16s %6d %-16s %s" % (
            row["op"], row["mib"], num(row["a"]["busbw_gbs"], "%.1f"), num(row["b"]["busbw_gbs"], "%.1f"), num(row["c"]["busbw_gbs"], "%.1f"),
            num(row["d"]["busbw_gbs"], "%.1f"), num(row["a_over_c"], "%.3f"), row["a"]["path"], row["a_chunks"], row["c"]["path"],
            ",".join(row["d"]["algos"]) or "-"))
    say(rank, "(a) somalloc registered, (b) somalloc not registered, (c) ncclMemAlloc registered, (d) PyTorch's caching allocator not registered; "
              "sizes: all_gather's output, reduce_scatter's input, send/receive each direction; chunks: the arena chunks (physical "
              "allocations) under (a)'s buffer that NCCL would register; algo/proto: NCCL's TUNING line (rank 0; none for send/receive)")
    say(rank, "NCCL before 2.29 registers (IPC) only a buffer that lies in one physical allocation: for one over several chunks "
              "ncclIpcLocalRegisterBuffer returns without a line, so such a buffer shows as 'not registered' with no REG line; "
              "NCCL 2.29 maps every chunk (multi-segment registration). Ring all_reduce in place and reduce_scatter "
              "(without CollNet) have no IPC-registered path at all.")

    # Which operations took the registered path, and the debug lines that say so.
    taken = {}
    for key in ("a", "c"):
        for op in OPS:
            got = [mib for mib in sizes if path("%s %s %d" % (key, op, mib)) == "registered"]
            if got:
                taken.setdefault(key, []).append("%s %s MiB" % (op, ",".join(map(str, got))))
    if taken:
        say(rank, "nccl-reg registered path (zero-copy) with NVLS off: %s" % "; ".join(
            "%s: %s" % (k, ", ".join(v)) for k, v in sorted(taken.items())))
    else:
        say(rank, "nccl-reg registered path: none - no operation took NCCL's registered (zero-copy) path with NVLS off, on (a) or (c); NCCL's lines follow")
    r0 = every[0]
    say(rank, "NCCL's lines at init (rank 0): %s" % ("" if r0["init_lines"] else "none matched"))
    for ln in r0["init_lines"]:
        say(rank, "    " + ln)
    for key in ("c", "a"):
        reg = r0["paths"].get("register " + key, {})
        say(rank, "register_mem_pool(%s), rank 0: %d REG lines%s" % (key, reg.get("reg_lines", 0), "" if reg.get("sample") else ""))
        for ln in reg.get("sample", []):
            say(rank, "    " + ln)
        for op in OPS:
            # The largest size's lines (where a registered path is likeliest).
            for mib in sorted(sizes, reverse=True):
                p = r0["paths"].get("%s %s %d" % (key, op, mib))
                if p is None:
                    continue
                if p["sample"] or mib == min(sizes):
                    say(rank, "  %s %s %d MiB, rank 0: %s (%d registered, %d failed of %d REG lines; %s)" % (
                        key, op, mib, p["path"], p["ok"], p["failed"], p["reg_lines"], ",".join(p["algos"]) or "no TUNING line"))
                    for ln in p["sample"]:
                        say(rank, "      " + ln)
                    if not p["sample"]:
                        say(rank, "      no REG line: NCCL did not look the buffer up for this operation and algorithm")
                    break
    if missed:
        say(rank, "nccl-reg target (a)/(c) >= %.2f at every size and operation: MISSED at %s" % (TARGET, ", ".join(missed)))
    else:
        say(rank, "nccl-reg target (a)/(c) >= %.2f at every size and operation: met" % TARGET)

    for key, title in CONFIGS:
        for op in OPS:
            bad = [mib for mib in sizes if not all(e["correct"]["%s %s %d" % (key, op, mib)] for e in every)]
            check(rank, "%s: %s results right at every size" % (title, op), not bad, ("wrong at %s MiB" % bad) if bad else "")
    nvls = sorted({ln for e in every for ln in e["nvls_algo"]})
    check(rank, "NCCL chose no NVLS algorithm (NVLink multicast off)", not nvls, "; ".join(nvls[:2]))
    if rank == 0:
        with open(os.path.join(out, "nccl-reg.json"), "w") as f:
            json.dump({"torch": torch_version, "nccl": nccl, "world_size": world, "sizes_mib": sizes, "trials": trials, "iters": iters,
                       "target": TARGET, "table": table, "registered_path": taken, "missed": missed, "spans": spans,
                       "paths_rank0": r0["paths"], "init_lines": r0["init_lines"]}, f, indent=1)


def main():
    argv = sys.argv[1:]
    why = skip_reason()
    if why is not None:
        print("SKIP nccl_reg_gpu: %s" % why, flush=True)
        return 0
    if ARGS is None:
        return usage()
    if "LOCAL_RANK" not in os.environ:
        return relaunch(argv)
    return run(*ARGS)


if __name__ == "__main__":
    sys.exit(main())
