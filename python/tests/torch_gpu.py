"""somalloc under PyTorch, on a GPU: a plain script (no pytest needed) that
prints one line per check and ends with "N passed, N failed".

    python3 python/tests/torch_gpu.py [CONF]

CONF is somalloc's configuration (default: the defaults, cache tier on).
Checks: tensors of many sizes on PyTorch's default stream (the legacy
default stream, handle 0), on side streams and on the per-thread default
stream, with their contents; several devices where there are; a
``torch.cuda.graph`` capture of a training step replayed against eager
results; and an allocation larger than the device, last.
"""

import copy
import os
import sys

import torch

import somalloc
import somalloc.torch

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)


def run(name, fn):
    try:
        fn()
    except Exception as e:  # a check that raised is a failure, not a crash
        check(name, False, "raised %s: %s" % (type(e).__name__, e))


SIZES = [1, 3, 255, 256, 1000, 4096, 65535, 1 << 20, (3 << 20) + 7, 17 << 20, 100 << 20]


def many_sizes_on(stream_name, stream, device):
    """Tensors of every size live at once on `stream`, each filled with its
    own value; then half freed and reallocated; every tensor must still hold
    its value (no block handed out twice, none reused too early)."""
    with torch.cuda.device(device), torch.cuda.stream(stream):
        live = []
        for rnd in range(3):
            for i, n in enumerate(SIZES):
                v = (rnd * len(SIZES) + i) % 120 + 1
                t = torch.full((n,), v, dtype=torch.uint8, device="cuda")
                live.append((t, v))
            # Free every other tensor, allocate again over the gaps.
            live = live[::2]
        for t, v in live:
            t.add_(1)
        bad = [(t.numel(), v) for t, v in live if not bool((t == v + 1).all())]
        stream.synchronize()
    check("%s (device %d): %d tensors of %d sizes keep their contents" % (stream_name, device, len(live), len(SIZES)), not bad, str(bad[:3]))


def test_streams():
    dev = torch.cuda.current_device()
    default = torch.cuda.current_stream()
    check("PyTorch's default stream is the legacy default stream (handle 0)", default.cuda_stream == 0, hex(default.cuda_stream))
    many_sizes_on("default stream", default, dev)
    side = [torch.cuda.Stream(), torch.cuda.Stream()]
    for i, s in enumerate(side):
        many_sizes_on("side stream %d" % i, s, dev)
    # The per-thread default stream, handed to PyTorch as an external stream.
    per_thread = torch.cuda.ExternalStream(0x2)
    many_sizes_on("per-thread default stream (0x2)", per_thread, dev)
    # Work across streams with explicit ordering: produced on a side stream,
    # consumed on the default stream after a wait.
    s = side[0]
    with torch.cuda.stream(s):
        a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    default.wait_stream(s)
    total = float(a.sum().item())
    check("a tensor made on a side stream, used on the default stream after wait_stream", total == float((1 << 20) * ((1 << 20) - 1) // 2))
    st = somalloc.stats(dev)
    check("statistics count the allocations", st["allocations"] > 100 and st["failed_allocations"] == 0, str({k: st[k] for k in ("allocations", "frees", "failed_allocations", "failed_frees")}))
    if st["cache_enabled"]:
        check("the cache tier serves repeats (hits), on the default and side streams", st["cache_hits"] > 0 and st["cache_streams"] >= 3, "hits %d, streams %d" % (st["cache_hits"], st["cache_streams"]))
    check("no refused frees", st["failed_frees"] == 0, str(st["failed_frees"]))


def test_devices():
    n = torch.cuda.device_count()
    if n < 2:
        print("SKIP several devices: this machine has %d GPU" % n, flush=True)
        return
    for d in range(n):
        many_sizes_on("device %d default stream" % d, torch.cuda.default_stream(d), d)
        with torch.cuda.device(d):
            many_sizes_on("device %d side stream" % d, torch.cuda.Stream(), d)
    x = torch.arange(1000, device="cuda:0", dtype=torch.float32)
    y = x.to("cuda:1")
    check("a copy between devices", torch.equal(y.cpu(), x.cpu()))
    del x, y
    check("no refused frees across devices", all(somalloc.stats(d)["failed_frees"] == 0 for d in range(n)))


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).cuda()


def test_graph_training_step():
    """A training step (forward, backward, Adam) captured with
    torch.cuda.graph and replayed, against the same steps run eagerly on a
    copy of the model: parameters bitwise equal after every step."""
    eager = make_model()
    graphed = copy.deepcopy(eager)
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-3, capturable=True)
    opt_g = torch.optim.Adam(graphed.parameters(), lr=1e-3, capturable=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [(torch.randn(64, 256, device="cuda", generator=gen), torch.randn(64, 10, device="cuda", generator=gen)) for _ in range(8)]
    loss_fn = torch.nn.MSELoss()
    static_x = torch.zeros(64, 256, device="cuda")
    static_y = torch.zeros(64, 10, device="cuda")

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Warm-up on a side stream (as PyTorch's docs ask), for both models, on
    # the same batch, so their states stay equal.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in batches[:3]:
            step(eager, opt_e, x, y)
            static_x.copy_(x)
            static_y.copy_(y)
            step(graphed, opt_g, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt_g.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(graphed(static_x), static_y)
        static_loss.backward()
        opt_g.step()
    captured = somalloc.stats()["cache_captured"]
    check("the capture's allocations went to the pool as graph memory", captured > 0 or not somalloc.stats()["cache_enabled"], "cache_captured %d" % captured)
    same = True
    worst = 0.0
    for x, y in batches[3:]:
        le = step(eager, opt_e, x, y)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        same = same and torch.equal(le, static_loss)
        for pe, pg in zip(eager.parameters(), graphed.parameters()):
            worst = max(worst, float((pe - pg).abs().max().item()))
    torch.cuda.synchronize()
    check("graph replays of a training step equal the eager steps (loss and parameters)", same and worst == 0.0, "loss equal %s, largest parameter difference %g" % (same, worst))
    del g, static_loss
    torch.cuda.synchronize()
    st = somalloc.stats()
    check("no refused frees after the graph is gone", st["failed_frees"] == 0, str(st["failed_frees"]))


def test_out_of_memory():
    """An allocation larger than the device: PyTorch's own OutOfMemoryError
    (through the raising entry point that enable() gave PyTorch, built in or
    compiled), counted and explained by somalloc, and the allocator still
    serves afterwards."""
    free, total = torch.cuda.mem_get_info()
    before = somalloc.stats()["failed_allocations"]
    name = "an allocation larger than the device is torch.cuda.OutOfMemoryError"
    check("enable() gave PyTorch a raising entry point", somalloc.torch.raises_oom(), str(somalloc.torch.oom_route()))
    try:
        t = torch.empty(total * 2, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        text = str(e).splitlines()[0]
        check(name, "somalloc: out of memory" in text and str(total * 2) in text, text[:160])
    except RuntimeError as e:
        check(name, False, "RuntimeError instead: %s" % str(e)[:200])
    else:
        check(name, False, "PyTorch returned a tensor with data_ptr %#x" % t.data_ptr())
        del t  # never touched; dropping it frees NULL with its size (refused, counted)
    why = somalloc.torch.last_error()
    failed = somalloc.stats()["failed_allocations"] - before
    check("somalloc refused it and said why", failed == 1 and "out of memory" in why, "%d, %s" % (failed, why[:120]))
    x = torch.arange(1 << 20, device="cuda", dtype=torch.int64)
    check("allocations go on after it", int(x.sum()) == (1 << 20) * ((1 << 20) - 1) // 2)


def main():
    conf = sys.argv[1] if len(sys.argv) > 1 else None
    # Which raising entry point to ask for ("built-in", "compiled"; default:
    # whichever enable() takes).
    route = os.environ.get("SOMALLOC_TEST_RAISE_OOM") or True
    print("torch %s, somalloc %s (%s), conf %r" % (torch.__version__, somalloc.__version__, somalloc.backend(), conf), flush=True)
    somalloc.torch.enable(conf, raise_oom=route)
    print("out of memory raises through the %s entry point" % somalloc.torch.oom_route(), flush=True)
    check("somalloc is PyTorch's allocator", somalloc.torch.enabled() and torch.cuda.memory.get_allocator_backend() == "pluggable" if hasattr(torch.cuda.memory, "get_allocator_backend") else somalloc.torch.enabled())
    run("streams", test_streams)
    run("devices", test_devices)
    run("graph", test_graph_training_step)
    run("out of memory", test_out_of_memory)
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed), flush=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
