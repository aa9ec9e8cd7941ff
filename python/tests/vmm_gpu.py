"""somalloc's virtual-memory arena (``pool:vmm``) under PyTorch, on a GPU: a
plain script (no pytest needed) that prints one line per check and ends with
"N passed, N failed", or one SKIP line where there is no GPU.

    python3 python/tests/vmm_gpu.py [CONF]

CONF is somalloc's configuration (default: ``pool:vmm``; it must name
``pool:vmm``, e.g. ``pool:vmm,cache:off``). Checks: the arena serves the
device; tensors of many sizes on the default and a side stream keep their
contents; every live tensor lies inside the arena's segments
(``somalloc.segments()``); a ``torch.cuda.graph`` capture (served by the pool
behind the arena) replays right; ``somalloc.empty_cache()`` brings the
arena's mapped bytes down to at most 1.1 x the live bytes + 20 MiB.
"""

import sys

MIB = 1 << 20
results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)


def run(name, fn):
    try:
        fn()
    except Exception as e:  # a check that raised is a failure, not a crash
        check(name, False, "raised %s: %s" % (type(e).__name__, e))


def inside(segments, address, nbytes):
    """Whether [address, address + nbytes) lies inside the segments (in
    address order; a tensor may span adjacent ones)."""
    at, end = address, address + nbytes
    for base, size in segments:
        if at >= end:
            break
        if base <= at < base + size:
            at = base + size
    return at >= end


def arena_line(st):
    keys = ("live_bytes", "arena_mapped_bytes", "arena_mapped_peak_bytes", "arena_idle_bytes", "arena_maps", "arena_unmaps", "arena_pool_allocations")
    return ", ".join("%s %d" % (k, st[k]) for k in keys)


def test_tensors(torch, somalloc):
    sizes = [1, 255, 4096, MIB, 3 * MIB + 7, 17 * MIB, 64 * MIB, 100 * MIB]
    side = torch.cuda.Stream()
    live = []
    for name, stream in [("default stream", torch.cuda.current_stream()), ("side stream", side)]:
        with torch.cuda.stream(stream):
            for i, n in enumerate(sizes):
                v = (len(live) + i) % 120 + 1
                live.append((torch.full((n,), v, dtype=torch.uint8, device="cuda"), v, name))
    torch.cuda.synchronize()
    bad = [(t.numel(), where) for t, v, where in live if not bool((t == v).all())]
    check("%d tensors on two streams keep their contents" % len(live), not bad, str(bad[:3]))
    st = somalloc.stats()
    check("the arena holds them", st["arena_mapped_bytes"] >= st["live_bytes"] > 0 and st["arena_maps"] > 0, arena_line(st))
    check("the arena served every tensor", st["arena_pool_allocations"] == 0, arena_line(st))
    check("fragmentation in parts per million", 0 <= st["arena_fragmentation_ppm"] <= 1000000, str(st["arena_fragmentation_ppm"]))
    segs = somalloc.segments()
    check("segments are (address, bytes) tuples", len(segs) > 0 and all(isinstance(s, tuple) and len(s) == 2 for s in segs), str(segs[:2]))
    check("segments add up to the mapped bytes", sum(b for _, b in segs) == st["arena_mapped_bytes"], "%d segments" % len(segs))
    outside = [t.numel() for t, _, _ in live if not inside(segs, t.data_ptr(), t.numel())]
    check("every live tensor lies inside a segment", not outside, str(outside[:4]))

    # Keep the largest and the smallest tensor of the side stream; the rest goes.
    keep = [(t, v) for t, v, where in live if where == "side stream" and t.numel() in (1, 100 * MIB)]
    del live
    torch.cuda.synchronize()
    somalloc.empty_cache()
    st = somalloc.stats()
    bound = st["live_bytes"] * 11 // 10 + 20 * MIB
    check("empty_cache gives the arena's idle chunks back (mapped <= 1.1 x live + 20 MiB = %d)" % bound, st["arena_mapped_bytes"] <= bound and st["arena_unmaps"] > 0, arena_line(st))
    segs = somalloc.segments()
    check("the kept tensors still lie inside a segment", all(inside(segs, t.data_ptr(), t.numel()) for t, _ in keep))
    check("and keep their contents", all(bool((t == v).all()) for t, v in keep))
    x = torch.ones(40 * MIB, dtype=torch.uint8, device="cuda")
    check("the arena grows again after", int(x.sum()) == 40 * MIB and inside(somalloc.segments(), x.data_ptr(), x.numel()))
    del x, keep
    torch.cuda.synchronize()


def test_graph(torch, somalloc):
    """A capture: its memory comes from the pool behind the arena (graph
    memory); replays compute what eager code does."""
    s = torch.cuda.Stream()
    static_x = torch.randn(1 << 20, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            static_y = static_x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    before = somalloc.stats()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = (static_x * 2 + 1).sin()
    ok = True
    for _ in range(3):
        x = torch.randn(1 << 20, device="cuda")
        static_x.copy_(x)
        g.replay()
        ok = ok and torch.equal(static_y, (x * 2 + 1).sin())
    torch.cuda.synchronize()
    after = somalloc.stats()
    check("graph replays equal eager results", ok)
    check("captured allocations are not counted as the pool serving for the arena", after["arena_pool_allocations"] == before["arena_pool_allocations"], arena_line(after))
    del g, static_y
    torch.cuda.synchronize()
    check("no refused frees after the graph is gone", somalloc.stats()["failed_frees"] == 0)


def main():
    conf = sys.argv[1] if len(sys.argv) > 1 else "pool:vmm"
    try:
        import torch
    except ImportError as e:
        print("SKIP vmm_gpu: no PyTorch (%s)" % e)
        return 0
    if not torch.cuda.is_available():
        print("SKIP vmm_gpu: no GPU")
        return 0
    import somalloc
    import somalloc.torch

    print("torch %s, somalloc %s (%s), conf %r" % (torch.__version__, somalloc.__version__, somalloc.backend(), conf), flush=True)
    check("the configuration names pool:vmm", "pool:vmm" in conf, conf)
    somalloc.torch.enable(conf)
    st = somalloc.stats()
    check("an arena serves the device (if not, a line on stderr says why)", st["arena_enabled"] == 1, arena_line(st))
    if st["arena_enabled"] == 1:
        run("tensors", lambda: test_tensors(torch, somalloc))
        run("graph", lambda: test_graph(torch, somalloc))
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed), flush=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
