"""somalloc's statistics under PyTorch's names, and its traces in PyTorch's
memory visualizer, on a GPU: a plain script (no pytest needed) that prints
one line per check and ends with "N passed, N failed", or one SKIP line
where there is no GPU.

    python3 python/tests/snapshot_gpu.py OUT_DIR

A child process makes somalloc PyTorch's allocator (``enable()``) with a
trace (``trace:OUT_DIR/run.trace``, backtraces on), runs a few training
steps and an allocation larger than the device, and checks
``somalloc.torch.memory_stats()`` and the functions beside it against the
tensors it holds, and the peak reset. This process then converts the trace
(``somalloc.torch.trace_to_snapshot``) and feeds the snapshot to PyTorch's
own ``torch.cuda._memory_viz``: the text views (``segsum``, which checks
that each segment's blocks add up, and ``trace``) and the HTML pages
(``trace_plot``, ``segment_plot``, written to OUT_DIR). It also takes a
snapshot of PyTorch's own allocator with its history on, and checks that
the converted one has every key PyTorch's has for segments, blocks and
trace entries.
"""

import os
import subprocess
import sys

MIB = 1 << 20
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)


def child(trace):
    import torch

    import somalloc.torch as st

    st.enable("trace:%s,trace_backtraces:on" % trace)
    base = st.memory_allocated()
    x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
    try:
        torch.cuda.memory_stats()
        check("under enable(), torch.cuda.memory_stats() raises", False, "it did not raise")
    except RuntimeError:
        check("under enable(), torch.cuda.memory_stats() raises; somalloc.torch.memory_stats() stands in", True)
    y = torch.empty(32 * MIB, dtype=torch.uint8, device="cuda")
    m = st.memory_stats()
    check("allocated_bytes.all.current counts the live tensors", m["allocated_bytes.all.current"] == base + 96 * MIB, "%d, base %d" % (m["allocated_bytes.all.current"], base))
    check("allocation.all.current counts them", m["allocation.all.current"] >= 2)
    check("reserved covers allocated", st.memory_reserved() >= st.memory_allocated())
    del x
    check("a free lowers the current, not the peak", st.memory_allocated() == base + 32 * MIB and st.max_memory_allocated() >= base + 96 * MIB)
    st.reset_peak_memory_stats()
    check("reset_peak_memory_stats(): the peak is the current again", st.max_memory_allocated() == st.memory_allocated(), "%d %d" % (st.max_memory_allocated(), st.memory_allocated()))
    z = torch.empty(16 * MIB, dtype=torch.uint8, device="cuda")
    check("and a new allocation raises it", st.max_memory_allocated() == base + 48 * MIB, str(st.max_memory_allocated() - base))
    del y, z
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(64, 256, device="cuda")), torch.randint(0, 10, (64,), device="cuda")).backward()
        opt.step()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    ooms = st.memory_stats()["num_ooms"]
    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        check("an allocation larger than the device raises", False)
    except torch.OutOfMemoryError:
        check("an allocation larger than the device raises OutOfMemoryError and counts in num_ooms", st.memory_stats()["num_ooms"] == ooms + 1)
    torch.cuda.synchronize()
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)), flush=True)
    return 0 if all(results) else 1


def parent(out):
    import torch
    from torch.cuda import _memory_viz

    import somalloc.torch as st

    trace = os.path.join(out, "run.trace")
    if os.path.exists(trace):
        os.unlink(trace)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", trace], capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    for ln in lines:
        print("child: " + ln, flush=True)
    results.extend(ln.startswith("ok") for ln in lines)
    check("the child ran to its end", p.returncode == 0 and lines, (p.stderr or "")[-400:])
    snap = st.trace_to_snapshot(trace, os.path.join(out, "run.pickle"))
    entries = snap["device_traces"][torch.cuda.current_device()]
    actions = {e["action"] for e in entries}
    check("the trace converts, with allocations, frees, segments and the refusal", {"alloc", "free_requested", "free_completed", "segment_alloc", "oom"} <= actions, str(sorted(actions)))
    check("allocations carry frames from their backtraces", any(e["frames"] for e in entries if e["action"] == "alloc"))
    text = _memory_viz.segsum(snap)
    check("_memory_viz.segsum reads it (its own checks pass)", "total_reserved" in text, text.splitlines()[-12] if text else "")
    text = _memory_viz.trace(snap)
    check("_memory_viz.trace reads it", text.count("cudaMalloc(") >= 1 and len(text.splitlines()) > len(entries) // 2, "%d lines" % len(text.splitlines()))
    for name, fn in (("trace_plot", lambda: _memory_viz.trace_plot(snap)), ("trace_plot of segments", lambda: _memory_viz.trace_plot(snap, plot_segments=True)), ("segment_plot", lambda: _memory_viz.segment_plot(snap))):
        html = fn()
        path = os.path.join(out, name.replace(" ", "_") + ".html")
        with open(path, "w") as f:
            f.write(html)
        check("_memory_viz.%s makes its page (%s)" % (name, os.path.basename(path)), "add_local_files" in html and len(html) > 1000, "%d bytes" % len(html))
    # PyTorch's own snapshot of the same kind of work, with its history on.
    torch.cuda.memory._record_memory_history(max_entries=10000)
    a = torch.empty(8 * MIB, device="cuda")
    b = torch.empty(3 * MIB, device="cuda")
    del a
    torch.cuda.synchronize()
    real = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del b
    seg_keys = set().union(*(set(s) for s in real["segments"])) if real["segments"] else set()
    block_keys = set().union(*(set(bl) for s in real["segments"] for bl in s["blocks"])) if real["segments"] else set()
    ours_seg = set().union(*(set(s) for s in snap["segments"]))
    ours_block = set().union(*(set(bl) for s in snap["segments"] for bl in s["blocks"]))
    check("every key of PyTorch's segments is in the converted ones", seg_keys <= ours_seg, "missing %s" % sorted(seg_keys - ours_seg))
    check("every key of PyTorch's blocks is in the converted ones", block_keys <= ours_block, "missing %s" % sorted(block_keys - ours_block))
    real_entries = [e for t in real["device_traces"] for e in t]
    for action in ("alloc", "free_requested", "free_completed", "segment_alloc"):
        theirs = set().union(*(set(e) for e in real_entries if e["action"] == action)) if any(e["action"] == action for e in real_entries) else set()
        ours = set().union(*(set(e) for e in entries if e["action"] == action))
        # Keys PyTorch adds for its compiler and for user annotations, which
        # a somalloc trace has no counterpart for.
        extra = {"compile_context", "user_metadata"}
        check("every key of PyTorch's %s entries is in the converted ones" % action, theirs - extra <= ours, "missing %s" % sorted(theirs - extra - ours))
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)), flush=True)
    return 0 if all(results) else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    try:
        import torch
    except ImportError as e:
        print("SKIP snapshot_gpu: no PyTorch (%s)" % e)
        return 0
    if not torch.cuda.is_available():
        print("SKIP snapshot_gpu: no GPU")
        return 0
    import somalloc

    out = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "snapshot-gpu-out")
    os.makedirs(out, exist_ok=True)
    print("torch %s, somalloc %s (%s)" % (torch.__version__, somalloc.__version__, somalloc.backend()), flush=True)
    try:
        return parent(out)
    except Exception as e:
        check("the conversion and PyTorch's visualizer", False, "raised %s: %s" % (type(e).__name__, e))
        print("%d passed, %d failed" % (sum(results), len(results) - sum(results)), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
