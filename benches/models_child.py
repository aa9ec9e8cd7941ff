"""The child process of benches/models.py: one workload under one
allocator mode, measured step by step, its figures printed as one RESULT
line of JSON (see models.py for the workloads, the modes and what each
figure means). The driver (models.py) imports the modes and this process's
entry point from here; this file imports nothing of the driver's."""

import ctypes
import gc
import json
import os
import random
import statistics
import time

MODES = {
    "caching": ("torch", None),
    "async": ("torch", "backend:cudaMallocAsync"),
    "expandable": ("torch", "expandable_segments:True"),
    "somalloc-pool": ("somalloc", "cache:off"),
    # Caps for training loops: a step frees and reallocates gigabytes, far
    # above the library's default caps (256 MiB per stream, 1 GiB in all).
    "somalloc-cache": ("somalloc", "cache:on,cache_per_stream_cap:2GiB,cache_total_cap:4GiB"),
    # The virtual-memory arena under somalloc, alone and under the cache
    # tier (the caps of somalloc-cache).
    "somalloc-vmm": ("somalloc", "pool:vmm,cache:off"),
    "somalloc-vmm-cache": ("somalloc", "pool:vmm,cache:on,cache_per_stream_cap:2GiB,cache_total_cap:4GiB"),
    # The arena without moving free chunks where it grows (what moves cost
    # in time and save in memory).
    "somalloc-vmm-nomoves": ("somalloc", "pool:vmm,cache:off,arena_moves:off"),
    # The arena without device waits (what the waits cost and save).
    "somalloc-vmm-nowaits": ("somalloc", "pool:vmm,cache:off,arena_stream_waits:off"),
    "somalloc-default": ("somalloc", "cache:on"),
    # One run: planned in it (plan:auto).
    "somalloc-auto": ("somalloc", "cache:on,plan:auto,plan_share:off"),
    "somalloc-auto-shared": ("somalloc", "cache:on,plan:auto,plan_share:10"),
    # The same on the virtual-memory arena: the plan's arena drawn from it,
    # so the chunks of the blocks before the switch are remapped into it.
    "somalloc-vmm-auto": ("somalloc", "pool:vmm,cache:on,plan:auto,plan_share:off"),
    "somalloc-vmm-auto-shared": ("somalloc", "pool:vmm,cache:on,plan:auto,plan_share:10"),
    # Run twice: recorded (trace:), then served from the plan (plan:).
    "somalloc-plan": ("plan", "cache:on"),
    # The same, the streams sharing one arena: bytes pass from a stream to
    # another freed 10 ms or more before in the recorded run.
    "somalloc-plan-shared": ("plan", "cache:on,plan_share:10"),
    # The same, by the recorded run's device times: a stream takes bytes
    # another freed only where the device had passed that free 15 ms or
    # more before it reached the allocation.
    "somalloc-plan-device": ("plan", "cache:on,plan_share:device+15"),
}
# The key the driver adds to a plan mode's child: trace:FILE, then plan:FILE.
PLAN_KEY = "MODELS_PLAN_KEY"
# The infer workload: its requests (--requests), the requests before those
# it is measured by, and the seed of its shapes.
INFER_REQUESTS = 300
INFER_WARMUP = 20
INFER_SEED = 3


# ---------------------------------------------------------------------------
# One process: one mode, one workload.


def measured(times, skip=5):
    """The steps a run is measured by: all but the first five (the last 20
    of the 25), or all of a shorter run; `skip` instead of five (the infer
    workload's warm-up requests)."""
    return times[skip:] if len(times) > skip else times


class Clocks:
    """The device's SM clock and the reasons the driver gives for holding
    it down, from NVML (the driver's library, through ctypes): a step that
    slows while its host part does not is the device slowing, and these
    say whether its clock fell. Reads None where NVML is not there."""

    def __init__(self, props):
        self.lib, self.handle = None, ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            bus = "%04x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(self.handle)) == 0:
                self.lib = lib
        except (OSError, AttributeError):
            pass

    def sm_mhz(self):
        mhz = ctypes.c_uint()
        # NVML_CLOCK_SM is 1.
        if self.lib and self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(mhz)) == 0:
            return mhz.value
        return None

    def reasons(self):
        """NVML's bit mask: 0x4 software power cap, 0x8 hardware slowdown,
        0x20 software thermal, 0x40 hardware thermal, 0x80 power brake."""
        mask = ctypes.c_ulonglong()
        if self.lib and self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(mask)) == 0:
            return mask.value
        return None


def child(mode, workload, steps, extra, serial=False, requests=INFER_REQUESTS):
    kind, conf = MODES[mode]
    extra = extra or ""
    if kind in ("somalloc", "plan"):
        import somalloc.torch

        conf = ",".join(c for c in (conf, extra, os.environ.get(PLAN_KEY, "")) if c)
        somalloc.torch.enable(conf)
    import torch

    torch.backends.cudnn.benchmark = False  # the pluggable API has no cacheInfo
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    free0, total = torch.cuda.mem_get_info()
    # The models made, for freeing their gradients and then themselves
    # after the last step.
    models = []

    def resnet():
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.resnet50(weights=None).to(dev)
        models.append(model)
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(64, 3, 224, 224, device=dev, generator=g)
        y = torch.randint(0, 1000, (64,), device=dev, generator=g)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    def gpt2():
        import transformers

        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(dev)
        models.append(model)
        g = torch.Generator(device="cuda").manual_seed(2)
        ids = torch.randint(0, 50257, (8, 512), device=dev, generator=g)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            return loss

        return step

    def infer():
        import transformers

        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).to(dev).eval()
        models.append(model)
        # The requests' shapes, from their own seed: the same in every mode.
        draw = random.Random(INFER_SEED)
        shapes = iter([(draw.randint(1, 32), draw.randint(16, 1024)) for _ in range(requests)])
        g = torch.Generator(device="cuda").manual_seed(2)

        def step():
            batch, tokens = next(shapes)
            ids = torch.randint(0, 50257, (batch, tokens), device=dev, generator=g)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=ids, use_cache=False).logits
                # The check of the request (the loss column): the mean of
                # the last position's logits.
                return logits[:, -1, :].float().mean()

        return step

    def alloc():
        sizes = [256 << (i % 16) for i in range(64)]
        done = torch.zeros((), device=dev)

        def step():
            for _ in range(100):
                held = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
                while held:
                    held.pop()
            return done

        return step

    if workload == "both":
        parts = [resnet(), gpt2()]
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())

        def step():
            losses = []
            for i, (fn, s) in enumerate(zip(parts, streams)):
                if serial and i > 0:
                    s.wait_stream(streams[i - 1])
                with torch.cuda.stream(s):
                    losses.append(fn())
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
            return losses[0] + losses[1]

    else:
        step = {"resnet50": resnet, "gpt2": gpt2, "infer": infer, "alloc": alloc}[workload]()
        parts = []
    if workload == "infer":
        steps = requests

    times, host, losses, peak = [], [], [], 0
    # After each step: the drop of free memory, and the allocator's own
    # reserved peak so far (PyTorch's max_memory_reserved, somalloc's pool
    # reserved peak), to see in which step each figure was reached.
    step_mem, step_reserved_peak = [], []
    # somalloc's allocations and those served from a plan, after each step.
    step_allocs, step_plan_served, step_plan_status = [], [], []
    # With an arena: its virtual-memory calls so far, after each step.
    step_vmm = []
    clocks = Clocks(torch.cuda.get_device_properties(dev))
    sm_mhz, clock_reasons = [], []
    torch.cuda.synchronize()
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        # The host's part: until the step's last work is enqueued (the
        # allocator's calls are in it). Near the step's time, the host
        # bounds the step and what an allocator costs the host shows.
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        # Read as the step ends, outside its time.
        sm_mhz.append(clocks.sm_mhz())
        clock_reasons.append(clocks.reasons())
        losses.append(float(loss.item()))
        drop = free0 - torch.cuda.mem_get_info()[0]
        peak = max(peak, drop)
        step_mem.append(drop / 2**20)
        if kind != "torch":
            st = somalloc.stats()
            step_reserved_peak.append(st["pool_reserved_peak_bytes"] / 2**20)
            step_allocs.append(st["allocations"])
            step_plan_served.append(st["plan_served"])
            step_plan_status.append(st["plan_status"])
            step_vmm.append(st.get("arena_vmm_calls", 0))
        else:
            step_reserved_peak.append(torch.cuda.max_memory_reserved() / 2**20)
    skip = INFER_WARMUP if workload == "infer" else 5
    served = measured(times, skip)
    out = {
        "mode": mode,
        "workload": workload,
        # infer: ms per request, the mean over the requests after the
        # warm-up ones (1000 / req_per_s).
        "ms_per_step": statistics.mean(served) if workload == "infer" else statistics.median(served),
        "step_ms": times,
        "host_ms": statistics.median(measured(host, skip)),
        "step_host_ms": host,
        "peak_mib": peak / 2**20,
        "losses": losses,
        "step_mem_mib": step_mem,
        "step_reserved_peak_mib": step_reserved_peak,
        "device": torch.cuda.get_device_name(0),
        "conf": conf if kind != "torch" else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        # The CPUs the process could run on (--cpus): a training loop whose
        # host bounds its step runs at the speed of the cores it lands on.
        "cpus": sorted(os.sched_getaffinity(0)),
        # The SM clock (MHz) and NVML's reasons for holding it down, as each
        # step ended (None without NVML).
        "step_sm_mhz": sm_mhz,
        "step_clock_reasons": clock_reasons,
    }
    if kind != "torch":
        st = somalloc.stats()
        out["somalloc"] = st
        out["pool_reserved_peak_mib"] = st["pool_reserved_peak_bytes"] / 2**20
        out["failed_frees"] = st["failed_frees"]
        out["step_allocations"] = step_allocs
        out["step_plan_served"] = step_plan_served
        out["step_plan_status"] = step_plan_status
        out["step_arena_vmm_calls"] = step_vmm
        out["plan_status_text"] = somalloc.plan_status()[1]
        # plan:auto: the first step served from the plan (status 1 after it),
        # and the footprint from the step after on.
        if "plan:auto" in conf and 1 in step_plan_status:
            switch = step_plan_status.index(1)
            out["switch_step"] = switch
            if switch + 1 < len(step_mem):
                out["after_switch_peak_mib"] = max(step_mem[switch + 1:])
                out["after_switch_ms_per_step"] = statistics.median(times[switch + 1:])
        # The steady steps (from the fourth on): the share of their
        # allocations a plan served.
        if len(step_allocs) > 4 and step_allocs[-1] > step_allocs[2]:
            out["plan_steady_share"] = (step_plan_served[-1] - step_plan_served[2]) / (step_allocs[-1] - step_allocs[2])
    else:
        out["max_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    if workload == "infer":
        out["requests"] = len(times)
        out["req_per_s"] = 1e3 * len(served) / sum(served)

    def footprint(suffix):
        """After empty-cache: the drop of free memory since before the
        models were made, the live bytes, and the arena's mapped bytes."""
        gc.collect()
        if kind == "torch":
            torch.cuda.empty_cache()
        else:
            getattr(somalloc, "empty_cache", torch.cuda.empty_cache)()
        torch.cuda.synchronize()
        fig = {"after_empty%s_mib" % suffix: (free0 - torch.cuda.mem_get_info()[0]) / 2**20}
        if kind == "torch":
            fig["live_bytes_after_empty" + suffix] = torch.cuda.memory_allocated()
        else:
            st = somalloc.stats()
            fig["live_bytes_after_empty" + suffix] = st.get("live_bytes", 0)
            if st.get("arena_enabled", 0):
                fig["arena_mapped_after_empty%s_mib" % suffix] = st.get("arena_mapped_bytes", 0) / 2**20
                fig["arena_stats_after_empty" + suffix] = {k: v for k, v in st.items() if k.startswith("arena_")}
        return fig

    # What the allocator gives back: first with the models kept (the last
    # step's tensors and the gradients freed), then with the models freed.
    loss = None
    for m in models:
        m.zero_grad(set_to_none=True)
    m = None
    out.update(footprint("_kept"))
    # Nothing of the child's but these holds a model or its optimizer.
    del step, parts
    models.clear()
    out.update(footprint(""))
    print("RESULT " + json.dumps(out), flush=True)
