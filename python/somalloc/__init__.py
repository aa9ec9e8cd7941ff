"""somalloc: one stream-ordered GPU memory allocator for CUDA and ROCm.

This package puts somalloc under PyTorch (:mod:`somalloc.torch`) and CuPy
(:mod:`somalloc.cupy`). It installs and imports on machines without a GPU;
what needs one raises :class:`SomallocError` with somalloc's own text.

Configuration is a string of ``key:value`` pairs (the same as the C
library's ``SOMALLOC_CONF``), given before the first allocation::

    import somalloc.torch
    somalloc.torch.enable("cache:on,cache_total_cap:2GiB")
    ...
    print(somalloc.stats())
    somalloc.empty_cache()
"""

from . import _native
from ._native import SomallocError

__all__ = [
    "PLAN_NOT_USED",
    "PLAN_OFF",
    "PLAN_RECORDING",
    "PLAN_SERVING",
    "SomallocError",
    "available",
    "backend",
    "configure",
    "device_count",
    "empty_cache",
    "flush",
    "forget_stream",
    "library_path",
    "plan_status",
    "segments",
    "stats",
    "trim",
]

__version__ = "0.1.0"


def _use_loaded_runtime():
    """Points somalloc at the vendor runtime that a framework already loaded
    into this process (PyTorch and CuPy bring their own, from their wheels,
    often outside the loader's search path), unless ``SOMALLOC_CUDART`` /
    ``SOMALLOC_AMDHIP`` says otherwise. Called by the ``enable`` functions
    after the framework is imported, before somalloc's first use."""
    import os

    var, stem = (
        ("SOMALLOC_AMDHIP", "libamdhip64.so")
        if _native.backend() == "rocm"
        else ("SOMALLOC_CUDART", "libcudart.so")
    )
    if os.environ.get(var):
        return
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith(stem):
                    os.environ[var] = path
                    return
    except OSError:
        pass


def _start(framework, conf):
    """What every ``enable`` does once its framework has loaded the vendor
    runtime: points somalloc at that runtime, applies ``conf``, and checks
    that a device answers, or raises :class:`SomallocError` saying that
    somalloc cannot serve ``framework`` here, and why."""
    _use_loaded_runtime()
    if conf is not None:
        _native.configure(conf)
    try:
        _native.device_count()
    except SomallocError as e:
        raise SomallocError(
            "somalloc cannot serve %s here: %s" % (framework, e.args[0]), e.args[1]
        ) from None


def library_path():
    """The shared object that holds the C entry points (this package's
    extension module), for ``CUDAPluggableAllocator`` and ``ctypes``."""
    return _native.__file__


def backend():
    """``"cuda"`` or ``"rocm"``: the vendor this wheel was built for."""
    return _native.backend()


def configure(conf=None):
    """Sets the configuration (``None``: from ``SOMALLOC_CONF``). Only before
    the first allocation; afterwards only the configuration in force is
    accepted again."""
    _native.configure(conf)


def device_count():
    """How many devices the runtime sees; :class:`SomallocError` without a
    runtime or a device."""
    return _native.device_count()


def available():
    """``(True, "")`` when somalloc can allocate here, else ``(False, why)``."""
    try:
        _native.device_count()
        return True, ""
    except SomallocError as e:
        return False, e.args[0]


def _device(device):
    if device is not None:
        return int(device)
    try:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.current_device()
    except Exception:
        pass
    return 0


def stats(device=None):
    """The counters of a device (default: PyTorch's current device, or 0) as
    a dict: the pool's reserved and used bytes (current and high), live
    allocations and bytes, allocation and free counts (failed ones too), the
    cache tier's cached bytes, hits, misses, spills and releases, with
    ``plan:`` the plan's (``plan_status``: see :func:`plan_status`), and with
    ``pool:vmm`` the virtual-memory arena's (``arena_enabled`` is 1 when an
    arena serves the device; ``arena_mapped_bytes`` and
    ``arena_mapped_peak_bytes``, ``arena_reserved_bytes``,
    ``arena_largest_free_bytes``, ``arena_fragmentation_ppm`` in parts per
    million, ``arena_idle_bytes``, ``arena_maps``, ``arena_unmaps``,
    ``arena_pool_allocations``, the allocations its pool served instead,
    ``arena_moves``, the free chunks it moved instead of mapping memory,
    ``arena_stream_waits``, the device waits a stream made to take another
    stream's frees instead of growing, ``arena_vmm_ns``, the host's time in
    its virtual-memory calls, and ``arena_lock_waits`` and
    ``arena_lock_wait_ns``, the calls that found it busy with another
    thread's call and their time waiting, and ``arena_vmm_calls``, its
    calls of the runtime's virtual-memory API)."""
    return _native.stats(_device(device))


def segments(device=None):
    """The mapped chunks of a device's virtual-memory arena (``pool:vmm``;
    default device: PyTorch's current device, or 0) in address order, as a
    list of ``(address, bytes)`` tuples: each is one physical allocation,
    what to register with NCCL; a tensor may span adjacent segments. An
    empty list without an arena (another ``pool:``, or a device without
    virtual-memory management). Like :func:`stats`, the first call for a
    device makes somalloc's state there::

        for address, nbytes in somalloc.segments():
            print(hex(address), nbytes)
    """
    return _native.segments(_device(device))


PLAN_OFF, PLAN_SERVING, PLAN_NOT_USED, PLAN_RECORDING = 0, 1, 2, 3


def plan_status(device=None):
    """What became of ``plan:`` on a device (default: PyTorch's current
    device, or 0), as ``(status, why)``: :data:`PLAN_OFF` (0, no plan asked
    for), :data:`PLAN_SERVING` (1, the plan serves the device's streams) or
    :data:`PLAN_NOT_USED` (2, a plan was asked for and could not be made: a
    trace missing, unreadable, without events of this device, or that no
    plan can be made from), or with ``plan:auto`` :data:`PLAN_RECORDING` (3,
    the run is recorded and not served from its plan yet; ``why`` says where
    the planner stands, and once it serves, where it switched). A plan not used never makes an allocation fail:
    somalloc serves without it, says why once on stderr, and ``why`` says it
    again (``""`` for the other two). Like :func:`stats`, the first call for
    a device makes somalloc's state there (and the plan)::

        status, why = somalloc.plan_status()
        if status == somalloc.PLAN_NOT_USED:
            print("served without the plan:", why)
    """
    return _native.plan_status(_device(device))


def flush(device=None):
    """Returns the cached blocks to the pool (``None``: every device in use)."""
    _native.flush(-1 if device is None else int(device))


def trim(device=None, keep_bytes=0):
    """Releases unused pool memory to the device, keeping at most
    ``keep_bytes`` (``None``: every device in use); with ``pool:vmm``, also
    the arena's idle chunks, once the streams' frees are complete, keeping
    at most ``keep_bytes`` of them mapped."""
    _native.trim(-1 if device is None else int(device), int(keep_bytes))


def empty_cache(device=None):
    """Flushes the caches, waits for the streams somalloc has seen, and
    releases all unused pool memory, with ``pool:vmm`` every idle chunk of
    the arena too (``None``: every device in use). Also
    lets go of the CuPy streams the CuPy allocator kept alive."""
    _native.empty_cache(-1 if device is None else int(device))
    import sys

    mod = sys.modules.get(__name__ + ".cupy")
    if mod is not None:
        mod.release_streams()


def forget_stream(stream, device=None):
    """Forgets a stream handle (an int): its cached blocks go back to the
    pool. Call it before destroying a stream that somalloc allocated on while
    the cache tier is on."""
    return _native.forget_stream(_device(device), int(stream))
