"""Checks, without a GPU and without PyTorch, the parts of somalloc.torch
that need neither: the statistics under PyTorch's key names (from made-up
counters), device names, one allocator object shared by allocator() and
enable(), and enable() refusing up front, with the reason and the fix, when
no raising entry point can be made (no compiler, no PyTorch libraries),
unless raise_oom=False. A stand-in "torch" module records what PyTorch would
have been given.

    python3 python/tests/torch_api_check.py     (after installing the wheel)
"""

import importlib
import os
import shutil
import sys
import tempfile
import types

import somalloc
import somalloc.torch as st

checks = []


def check(name, ok, detail=""):
    checks.append(bool(ok))
    print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail), flush=True)


# --- statistics --------------------------------------------------------------
base = {
    "pool_reserved_bytes": 64 << 20,
    "pool_reserved_peak_bytes": 96 << 20,
    "pool_used_bytes": 40 << 20,
    "pool_used_peak_bytes": 80 << 20,
    "live_allocations": 7,
    "live_bytes": 30 << 20,
    "live_peak_bytes": 70 << 20,
    "allocations": 100,
    "frees": 93,
    "failed_allocations": 2,
    "failed_frees": 0,
    "arena_enabled": 0,
    "arena_mapped_bytes": 0,
    "arena_mapped_peak_bytes": 0,
    "arena_maps": 0,
    "arena_unmaps": 0,
}
m = st._torch_stats(base)
expected = {
    "allocated_bytes.all.current": 30 << 20,
    "allocated_bytes.all.peak": 70 << 20,
    "requested_bytes.all.current": 30 << 20,
    "requested_bytes.all.peak": 70 << 20,
    "active_bytes.all.current": 30 << 20,
    "active_bytes.all.peak": 70 << 20,
    "allocation.all.current": 7,
    "allocation.all.allocated": 100,
    "allocation.all.freed": 93,
    "active.all.current": 7,
    "active.all.allocated": 100,
    "active.all.freed": 93,
    "reserved_bytes.all.current": 64 << 20,
    "reserved_bytes.all.peak": 96 << 20,
    "num_ooms": 2,
}
check("the counters under PyTorch's names, without an arena", m == expected, str(sorted(set(m.items()) ^ set(expected.items()))))
check("keys in PyTorch's order (sorted)", list(m) == sorted(m))
check(
    "keys somalloc cannot fill are absent, not 0",
    not any(k in m for k in ("allocated_bytes.all.allocated", "allocated_bytes.all.freed", "allocation.all.peak", "num_alloc_retries", "num_device_alloc", "allocated_bytes.large_pool.current")),
)
arena = dict(base, arena_enabled=1, arena_mapped_bytes=256 << 20, arena_mapped_peak_bytes=512 << 20, arena_maps=5, arena_unmaps=2)
a = st._torch_stats(arena)
check(
    "with an arena: reserved adds its mapped bytes (peak: the sum of the peaks), device allocations are its maps",
    a["reserved_bytes.all.current"] == (64 + 256) << 20
    and a["reserved_bytes.all.peak"] == (96 + 512) << 20
    and (a["num_device_alloc"], a["num_device_free"]) == (5, 2)
    and (a["segment.all.current"], a["segment.all.allocated"], a["segment.all.freed"]) == (3, 5, 2),
    str({k: v for k, v in a.items() if k.startswith(("reserved", "num_device", "segment"))}),
)
seen = []
real_native = st._native
st._native = types.SimpleNamespace(stats=lambda d: seen.append(("stats", d)) or base, reset_peaks=lambda d: seen.append(("reset", d)))
check(
    "memory_allocated and friends read the same figures",
    (st.memory_allocated(1), st.max_memory_allocated(1), st.memory_reserved(1), st.max_memory_reserved(1)) == (30 << 20, 70 << 20, 64 << 20, 96 << 20),
)
st.reset_peak_memory_stats("cuda:2")
check("devices as PyTorch names them: an int, 'cuda:N'", seen == [("stats", 1)] * 4 + [("reset", 2)], str(seen))
st._native = real_native
device = types.SimpleNamespace(type="cuda", index=3)
check("a torch.device and a bare index", st._device_index(device) == 3 and st._device_index("5") == 5 and st._device_index(4) == 4)
check("no index: the current device (0 without PyTorch)", st._device_index(None) == 0 and st._device_index("cuda") == 0 and st._device_index(types.SimpleNamespace(type="cuda", index=None)) == 0)
for bad in ("cpu", types.SimpleNamespace(type="cpu", index=None)):
    try:
        st._device_index(bad)
        check("a CPU device is refused", False, repr(bad))
    except ValueError:
        check("a CPU device is refused", True, repr(bad))

# --- one allocator object, and refusing up front ------------------------------
installed = []


class FakePluggable:
    def __init__(self, path, alloc, free):
        self.args = (path, alloc, free)


def fake_torch():
    """A stand-in PyTorch with its C++ headers but none of its libraries
    loaded: no built-in route, and the compiled one needs a compiler."""
    root = os.path.join(tempfile.mkdtemp(), "torch")
    os.makedirs(os.path.join(root, "include", "c10", "util"))
    os.makedirs(os.path.join(root, "lib"))
    open(os.path.join(root, "include", "c10", "util", "Exception.h"), "w").close()
    return types.SimpleNamespace(
        __file__=os.path.join(root, "__init__.py"),
        __version__="0.0-stand-in",
        _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
        version=types.SimpleNamespace(hip=None if somalloc.backend() == "cuda" else "6.0"),
        cuda=types.SimpleNamespace(memory=types.SimpleNamespace(CUDAPluggableAllocator=FakePluggable, change_current_allocator=installed.append)),
    )


sys.modules["torch"] = fake_torch()
somalloc._start = lambda framework, conf: None  # no GPU here: skip the device check
shutil.which = lambda name: None  # no compiler
os.environ.pop("CXX", None)
plain = (somalloc.library_path(), "somalloc_torch_alloc", "somalloc_torch_free")

try:
    st.enable()
    check("enable() refuses when no raising entry point can be made", False, "it installed %r" % (installed,))
except somalloc.SomallocError as e:
    text = e.args[0]
    check(
        "enable() refuses when no raising entry point can be made, saying why and what to do",
        not installed
        and not st.enabled()
        and e.args[1] == "Unsupported"
        and "libc10.so is not loaded" in text
        and "no C++ compiler" in text
        and "address 0" in text
        and "mem_pool()" in text
        and "raise_oom=False" in text,
        text,
    )
try:
    st.enable(raise_oom="compiled")
    check("raise_oom='compiled' refuses with the compiler's reason only", False)
except somalloc.SomallocError as e:
    check("raise_oom='compiled' refuses with the compiler's reason only", "no C++ compiler" in e.args[0] and "libc10" not in e.args[0], e.args[0][:200])
try:
    st.enable(raise_oom="maybe")
    check("a raise_oom that means nothing is a ValueError", False)
except ValueError:
    check("a raise_oom that means nothing is a ValueError", True)

a1 = st.allocator()
a2 = st.allocator()
check("allocator() makes one object over the plain entry points, and returns it again", a1 is a2 and a1.args == plain and not installed, str(a1.args))
alloc = st.enable(raise_oom=False)
check("enable(raise_oom=False) installs that same object", alloc is a1 and installed == [a1] and st.enabled() and not st.raises_oom() and st.oom_route() is None)
check("allocator() after enable() is the installed one, and enable() again changes nothing", st.allocator() is a1 and st.enable() is a1 and installed == [a1])

# A fresh module: enable() first, allocator() afterwards gives its object.
st = importlib.reload(st)
installed.clear()
alloc = st.enable(raise_oom=False)
check("allocator() after enable() returns enable()'s object", st.allocator() is alloc and installed == [alloc] and alloc.args == plain)

print("%d passed, %d failed" % (sum(checks), len(checks) - sum(checks)))
sys.exit(0 if all(checks) else 1)
