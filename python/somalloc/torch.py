"""somalloc under PyTorch, through ``torch.cuda.memory.CUDAPluggableAllocator``.

``enable()`` must run before PyTorch allocates anything on the GPU (PyTorch
refuses to swap an allocator that has been used)::

    import somalloc.torch
    somalloc.torch.enable()            # or enable("cache:off"), ...
    x = torch.randn(1024, 1024, device="cuda")

Every CUDA (or ROCm) tensor of the process is then allocated by somalloc on
the stream that is current when it is made, and freed on that stream when
PyTorch drops it. PyTorch gives a pluggable allocator no ``record_stream``
hook from Python: see ``docs/c_abi.md`` in the repository for what that means for
``Tensor.record_stream``.

Out of memory: PyTorch's pluggable path has no error channel (a NULL from
the allocator becomes a storage at address 0). ``enable()`` therefore
compiles a small C++ file shipped with this package (``_torch_oom.cpp``)
against the installed PyTorch on first use, with the first C++ compiler of ``CXX``,
``c++`` and ``g++`` that links the C++ runtime dynamically, and caches the result in
``$SOMALLOC_CACHE_DIR`` (default ``~/.cache/somalloc``); its entry points
throw PyTorch's own ``torch.OutOfMemoryError``. Where no compiler is found
or the build fails, ``enable()`` warns once and PyTorch gets the plain
entry points; :func:`raises_oom` tells which.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings

from . import SomallocError, _native, library_path

_allocator = None
_raises_oom = False


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


def _raising_allocator(torch):
    """The pluggable allocator over the raising entry points, or ``(None,
    why)``."""
    import ctypes

    path, why = _oom_shim(torch)
    if path is None:
        return None, why
    try:
        shim = ctypes.CDLL(path)
        lib = ctypes.CDLL(library_path())
        addr = [ctypes.cast(getattr(lib, n), ctypes.c_void_p) for n in ("somalloc_torch_alloc", "somalloc_torch_free", "somalloc_last_error_message")]
        # The runtime PyTorch loaded (found by _use_loaded_runtime), for
        # clearing the last error an out-of-memory leaves.
        var, prefix = ("SOMALLOC_AMDHIP", "hip") if _native.backend() == "rocm" else ("SOMALLOC_CUDART", "cuda")
        peek = get = None
        if os.environ.get(var):
            try:
                rt = ctypes.CDLL(os.environ[var])
                peek = ctypes.cast(getattr(rt, prefix + "PeekAtLastError"), ctypes.c_void_p)
                get = ctypes.cast(getattr(rt, prefix + "GetLastError"), ctypes.c_void_p)
            except (OSError, AttributeError):
                peek = get = None
        addr += [peek, get]
        shim.somalloc_oom_init.argtypes = [ctypes.c_void_p] * 5
        if shim.somalloc_oom_init(*addr) != 0:
            return None, "somalloc_oom_init refused somalloc's entry points"
    except (OSError, AttributeError) as e:
        return None, "loading %s failed: %s" % (path, e)
    return torch.cuda.memory.CUDAPluggableAllocator(path, "somalloc_oom_alloc", "somalloc_oom_free"), None


def enable(conf=None, raise_oom=True):
    """Makes somalloc PyTorch's GPU allocator.

    ``conf``: a configuration string (``None``: ``SOMALLOC_CONF`` or the
    defaults). ``raise_oom``: build and use the entry points that raise
    ``torch.OutOfMemoryError`` (see the module docs); ``False`` uses the
    plain ones, where a failed allocation gives a storage at address 0.
    Raises :class:`somalloc.SomallocError` with somalloc's text
    where there is no runtime or no GPU, or when the wheel's vendor is not
    PyTorch's; PyTorch's own ``RuntimeError`` when its allocator was already
    used. Calling it again after success does nothing. A plan (``plan:``)
    that cannot be made raises nothing, here or at an allocation: somalloc
    serves without it and says why (:func:`somalloc.plan_status`)."""
    global _allocator
    if _allocator is not None:
        if conf is not None:
            _native.configure(conf)
        return _allocator
    import torch

    from . import _start

    # Importing PyTorch loaded its runtime (initialising CUDA here would
    # initialise PyTorch's own allocator, which then cannot be swapped).
    _start("PyTorch", conf)
    hip = getattr(torch.version, "hip", None) is not None
    if hip != (_native.backend() == "rocm"):
        raise SomallocError(
            "this somalloc wheel is built for %s and PyTorch for %s: install somalloc-%s"
            % (_native.backend(), "ROCm" if hip else "CUDA", "rocm" if hip else "cuda"),
            "Unsupported",
        )
    global _raises_oom
    alloc, raising = None, False
    if raise_oom:
        alloc, why = _raising_allocator(torch)
        raising = alloc is not None
        if alloc is None:
            warnings.warn(
                "somalloc: out of memory will give PyTorch a storage at address 0, not "
                "torch.OutOfMemoryError: " + why,
                RuntimeWarning,
                stacklevel=2,
            )
    if alloc is None:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(
            library_path(), "somalloc_torch_alloc", "somalloc_torch_free"
        )
    torch.cuda.memory.change_current_allocator(alloc)
    _allocator = alloc
    _raises_oom = raising
    return alloc


def enabled():
    """Whether :func:`enable` made somalloc PyTorch's allocator."""
    return _allocator is not None


def raises_oom():
    """Whether an allocation somalloc cannot meet raises
    ``torch.OutOfMemoryError`` (the entry points of ``_torch_oom.cpp`` are
    in use), rather than giving a storage at address 0."""
    return _raises_oom


def last_error():
    """The text of somalloc's last error on this thread: why an allocation
    that PyTorch asked for came back empty."""
    return _native.last_error()
