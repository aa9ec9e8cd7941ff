"""somalloc under PyTorch, two ways.

**For one region of a program** (recommended), as the allocator of a
``torch.cuda.MemPool``::

    import somalloc.torch
    pool = somalloc.torch.mem_pool()    # torch.cuda.MemPool(somalloc.torch.allocator().allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(1024, 1024, device="cuda")

Inside the region PyTorch's caching allocator asks somalloc for whole
segments and splits them into tensors itself; the rest of the program stays
on PyTorch's own allocator. PyTorch's statistics, memory snapshots,
``torch.OutOfMemoryError`` and ``Tensor.record_stream`` keep working;
somalloc's per-tensor cache tier and its plan (``plan:``) see PyTorch's
segments, not the tensors.

**For the whole process**, as PyTorch's allocator; ``enable()`` must run
before PyTorch allocates anything on the GPU (PyTorch refuses to swap an
allocator that has been used)::

    import somalloc.torch
    somalloc.torch.enable()            # or enable("cache:off"), ...
    x = torch.randn(1024, 1024, device="cuda")

Every CUDA (or ROCm) tensor of the process is then allocated by somalloc on
the stream that is current when it is made, and freed on that stream when
PyTorch drops it: the cache tier and the plan serve each tensor. PyTorch's
own memory tools do not reach a pluggable allocator: ``Tensor.record_stream``
does nothing (see ``docs/pytorch.md`` in the repository for what that means,
and for ``TORCH_NCCL_AVOID_RECORD_STREAMS``), and ``torch.cuda.memory_stats()``
and snapshots raise; :func:`memory_stats` and the functions beside it give
somalloc's counters under PyTorch's names, and :func:`trace_to_snapshot`
turns a trace (``trace:PATH``) into a snapshot for PyTorch's visualizer.

Out of memory under ``enable()``: PyTorch's pluggable path has no error
channel (a NULL from the allocator becomes a storage at address 0). So the
entry point PyTorch gets raises PyTorch's own exceptions:
``torch.OutOfMemoryError`` for an allocation somalloc cannot meet, with
somalloc's reason. It is built into this package and needs no compiler: it
throws the C++ exception with the constructor of ``c10::Error`` exported by
the ``libc10`` PyTorch loaded. Where those symbols are not found, ``enable()``
compiles a small C++ file shipped with the package (``_torch_oom.cpp``)
against the installed PyTorch instead, with the first C++ compiler of
``CXX``, ``c++`` and ``g++`` that links the C++ runtime dynamically, cached in
``$SOMALLOC_CACHE_DIR`` (default ``~/.cache/somalloc``). Where neither
works, ``enable()`` raises :class:`somalloc.SomallocError` saying why and
what to do, unless it is called with ``raise_oom=False``. Under a
``MemPool`` none of this is needed: PyTorch's caching allocator turns
somalloc's NULL into its own ``OutOfMemoryError``.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile

from . import SomallocError, _native, library_path
from .snapshot import trace_to_snapshot

__all__ = [
    "allocator",
    "enable",
    "enabled",
    "last_error",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_pool",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "oom_route",
    "raises_oom",
    "reset_peak_memory_stats",
    "trace_to_snapshot",
]

# The allocator enable() installed, the one allocator() made over the plain
# entry points, and which raising entry point enable() uses.
_allocator = None
_plain_allocator = None
_oom_route = None

# raise_oom's values: either raising route, one of them, or none.
_ROUTES = {True: ("built-in", "compiled"), "built-in": ("built-in",), "compiled": ("compiled",), False: ()}

def _oom_shim(torch):
    """Builds (or finds in the cache) the raising entry points for this
    PyTorch. Returns the shared object's path, or ``(None, why)``."""
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "_torch_oom.cpp")
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    inc, lib = os.path.join(tdir, "include"), os.path.join(tdir, "lib")
    if not os.path.isfile(os.path.join(inc, "c10", "util", "Exception.h")):
        return None, "PyTorch's C++ headers are not installed (%s)" % inc
    compilers = [c for c in (os.environ.get("CXX"), shutil.which("c++"), shutil.which("g++")) if c]
    if not compilers:
        return None, "no C++ compiler (set CXX, or install g++)"
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    with open(src, "rb") as f:
        code = f.read()
    key = hashlib.sha256(b"\0".join([code, torch.__version__.encode(), tdir.encode(), str(abi).encode()] + [c.encode() for c in compilers])).hexdigest()[:16]
    cache = os.environ.get("SOMALLOC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "somalloc")
    out = os.path.join(cache, "torch-oom-%s.so" % key)
    if os.path.isfile(out):
        return out, None
    try:
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
    except OSError as e:
        return None, "cannot write the cache %s: %s" % (cache, e)
    whys = []
    for cxx in compilers:
        cmd = [cxx, "-O2", "-shared", "-fPIC", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi,
               "-I", inc, src, "-o", tmp, "-L", lib, "-lc10", "-Wl,-rpath," + lib]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as e:
            whys.append("%s: %s" % (cxx, e))
            continue
        if p.returncode != 0:
            whys.append("%s: %s" % (cxx, p.stderr.strip()[-400:]))
            continue
        # The exception must come from the process's own C++ runtime: a
        # compiler that links its libstdc++ statically is passed over.
        with open(tmp, "rb") as f:
            if b"libstdc++.so" not in f.read():
                whys.append("%s links the C++ runtime statically" % cxx)
                continue
        break
    else:
        os.unlink(tmp)
        return None, "building %s failed: %s" % (os.path.basename(src), "; ".join(whys))
    os.replace(tmp, out)
    return out, None




def _loaded_library(stem):
    """The path of a shared library this process loaded whose file name
    starts with ``stem``, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None


def _runtime_error_functions():
    """The addresses of the runtime's ``PeekAtLastError`` and
    ``GetLastError`` (the runtime PyTorch loaded, which ``_start`` found),
    or ``(None, None)``: for clearing the error an out-of-memory leaves."""
    import ctypes

    var, prefix = ("SOMALLOC_AMDHIP", "hip") if _native.backend() == "rocm" else ("SOMALLOC_CUDART", "cuda")
    if not os.environ.get(var):
        return None, None
    try:
        rt = ctypes.CDLL(os.environ[var])
        peek = ctypes.cast(rt[prefix + "PeekAtLastError"], ctypes.c_void_p).value
        get = ctypes.cast(rt[prefix + "GetLastError"], ctypes.c_void_p).value
        return peek, get
    except (OSError, AttributeError):
        return None, None


# The symbols the built-in raising entry point calls (python/src/oom.rs), by
# the C++ ABI PyTorch was built with (_GLIBCXX_USE_CXX11_ABI).
_CXX_SYMBOLS = {
    True: {
        "error_ctor": (
            "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
            "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        ),
        "string_ctor": ("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEC1EPKcRKS3_",),
        "string_dtor": ("_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEED1Ev",),
    },
    False: {
        "error_ctor": ("_ZN3c105ErrorC1ENS_14SourceLocationESs", "_ZN3c105ErrorC2ENS_14SourceLocationESs"),
        "string_ctor": ("_ZNSsC1EPKcRKSaIcE",),
        "string_dtor": ("_ZNSsD1Ev",),
    },
}
_TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libc10_hip.so", "libtorch_cuda.so", "libtorch_hip.so", "libtorch_cpu.so", "libtorch_python.so")


def _cxx_symbols(torch):
    """Looks up, in the libraries PyTorch loaded (none is loaded here), what
    the built-in raising entry point needs. Returns ``(dict, None)`` for
    ``_native.torch_oom_init``, or ``(None, why)``."""
    import ctypes

    libdir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib")
    abi = bool(int(getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", True)))
    mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)

    def loaded(path):
        try:
            return ctypes.CDLL(path, mode=mode)
        except OSError:
            return None

    torch_libs = [lib for lib in (loaded(os.path.join(libdir, n)) for n in _TORCH_LIBS) if lib is not None]
    if not torch_libs or not os.path.isfile(os.path.join(libdir, "libc10.so")):
        return None, "PyTorch's libc10.so is not loaded from %s" % libdir
    cxx = loaded(_loaded_library("libstdc++.so") or "libstdc++.so.6")
    if cxx is None:
        return None, "the C++ runtime (libstdc++) is not loaded"

    def find(libs, names):
        for lib in libs:
            for name in names:
                try:
                    address = ctypes.cast(lib[name], ctypes.c_void_p).value
                except AttributeError:
                    continue
                if address:
                    return address
        return 0

    names = _CXX_SYMBOLS[abi]
    out = {
        "error_ctor": find(torch_libs, names["error_ctor"]),
        "error_typeinfo": find(torch_libs, ("_ZTIN3c105ErrorE",)),
        "oom_typeinfo": find(torch_libs, ("_ZTIN3c1016OutOfMemoryErrorE",)),
        "oom_vtable": find(torch_libs, ("_ZTVN3c1016OutOfMemoryErrorE",)),
        "string_ctor": find([cxx], names["string_ctor"]),
        "string_dtor": find([cxx], names["string_dtor"]),
        "alloc_exception": find([cxx], ("__cxa_allocate_exception",)),
        "throw": find([cxx], ("__cxa_throw",)),
        "si_class_vtable": find([cxx], ("_ZTVN10__cxxabiv120__si_class_type_infoE",)),
    }
    missing = [k for k in ("error_ctor", "error_typeinfo", "string_ctor", "string_dtor", "alloc_exception", "throw") if not out[k]]
    if not out["oom_typeinfo"] and not out["si_class_vtable"]:
        missing.append("oom_typeinfo")
    if missing:
        return None, "symbols not found in PyTorch's libraries or the C++ runtime (%s ABI): %s" % (
            "C++11" if abi else "pre-C++11",
            ", ".join(missing),
        )
    return out, None


def _builtin_allocator(torch):
    """The pluggable allocator over the raising entry point built into this
    package (no compiler), or ``(None, why)``."""
    symbols, why = _cxx_symbols(torch)
    if symbols is None:
        return None, why
    peek, get = _runtime_error_functions()
    symbols["peek"], symbols["get"] = peek or 0, get or 0
    try:
        _native.torch_oom_init(symbols)
    except ValueError as e:
        return None, str(e)
    return torch.cuda.memory.CUDAPluggableAllocator(library_path(), "somalloc_torch_alloc_raising", "somalloc_torch_free"), None


def _compiled_allocator(torch):
    """The pluggable allocator over the entry points of ``_torch_oom.cpp``,
    built here (a compiler needed), or ``(None, why)``."""
    import ctypes

    path, why = _oom_shim(torch)
    if path is None:
        return None, why
    try:
        shim = ctypes.CDLL(path)
        lib = ctypes.CDLL(library_path())
        addr = [ctypes.cast(getattr(lib, n), ctypes.c_void_p) for n in ("somalloc_torch_alloc", "somalloc_torch_free", "somalloc_last_error_message")]
        peek, get = _runtime_error_functions()
        addr += [peek, get] if peek and get else [None, None]
        shim.somalloc_oom_init.argtypes = [ctypes.c_void_p] * 5
        if shim.somalloc_oom_init(*addr) != 0:
            return None, "somalloc_oom_init refused somalloc's entry points"
    except (OSError, AttributeError) as e:
        return None, "loading %s failed: %s" % (path, e)
    return torch.cuda.memory.CUDAPluggableAllocator(path, "somalloc_oom_alloc", "somalloc_oom_free"), None


def _check_vendor(torch):
    hip = getattr(torch.version, "hip", None) is not None
    if hip != (_native.backend() == "rocm"):
        raise SomallocError(
            "this somalloc wheel is built for %s and PyTorch for %s: install somalloc-%s"
            % (_native.backend(), "ROCm" if hip else "CUDA", "rocm" if hip else "cuda"),
            "Unsupported",
        )


def _begin(conf):
    """What enable() and allocator() do first: import PyTorch, point
    somalloc at its runtime, apply ``conf``, check that a device answers and
    that the wheel's vendor is PyTorch's. Returns the torch module."""
    import torch

    from . import _start

    # Importing PyTorch loaded its runtime (initialising CUDA here would
    # initialise PyTorch's own allocator, which then cannot be swapped).
    _start("PyTorch", conf)
    _check_vendor(torch)
    return torch


def allocator(conf=None):
    """somalloc as a ``torch.cuda.memory.CUDAPluggableAllocator``, not
    installed: for ``torch.cuda.MemPool(somalloc.torch.allocator().allocator())``
    with ``torch.cuda.use_mem_pool(pool)`` (:func:`mem_pool` does both
    steps), which puts one region of a program on somalloc and leaves the
    rest on PyTorch's allocator (see the module's docs for what each way
    gives). Configures somalloc with ``conf`` as :func:`enable` does, and
    raises as it does where there is no runtime or no GPU.

    One object per process: after :func:`enable`, the allocator it installed;
    before, one over somalloc's plain entry points, made on the first call
    and returned again (a later ``enable(raise_oom=False)`` installs that
    same object). Under a ``MemPool`` the plain entry points are the right
    ones: PyTorch's caching allocator turns their NULL into its own
    ``torch.OutOfMemoryError``, after freeing its cached segments and
    trying again."""
    made = _allocator or _plain_allocator
    if made is not None:
        if conf is not None:
            _native.configure(conf)
        return made
    return _plain(_begin(conf))


def _plain(torch):
    """The allocator over the plain entry points, made once."""
    global _plain_allocator
    if _plain_allocator is None:
        _plain_allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "somalloc_torch_alloc", "somalloc_torch_free")
    return _plain_allocator


def mem_pool(conf=None, **kwargs):
    """A new ``torch.cuda.MemPool`` over :func:`allocator` (keyword arguments
    go to ``MemPool``, e.g. ``use_on_oom``)::

        pool = somalloc.torch.mem_pool()
        with torch.cuda.use_mem_pool(pool):
            ...                         # allocations of this thread: somalloc's segments
    """
    import torch

    return torch.cuda.MemPool(allocator(conf).allocator(), **kwargs)


def _raising(torch, raise_oom):
    """The allocator of the first raising route of ``raise_oom`` that works,
    and its name; or raises :class:`SomallocError` with every route's reason
    and the fixes."""
    whys = []
    for route in _ROUTES[raise_oom]:
        make = _builtin_allocator if route == "built-in" else _compiled_allocator
        alloc, why = make(torch)
        if alloc is not None:
            return alloc, route
        whys.append("%s: %s" % ("no compiler needed" if route == "built-in" else "compiled with a C++ compiler", why))
    raise SomallocError(
        "somalloc.torch.enable(): PyTorch's pluggable allocator has no error channel, and no way to "
        "raise torch.OutOfMemoryError works here (%s). Without one, an allocation that somalloc "
        "refuses would give PyTorch a tensor at address 0. Fix: install a C++ compiler (g++, or set "
        "CXX) and PyTorch's headers; or put somalloc under a torch.cuda.MemPool "
        "(somalloc.torch.mem_pool()), where PyTorch raises OutOfMemoryError itself; or call "
        "enable(raise_oom=False) to accept that." % "; ".join(whys),
        "Unsupported",
    )


def enable(conf=None, raise_oom=True):
    """Makes somalloc PyTorch's GPU allocator, for the whole process (for one
    region of a program, see :func:`mem_pool`).

    ``conf``: a configuration string (``None``: ``SOMALLOC_CONF`` or the
    defaults). ``raise_oom``: ``True`` (the default) gives PyTorch an entry
    point that raises ``torch.OutOfMemoryError`` (``RuntimeError`` for other
    failures) with somalloc's reason, built in or else compiled (see the
    module docs; :func:`oom_route` says which); ``"built-in"`` or
    ``"compiled"`` asks for one of the two; ``False`` gives the plain entry
    points, where a failed allocation gives a storage at address 0.

    Raises :class:`somalloc.SomallocError` with somalloc's text where there
    is no runtime or no GPU, when the wheel's vendor is not PyTorch's, and
    when ``raise_oom`` asks for a raising entry point and none can be made
    here (the text says why and what to do); PyTorch's own ``RuntimeError``
    when its allocator was already used. Calling it again after success does
    nothing. A plan (``plan:``) that cannot be made raises nothing, here or
    at an allocation: somalloc serves without it and says why
    (:func:`somalloc.plan_status`)."""
    global _allocator, _oom_route
    if raise_oom not in _ROUTES:
        raise ValueError("raise_oom is True, False, 'built-in' or 'compiled', not %r" % (raise_oom,))
    if _allocator is not None:
        if conf is not None:
            _native.configure(conf)
        return _allocator
    torch = _begin(conf)
    route = None
    if _ROUTES[raise_oom]:
        alloc, route = _raising(torch, raise_oom)
    else:
        alloc = _plain(torch)
    torch.cuda.memory.change_current_allocator(alloc)
    _allocator = alloc
    _oom_route = route
    return alloc


def enabled():
    """Whether :func:`enable` made somalloc PyTorch's allocator."""
    return _allocator is not None


def raises_oom():
    """Whether, under :func:`enable`, an allocation somalloc cannot meet
    raises ``torch.OutOfMemoryError`` rather than giving a storage at
    address 0."""
    return _oom_route is not None


def oom_route():
    """Which raising entry point :func:`enable` gave PyTorch: ``"built-in"``
    (this package's, no compiler), ``"compiled"`` (``_torch_oom.cpp``, built
    here), or None (the plain entry points, or before ``enable()``)."""
    return _oom_route


def last_error():
    """The text of somalloc's last error on this thread: why an allocation
    that PyTorch asked for came back empty."""
    return _native.last_error()


# ---------------------------------------------------------------------------
# Statistics under PyTorch's names.


def _device_index(device):
    """A device as PyTorch names one (None, an int, ``"cuda:1"``,
    ``torch.device``) as an ordinal; None and a device without an index are
    the current device."""
    from . import _device

    if device is None or isinstance(device, int):
        return _device(device)
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if index == "" and kind.isdigit():
            return int(kind)
        if kind not in ("cuda", "hip"):
            raise ValueError("not a GPU device: %r" % device)
        return _device(int(index) if index else None)
    kind = getattr(device, "type", None)
    if kind is not None and kind not in ("cuda", "hip"):
        raise ValueError("not a GPU device: %r" % (device,))
    return _device(getattr(device, "index", None))


def _torch_stats(s):
    """somalloc's counters (:func:`somalloc.stats`) under the names of
    ``torch.cuda.memory_stats()``, for what maps (see :func:`memory_stats`)."""
    live, peak = s["live_bytes"], s["live_peak_bytes"]
    out = {}
    for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
        out[name + ".all.current"] = live
        out[name + ".all.peak"] = peak
    for name in ("allocation", "active"):
        out[name + ".all.current"] = s["live_allocations"]
        out[name + ".all.allocated"] = s["allocations"]
        out[name + ".all.freed"] = s["frees"]
    reserved, reserved_peak = s["pool_reserved_bytes"], s["pool_reserved_peak_bytes"]
    if s.get("arena_enabled"):
        reserved += s["arena_mapped_bytes"]
        reserved_peak += s["arena_mapped_peak_bytes"]
        out["num_device_alloc"] = s["arena_maps"]
        out["num_device_free"] = s["arena_unmaps"]
        out["segment.all.current"] = s["arena_maps"] - s["arena_unmaps"]
        out["segment.all.allocated"] = s["arena_maps"]
        out["segment.all.freed"] = s["arena_unmaps"]
    out["reserved_bytes.all.current"] = reserved
    out["reserved_bytes.all.peak"] = reserved_peak
    out["num_ooms"] = s["failed_allocations"]
    return dict(sorted(out.items()))


def memory_stats(device=None):
    """somalloc's counters of a device (default: PyTorch's current device)
    under the key names of ``torch.cuda.memory_stats()``, for what somalloc
    counts. Keys PyTorch has and somalloc cannot fill are left out (a lookup
    of one raises ``KeyError`` rather than reading a made-up 0):

    * ``allocated_bytes.all.current`` / ``.peak``: bytes of the allocations
      live now (``live_bytes``) and the most since the start or the last
      :func:`reset_peak_memory_stats` (``live_peak_bytes``). These are the
      bytes asked for; PyTorch's own count rounds each up to its block size.
      ``requested_bytes.all.*`` and ``active_bytes.all.*`` are the same
      figures (somalloc has no freed-but-still-used state: a free is in its
      stream's order).
    * ``allocation.all.current`` / ``.allocated`` / ``.freed`` (and the same
      as ``active.all.*``): allocations live now (``live_allocations``), made
      (``allocations``) and freed (``frees``) so far.
    * ``reserved_bytes.all.current`` / ``.peak``: memory somalloc holds from
      the device: the pool's reserved bytes (``pool_reserved_bytes``,
      ``pool_reserved_peak_bytes``), with ``pool:vmm`` plus the arena's
      mapped bytes (``arena_mapped_bytes``; the peak is the sum of the two
      peaks). With ``pool:default`` the pool is the device's default pool,
      which other users in the process may share.
    * ``num_ooms``: allocations that failed (``failed_allocations``; out of
      memory, and the rare other failure).
    * With ``pool:vmm`` only: ``num_device_alloc`` / ``num_device_free``,
      the chunks the arena mapped and unmapped (``arena_maps``,
      ``arena_unmaps``), and ``segment.all.current`` / ``.allocated`` /
      ``.freed`` for the same chunks.

    Not there: ``allocated_bytes.all.allocated`` / ``.freed`` (somalloc
    counts allocations, not their bytes over time), ``allocation.all.peak``,
    ``num_alloc_retries`` (the cache tier's recovery from out of memory is
    not counted), ``inactive_split*``, and the ``large_pool`` /
    ``small_pool`` splits (somalloc has no such pools). :func:`somalloc.stats`
    has the rest of somalloc's counters.

    Under :func:`enable` this stands in for ``torch.cuda.memory_stats()``,
    which raises there. Under a ``MemPool``, ``torch.cuda.memory_stats()``
    works and counts PyTorch's blocks in somalloc's segments; this counts the
    segments."""
    return _torch_stats(_native.stats(_device_index(device)))


def memory_allocated(device=None):
    """``memory_stats(device)["allocated_bytes.all.current"]``: bytes of the
    live allocations."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    """``memory_stats(device)["allocated_bytes.all.peak"]``: the most bytes
    live at once since the start or :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    """``memory_stats(device)["reserved_bytes.all.current"]``: memory
    somalloc holds from the device."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    """``memory_stats(device)["reserved_bytes.all.peak"]``."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    """Starts the peaks of a device's counters over from their current
    values (``somalloc_reset_peaks`` of the C ABI): the live bytes' peak,
    the pool's reserved and used peaks, and with ``pool:vmm`` the arena's
    mapped peak. The counts of allocations and frees go on."""
    _native.reset_peaks(_device_index(device))
