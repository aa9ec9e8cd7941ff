"""somalloc under PyTorch, through ``torch.cuda.memory.CUDAPluggableAllocator``.

``enable()`` must run before PyTorch allocates anything on the GPU (PyTorch
refuses to swap an allocator that has been used)::

    import somalloc.torch
    somalloc.torch.enable()            # or enable("cache:off"), ...
    x = torch.randn(1024, 1024, device="cuda")

Every CUDA (or ROCm) tensor of the process is then allocated by somalloc on
the stream that is current when it is made, and freed on that stream when
PyTorch drops it. PyTorch gives a pluggable allocator no ``record_stream``
hook from Python: see the README for what that means for
``Tensor.record_stream``.
"""

from . import SomallocError, _native, library_path

_allocator = None


def enable(conf=None):
    """Makes somalloc PyTorch's GPU allocator.

    ``conf``: a configuration string (``None``: ``SOMALLOC_CONF`` or the
    defaults). Raises :class:`somalloc.SomallocError` with somalloc's text
    where there is no runtime or no GPU, or when the wheel's vendor is not
    PyTorch's; PyTorch's own ``RuntimeError`` when its allocator was already
    used. Calling it again after success does nothing."""
    global _allocator
    if _allocator is not None:
        if conf is not None:
            _native.configure(conf)
        return _allocator
    import torch

    from . import _use_loaded_runtime

    # Importing PyTorch loaded its runtime (initialising CUDA here would
    # initialise PyTorch's own allocator, which then cannot be swapped).
    _use_loaded_runtime()
    if conf is not None:
        _native.configure(conf)
    try:
        _native.device_count()
    except SomallocError as e:
        raise SomallocError(
            "somalloc cannot serve PyTorch here: " + e.args[0], e.args[1]
        ) from None
    hip = getattr(torch.version, "hip", None) is not None
    if hip != (_native.backend() == "rocm"):
        raise SomallocError(
            "this somalloc wheel is built for %s and PyTorch for %s: install somalloc-%s"
            % (_native.backend(), "ROCm" if hip else "CUDA", "rocm" if hip else "cuda"),
            "Unsupported",
        )
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        library_path(), "somalloc_torch_alloc", "somalloc_torch_free"
    )
    torch.cuda.memory.change_current_allocator(alloc)
    _allocator = alloc
    return alloc


def enabled():
    """Whether :func:`enable` made somalloc PyTorch's allocator."""
    return _allocator is not None


def last_error():
    """The text of somalloc's last error on this thread: why an allocation
    that PyTorch asked for came back empty."""
    return _native.last_error()
