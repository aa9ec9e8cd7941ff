"""somalloc under CuPy, through ``cupy.cuda.set_allocator``.

::

    import somalloc.cupy
    somalloc.cupy.enable()
    with cupy.cuda.Stream() as s:
        x = cupy.arange(10**6)      # allocated in the order of s

Each allocation is made in the order of CuPy's current stream and freed in
the order of that same stream when CuPy drops the memory (as CuPy's own
stream-ordered pool does). While the cache tier is on, somalloc keeps blocks
for each stream by its handle, so the allocator keeps each CuPy stream it
allocated on alive until :func:`release_streams` (or
``somalloc.empty_cache()``), which first returns those blocks to the pool.
"""

from . import SomallocError, _native

_streams = {}


class _Block(object):
    """Owns one allocation; frees it, on its stream, when CuPy lets go."""

    __slots__ = ("ptr", "size", "device", "stream", "__weakref__")

    def __init__(self, ptr, size, device, stream):
        self.ptr = ptr
        self.size = size
        self.device = device
        self.stream = stream

    def __del__(self):
        try:
            _native.free(self.ptr, self.size, self.device, self.stream)
        except Exception:
            # Counted in stats()["failed_frees"]; nothing to raise into.
            pass


def malloc(size):
    """The allocator function for ``cupy.cuda.set_allocator``: ``size``
    bytes on the current device, in the order of CuPy's current stream."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream()
    handle = int(stream.ptr)
    if handle > 2 and (device, handle) not in _streams:
        _streams[(device, handle)] = stream
    try:
        ptr = _native.alloc(int(size), device, handle)
    except SomallocError as e:
        if e.args[1] == "OutOfMemory":
            raise cupy.cuda.memory.OutOfMemoryError(int(size), -1) from e
        raise
    block = _Block(ptr, int(size), device, handle)
    mem = cupy.cuda.memory.UnownedMemory(ptr, int(size), block, device)
    return cupy.cuda.memory.MemoryPointer(mem, 0)


def enable(conf=None):
    """Makes somalloc CuPy's allocator (for the current thread and every
    thread that has not set its own). Raises :class:`somalloc.SomallocError`
    with somalloc's text where there is no runtime or no GPU."""
    import cupy

    from . import _start

    try:
        cupy.cuda.runtime.getDeviceCount()  # loads CuPy's runtime
    except Exception:
        pass
    _start("CuPy", conf)
    cupy.cuda.set_allocator(malloc)


def release_streams():
    """Returns the cached blocks of every CuPy stream the allocator kept,
    and lets the streams go (CuPy may then destroy them). A stream somalloc
    still needs (live blocks of its plan, ``plan:``) is kept for a later
    call. Any other error is raised after the other streams are let go."""
    first = None
    for (device, handle) in list(_streams):
        try:
            _native.forget_stream(device, handle)
        except SomallocError as e:
            # Still in use (live blocks of its plan, `plan:`): kept, and
            # let go by a later call once they are freed.
            if len(e.args) < 2 or e.args[1] != "Busy":
                first = first or e
            continue
        del _streams[(device, handle)]
    if first is not None:
        raise first
