"""somalloc under one region of a PyTorch program, through
``torch.cuda.MemPool``, on a GPU: a plain script (no pytest needed) that
prints one line per check and ends with "N passed, N failed", or one SKIP
line where there is no GPU (or no MemPool in this PyTorch).

    python3 python/tests/mempool_gpu.py [CONF]

CONF is somalloc's configuration (default: the defaults). somalloc is never
made the process's allocator here: a small network's training steps run on
PyTorch's allocator, then on somalloc inside ``torch.cuda.use_mem_pool``,
then on PyTorch's again, each against the same steps on the CPU. Checks:
the results of every region match the CPU's; the region's memory is
somalloc's (its allocations counted, PyTorch's segments of the pool, from
``pool.snapshot()``, are exactly somalloc's live allocations, and
``torch.cuda.memory_stats()`` counts them); the tensors outside the region
are not somalloc's; PyTorch's own ``OutOfMemoryError`` for a request larger
than the device inside the region; ``Tensor.record_stream`` keeps a block
pending while the stream it was recorded on still runs; somalloc's counters
under PyTorch's names, and their peak reset; everything given back to
somalloc once the pool is gone.
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


def steps(torch, device, seed, n=3):
    """n training steps of a small network on `device`, from the
    same seed: the final parameters and the losses."""
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model = model.to(device)
    # SGD with momentum: its steps are linear in the gradients, so the GPU's
    # rounding stays as small in the parameters as in the gradients (Adam's
    # first steps are about the gradients' signs, which rounding can flip
    # where a gradient is near 0).
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(n):
        x = torch.randn(512, 64, generator=g).to(device)
        y = torch.randn(512, 8, generator=g).to(device)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return [p.detach().to("cpu") for p in model.parameters()], losses, model


def close(torch, a, b):
    (pa, la), (pb, lb) = a, b
    worst = max(float((x - y).abs().max()) for x, y in zip(pa, pb))
    loss = max(abs(x - y) for x, y in zip(la, lb))
    return worst < 1e-4 and loss < 1e-4, "largest parameter difference %.2g, loss %.2g" % (worst, loss)


def test_region(torch, somalloc):
    cpu = {seed: steps(torch, "cpu", seed)[:2] for seed in (1, 2, 3)}
    before = somalloc.stats()
    out1 = steps(torch, "cuda", 1)
    check("before the region, on PyTorch's allocator: results match the CPU's", *close(torch, out1[:2], cpu[1]))
    check("and somalloc allocated nothing", somalloc.stats()["allocations"] == before["allocations"])
    outside_ptr = out1[2][0].weight.data_ptr()

    pool = somalloc.torch.mem_pool()
    with torch.cuda.use_mem_pool(pool):
        out2 = steps(torch, "cuda", 2)
        kept = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    check("inside the region, on somalloc: results match the CPU's", *close(torch, out2[:2], cpu[2]))
    st = somalloc.stats()
    check("somalloc.stats()['allocations'] > 0 after the region", st["allocations"] > before["allocations"], "allocations %d" % st["allocations"])
    # The pool's own segments (a snapshot of a pool may list others too).
    segs = [(s["address"], s["total_size"]) for s in pool.snapshot() if tuple(s.get("segment_pool_id", pool.id)) == tuple(pool.id)]
    check(
        "the pool's segments (pool.snapshot()) are exactly somalloc's live allocations",
        len(segs) > 0 and len(segs) == st["live_allocations"] and sum(n for _, n in segs) == st["live_bytes"],
        "%d segments of %d bytes; somalloc: %d live, %d bytes" % (len(segs), sum(n for _, n in segs), st["live_allocations"], st["live_bytes"]),
    )
    inside = lambda p: any(a <= p < a + n for a, n in segs)  # noqa: E731
    check(
        "the region's tensors lie in those segments, the ones made before it do not",
        inside(out2[2][0].weight.data_ptr()) and inside(kept.data_ptr()) and not inside(outside_ptr),
    )
    ms = torch.cuda.memory_stats()
    check(
        "torch.cuda.memory_stats() works and counts the segments",
        ms.get("segment.all.current", 0) >= len(segs) and ms.get("reserved_bytes.all.current", 0) >= st["live_bytes"],
        "segment.all.current %d, reserved %d" % (ms.get("segment.all.current", -1), ms.get("reserved_bytes.all.current", -1)),
    )
    sm = somalloc.torch.memory_stats()
    check(
        "somalloc.torch.memory_stats(): the segments under PyTorch's names",
        sm["allocated_bytes.all.current"] == st["live_bytes"] and sm["allocation.all.current"] == st["live_allocations"] and sm["reserved_bytes.all.current"] >= st["live_bytes"],
        str({k: sm[k] for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "allocation.all.current", "reserved_bytes.all.current")}),
    )

    out3 = steps(torch, "cuda", 3)
    check("after the region, on PyTorch's allocator again: results match the CPU's", *close(torch, out3[:2], cpu[3]))
    check("and its tensors are not somalloc's", not inside(out3[2][0].weight.data_ptr()))
    torch.cuda.synchronize()
    return pool, kept, out2


def test_out_of_memory(torch, somalloc, pool):
    free, total = torch.cuda.mem_get_info()
    failed = somalloc.stats()["failed_allocations"]
    name = "in the region, a request larger than the device is PyTorch's own OutOfMemoryError"
    try:
        with torch.cuda.use_mem_pool(pool):
            t = torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        check(name, False, "a tensor at %#x" % t.data_ptr())
    except torch.OutOfMemoryError as e:
        check(name, True, str(e).splitlines()[0][:140])
    check("somalloc refused it and counted it", somalloc.stats()["failed_allocations"] > failed)
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(1 << 20, device="cuda")
    check("allocations in the region go on after it", float(x.sum()) == float(1 << 20))


def test_record_stream(torch, somalloc, pool):
    """A block used on a side stream, recorded there and dropped while the
    side stream still runs: PyTorch's caching allocator keeps it pending
    (active_pending_free) rather than handing it out again."""
    side = torch.cuda.Stream()
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(4 * MIB // 4, device="cuda")
        ptr = x.data_ptr()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time
            y = x * 2
        x.record_stream(side)
        del x
        states = [b["state"] for s in pool.snapshot() for b in s["blocks"] if b["address"] == ptr]
        z = torch.zeros(4 * MIB // 4, device="cuda")
        reused = z.data_ptr() == ptr
    side.synchronize()
    check("record_stream: the dropped block is pending while the side stream runs", states == ["active_pending_free"], str(states))
    check("and a new allocation of its size gets another block", not reused)
    check("the side stream read the right values", float(y.sum()) == 2.0 * (4 * MIB // 4))


def test_peaks(torch, somalloc):
    somalloc.torch.reset_peak_memory_stats()
    now = somalloc.torch.memory_allocated()
    check("reset_peak_memory_stats(): the peak is the current value", somalloc.torch.max_memory_allocated() == now, "%d %d" % (somalloc.torch.max_memory_allocated(), now))


def test_given_back(torch, somalloc, held):
    held.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    st = somalloc.stats()
    check("with the pool and its tensors gone and PyTorch's cache emptied, somalloc holds no allocation", st["live_allocations"] == 0 and st["failed_frees"] == 0, "live %d, failed frees %d" % (st["live_allocations"], st["failed_frees"]))


def main():
    conf = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        import torch
    except ImportError as e:
        print("SKIP mempool_gpu: no PyTorch (%s)" % e)
        return 0
    if not torch.cuda.is_available():
        print("SKIP mempool_gpu: no GPU")
        return 0
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        print("SKIP mempool_gpu: PyTorch %s has no torch.cuda.MemPool" % torch.__version__)
        return 0
    import somalloc
    import somalloc.torch

    print("torch %s, somalloc %s (%s), conf %r" % (torch.__version__, somalloc.__version__, somalloc.backend(), conf), flush=True)
    alloc = somalloc.torch.allocator(conf)
    check("allocator() returns one object, not installed", somalloc.torch.allocator() is alloc and not somalloc.torch.enabled())
    held = []

    def region():
        pool, kept, out2 = test_region(torch, somalloc)
        held.extend([pool, kept, out2])

    run("region", region)
    if held:
        # The pool is reached through `held` only, so that the last check
        # can let go of it.
        run("out of memory", lambda: test_out_of_memory(torch, somalloc, held[0]))
        run("record_stream", lambda: test_record_stream(torch, somalloc, held[0]))
        run("peaks", lambda: test_peaks(torch, somalloc))
        run("given back", lambda: test_given_back(torch, somalloc, held))
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed), flush=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
