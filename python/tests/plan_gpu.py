"""somalloc's planned placement (plan:) under PyTorch, on a GPU: a plain
script that prints one line per check and ends with "N passed, N failed".

    python3 python/tests/plan_gpu.py record TRACE   # 3 steps under trace:TRACE
    python3 python/tests/plan_gpu.py plan TRACE     # 12 steps under plan:TRACE
    python3 python/tests/plan_gpu.py plan TRACE plan_share:0   # the streams sharing one arena
    python3 python/tests/plan_gpu.py plan TRACE plan_share:0 plan_divert:64MiB   # stalls diverted
    python3 python/tests/plan_gpu.py record TRACE trace_device:on   # with device times
    python3 python/tests/plan_gpu.py plan TRACE plan_share:device   # shared by them
    python3 python/tests/plan_gpu.py broken TRACE   # plan: of a file that is no trace
    python3 python/tests/plan_gpu.py auto TRACE     # 40 steps under plan:auto (TRACE.digest from record)

Each step trains a small network on PyTorch's default stream and another on
a side stream, keeps tensors of many sizes filled with the step's value
alive into the next step (as gradients are), checked there, and frees a
block of the side stream on the legacy stream. The planned run
must serve most allocations from its plan, keep every tensor's contents,
end the first three steps with the weights the recorded run ended with (to
the bit), and replay a captured graph as its eager run computes.

A plan that cannot be made must never make an allocation fail: the
``broken`` run configures ``plan:`` with a file that is no trace (written
at TRACE.broken), trains the same steps, and must compute what the recorded
run computed, served without the plan (``plan_status`` 2, with a reason).
The plain ``plan`` run starts it in a child process at its end and checks
it too, and that it said why on stderr once.

The ``auto`` run plans in the run itself (``plan:auto``): it must switch to
its plan at a step's start, serve most allocations after the switch from it,
keep every tensor's contents, and end the first three steps with the
recorded run's weights (the switch comes later).
"""

import json
import sys

import torch

import somalloc
import somalloc.torch

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)


SIZES = [1, 255, 4096, 65535, 1 << 20, (3 << 20) + 7, 17 << 20]


def main():
    what, trace = sys.argv[1], sys.argv[2]
    key = "trace" if what == "record" else "plan"
    extra = "".join("," + k for k in sys.argv[3:])
    source = "auto" if what == "auto" else trace
    if what == "broken":
        source = trace + ".broken"
        with open(source, "wb") as f:
            f.write(b"not a trace\n" + bytes(range(256)))
    # A plan that cannot be made raises nothing, here or at an allocation.
    somalloc.torch.enable("cache:on,%s:%s%s" % (key, source, extra))
    steps = {"record": 3, "broken": 4, "auto": 40}.get(what, 12)
    status_at = []
    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.manual_seed(0)
    nets, opts, data = [], [], []
    for s in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(s):
            net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
            nets.append(net)
            opts.append(torch.optim.AdamW(net.parameters(), lr=1e-3))
            g = torch.Generator(device="cuda").manual_seed(len(nets))
            data.append((torch.randn(128, 256, device=dev, generator=g), torch.randint(0, 10, (128,), device=dev, generator=g)))
    torch.cuda.synchronize()
    carried, bad = [], []
    digest = None
    for step in range(steps):
        # The tensors the last step left alive hold its value.
        for t, v in carried:
            if not bool((t == v).all()):
                bad.append((step, t.numel(), v))
        carried = []
        for i, s in enumerate((torch.cuda.current_stream(), side)):
            with torch.cuda.stream(s):
                opts[i].zero_grad(set_to_none=True)
                x, y = data[i]
                loss = torch.nn.functional.cross_entropy(nets[i](x), y)
                loss.backward()
                opts[i].step()
                v = (step * 7 + i) % 200 + 1
                carried += [(torch.full((n,), v, dtype=torch.uint8, device=dev), v) for n in SIZES]
                scratch = [torch.full((n,), v, dtype=torch.uint8, device=dev) for n in SIZES]
                if not all(bool((t == v).all()) for t in scratch):
                    bad.append((step, "scratch", v))
                del scratch
                if i == 1:
                    # A block of the side stream freed on the legacy stream
                    # (as a C program may): the side stream's plan waits
                    # for it before handing its slot out again.
                    ptr = somalloc._native.alloc(3 << 20, 0, side.cuda_stream)
                    somalloc._native.free(ptr, 3 << 20, 0, 0)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        status_at.append(somalloc.stats())
        if step == 2:
            digest = [float(p.double().sum()) for net in nets for p in net.parameters()]
    check("tensors of %d sizes on two streams keep their contents over %d steps" % (len(SIZES), steps), not bad, str(bad[:3]))
    digest_file = trace + ".digest"
    if what == "broken":
        broken(digest, digest_file)
    elif what == "auto":
        auto(digest, digest_file, status_at)
    elif what == "record":
        with open(digest_file, "w") as f:
            json.dump(digest, f)
        st = somalloc.stats()
        check("the recorded run allocated through somalloc", st["allocations"] > 0 and st["plan_served"] == 0)
    else:
        with open(digest_file) as f:
            recorded = json.load(f)
        check("the weights after three steps equal the recorded run's, to the bit", digest == recorded)
        st = somalloc.stats()
        share = st["plan_served"] / max(1, st["plan_served"] + st["plan_refused"])
        check(
            "most allocations came from the plan (%d served, %d refused, arena %.1f MiB)"
            % (st["plan_served"], st["plan_refused"], st["plan_arena_bytes"] / 2**20),
            st["plan_arena_bytes"] > 0 and share > 0.9,
        )
        check("no free was refused", st["failed_frees"] == 0, str(st["failed_frees"]))
        budget = [a.split(":", 1)[1] for a in sys.argv[3:] if a.startswith("plan_divert:")]
        if budget:
            cap = int(budget[0].replace("MiB", "")) << 20
            check(
                "diverted slots stay within plan_divert (%d slots, %d bytes)" % (st["plan_diverted"], st["plan_diverted_bytes"]),
                st["plan_diverted_bytes"] <= cap and (st["plan_diverted"] == 0) == (st["plan_diverted_bytes"] == 0),
            )
        else:
            check("nothing diverted without plan_divert", st["plan_diverted"] == 0 and st["plan_diverted_bytes"] == 0)
        keys = [a.split(":", 1)[0] for a in sys.argv[3:]]
        waits = "%d waits, %d passed, %d events, %d timed, %.2f ms" % (
            st["plan_waits"], st["plan_waits_passed"], st["plan_wait_events"], st["plan_waits_timed"],
            st["plan_wait_stall_ns"] / 1e6)
        if "plan_share" not in keys:
            check(
                "an arena per stream never waits (%s)" % waits,
                st["plan_waits"] == st["plan_waits_passed"] == st["plan_wait_events"] == 0,
            )
        elif "plan_share:0" in sys.argv[3:]:
            # Bytes pass between the streams (a lag of 0 shares every byte
            # freed before): each hand-over is a wait made or one the device
            # had passed already, after an event.
            check(
                "the shared plan orders its hand-overs (%s)" % waits,
                st["plan_waits"] + st["plan_waits_passed"] > 0 and st["plan_wait_events"] > 0,
            )
        if "plan_time_waits" in keys:
            check(
                "the shared plan's waits are timed (%s)" % waits,
                st["plan_waits_timed"] <= st["plan_waits"] and (st["plan_waits"] == 0) == (st["plan_waits_timed"] == 0),
            )
        elif not budget:
            check("untimed waits cost nothing to count (%s)" % waits, st["plan_waits_timed"] == 0 and st["plan_wait_stall_ns"] == 0)
        # A graph captured after the planned steps (its memory is the
        # capture's, not the plan's) replays as its eager run computes.
        net = nets[0]
        static_x = data[0][0].clone()
        with torch.no_grad():
            eager = net(static_x).clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                net(static_x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = net(static_x)
            g.replay()
            torch.cuda.synchronize()
        check("a graph captured in the planned run replays its eager result", torch.equal(out, eager))
        if not sys.argv[3:]:
            broken_child(trace)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    return 0 if all(results) else 1


def auto(digest, digest_file, status_at):
    """The checks of a run planned in itself (plan:auto)."""
    status, why = somalloc.plan_status()
    codes = [st["plan_status"] for st in status_at]
    check("plan:auto switched to its plan (status %d: %s)" % (status, why),
          status == somalloc.PLAN_SERVING and codes[-1] == somalloc.PLAN_SERVING)
    check("it recorded before (status %s)" % codes[:8], codes[0] == somalloc.PLAN_RECORDING)
    if somalloc.PLAN_SERVING in codes:
        k = codes.index(somalloc.PLAN_SERVING)
        first, last = status_at[min(k + 1, len(codes) - 1)], status_at[-1]
        made = last["allocations"] - first["allocations"]
        served = last["plan_served"] - first["plan_served"]
        check("from the step after the switch (step %d), most allocations came from the plan (%d of %d, arena %.1f MiB)"
              % (k, served, made, last["plan_arena_bytes"] / 2**20),
              made > 0 and served >= 0.9 * made and last["plan_arena_bytes"] > 0)
    st = somalloc.stats()
    check("no allocation or free failed", st["failed_allocations"] == 0 and st["failed_frees"] == 0)
    with open(digest_file) as f:
        recorded = json.load(f)
    check("the weights after three steps equal the recorded run's, to the bit", digest == recorded)


def broken(digest, digest_file):
    """The checks of a run configured with a plan that cannot be made."""
    st = somalloc.stats()
    status, why = somalloc.plan_status()
    check("a plan of a file that is no trace is not used (status %d: %s)" % (status, why),
          status == somalloc.PLAN_NOT_USED and st["plan_status"] == status and why != "")
    check("every allocation succeeded without it (%d allocations, %d failed)" % (st["allocations"], st["failed_allocations"]),
          st["allocations"] > 0 and st["failed_allocations"] == 0 and st["failed_frees"] == 0)
    check("nothing came from a plan", st["plan_arena_bytes"] == 0 and st["plan_served"] == 0 and st["plan_refused"] == 0)
    x = torch.arange(1 << 20, device="cuda")
    check("a tensor made after it computes", int((x * 2).sum()) == (1 << 20) * ((1 << 20) - 1))
    with open(digest_file) as f:
        recorded = json.load(f)
    check("the weights after three steps equal the recorded run's, to the bit", digest == recorded)


def broken_child(trace):
    """Runs this script's ``broken`` part in a child process: it must pass,
    and say on stderr, once, that the plan is not used."""
    import subprocess

    p = subprocess.run([sys.executable, __file__, "broken", trace], capture_output=True, text=True, timeout=600)
    # Its lines indented, so that its verdict is not read as this run's.
    for line in (p.stdout + p.stderr).splitlines():
        print("    broken: " + line, flush=True)
    said = [line for line in p.stderr.splitlines() if "not used on device 0" in line and "serving without it" in line]
    check("a plan that cannot be made: the child run passes (exit %d)" % p.returncode,
          p.returncode == 0 and p.stdout.rstrip().endswith(" passed, 0 failed"))
    check("it said why on stderr, once (%d lines)" % len(said), len(said) == 1 and said[0].startswith("somalloc: plan:"))


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        sys.exit(0)
    sys.exit(main())
