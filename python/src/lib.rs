//! `somalloc._native`: the functions the Python package calls, over the
//! same state as the C entry points (which this module exports too).
//!
//! The extension module of the `somalloc-cuda` / `somalloc-rocm` wheels
//! (built by maturin, see `python/build-wheel.sh`). Depends on the C ABI
//! crate (`capi/`, for the per-device state and the entry points PyTorch
//! loads) and on pyo3; the Python side is in `python/somalloc/`.

#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_int, c_void};

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

mod oom;

// The C entry points live in this shared object too: PyTorch's
// CUDAPluggableAllocator looks them up in this file by name (the raising
// allocation function, `somalloc_torch_alloc_raising`, is `oom.rs`'s).
pub use somalloc::{somalloc_torch_alloc, somalloc_torch_free};

extern "C" {
    // The C ABI's entry point (capi/src/peaks.rs), linked from the same crate.
    fn somalloc_reset_peaks(device: c_int) -> somalloc::SomallocStatus;
}

create_exception!(
    _native,
    SomallocError,
    PyRuntimeError,
    "An error of somalloc: args are (text, status name)."
);

fn err(e: somalloc::CapiError) -> PyErr {
    SomallocError::new_err((e.text, format!("{:?}", e.status)))
}

/// Sets the configuration (None: from SOMALLOC_CONF), before the first use.
#[pyfunction]
#[pyo3(signature = (conf=None))]
fn configure(conf: Option<&str>) -> PyResult<()> {
    somalloc::configure(conf).map_err(err)
}

/// How many devices the runtime sees (an error without a runtime or a device).
#[pyfunction]
fn device_count() -> PyResult<usize> {
    somalloc::device_count().map_err(err)
}

/// Allocates `size` bytes on `device` in the order of the stream handle
/// `stream`; the address (0 for 0 bytes).
#[pyfunction]
fn alloc(size: usize, device: i32, stream: usize) -> PyResult<usize> {
    somalloc::allocate(size, device, stream as *mut c_void)
        .map(|p| p as usize)
        .map_err(err)
}

/// Frees what `alloc` returned, in the order of `stream`. The caller orders
/// every use of the memory before that point of `stream` (bad addresses,
/// sizes, devices and second frees are refused with an error).
#[pyfunction]
fn free(ptr: usize, size: usize, device: i32, stream: usize) -> PyResult<()> {
    // SAFETY: the Python caller's promise in the docs above (the package's
    // CuPy allocator frees on the allocation stream once CuPy drops the
    // memory, as CuPy's own stream-ordered pool does); everything else is
    // checked by the registry.
    unsafe { somalloc::deallocate(ptr as *mut c_void, size, device, stream as *mut c_void) }.map_err(err)
}

/// The counters of `device` as a dict.
#[pyfunction]
fn stats<'py>(py: Python<'py>, device: i32) -> PyResult<Bound<'py, PyDict>> {
    let s = somalloc::stats(device).map_err(err)?;
    let d = PyDict::new(py);
    let fields: [(&str, u64); 47] = [
        ("pool_reserved_bytes", s.pool_reserved_bytes),
        ("pool_reserved_peak_bytes", s.pool_reserved_peak_bytes),
        ("pool_used_bytes", s.pool_used_bytes),
        ("pool_used_peak_bytes", s.pool_used_peak_bytes),
        ("live_allocations", s.live_allocations),
        ("live_bytes", s.live_bytes),
        ("live_peak_bytes", s.live_peak_bytes),
        ("allocations", s.allocations),
        ("frees", s.frees),
        ("failed_allocations", s.failed_allocations),
        ("failed_frees", s.failed_frees),
        ("cache_enabled", s.cache_enabled),
        ("cache_streams", s.cache_streams),
        ("cache_cached_bytes", s.cache_cached_bytes),
        ("cache_hits", s.cache_hits),
        ("cache_misses", s.cache_misses),
        ("cache_bypassed", s.cache_bypassed),
        ("cache_spilled", s.cache_spilled),
        ("cache_released", s.cache_released),
        ("cache_captured", s.cache_captured),
        ("plan_arena_bytes", s.plan_arena_bytes),
        ("plan_served", s.plan_served),
        ("plan_refused", s.plan_refused),
        ("plan_diverted", s.plan_diverted),
        ("plan_diverted_bytes", s.plan_diverted_bytes),
        ("plan_waits", s.plan_waits),
        ("plan_wait_events", s.plan_wait_events),
        ("plan_waits_timed", s.plan_waits_timed),
        ("plan_wait_stall_ns", s.plan_wait_stall_ns),
        ("plan_waits_passed", s.plan_waits_passed),
        ("plan_status", s.plan_status),
        ("arena_enabled", s.arena_enabled),
        ("arena_mapped_bytes", s.arena_mapped_bytes),
        ("arena_mapped_peak_bytes", s.arena_mapped_peak_bytes),
        ("arena_reserved_bytes", s.arena_reserved_bytes),
        ("arena_largest_free_bytes", s.arena_largest_free_bytes),
        ("arena_fragmentation_ppm", s.arena_fragmentation_ppm),
        ("arena_idle_bytes", s.arena_idle_bytes),
        ("arena_maps", s.arena_maps),
        ("arena_unmaps", s.arena_unmaps),
        ("arena_pool_allocations", s.arena_pool_allocations),
        ("arena_moves", s.arena_moves),
        ("arena_stream_waits", s.arena_stream_waits),
        ("arena_vmm_ns", s.arena_vmm_ns),
        ("arena_lock_waits", s.arena_lock_waits),
        ("arena_lock_wait_ns", s.arena_lock_wait_ns),
        ("arena_vmm_calls", s.arena_vmm_calls),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// What became of `plan:` on `device`: (status, why). Status 0: no plan
/// asked for; 1: the plan serves the device's streams; 2: a plan was asked
/// for and could not be made, allocations are served without it, and `why`
/// says why ("" otherwise).
#[pyfunction]
fn plan_status(device: i32) -> PyResult<(u64, String)> {
    somalloc::plan_status(device).map_err(err)
}

/// The mapped chunks of the device's virtual-memory arena (`pool:vmm`) in
/// address order, as (address, bytes); empty without an arena.
#[pyfunction]
fn segments(device: i32) -> PyResult<Vec<(u64, u64)>> {
    let s = somalloc::segments(device).map_err(err)?;
    Ok(s.iter().map(|s| (s.address, s.bytes)).collect())
}

/// Starts the peaks of the counters over from their current values (-1:
/// every device in use).
#[pyfunction]
fn reset_peaks(device: i32) -> PyResult<()> {
    // SAFETY: a plain C function of somalloc; any device value is checked.
    let status = unsafe { somalloc_reset_peaks(device) };
    if status == somalloc::SomallocStatus::Ok {
        return Ok(());
    }
    Err(SomallocError::new_err((
        somalloc::last_error_text(),
        format!("{status:?}"),
    )))
}

/// Cached blocks back to the pool (-1: every device in use).
#[pyfunction]
fn flush(device: i32) -> PyResult<()> {
    somalloc::flush(device).map_err(err)
}

/// Unused pool memory back to the device, keeping at most `keep_bytes`.
#[pyfunction]
fn trim(device: i32, keep_bytes: usize) -> PyResult<()> {
    somalloc::trim(device, keep_bytes).map_err(err)
}

/// Flush, wait for the streams, trim to nothing (-1: every device in use).
#[pyfunction]
fn empty_cache(device: i32) -> PyResult<()> {
    somalloc::empty_cache(device).map_err(err)
}

/// Forgets a stream (its cached blocks go back to the pool); whether it was known.
#[pyfunction]
fn forget_stream(device: i32, stream: usize) -> PyResult<bool> {
    somalloc::forget_stream(device, stream as *mut c_void).map_err(err)
}

/// "cuda" or "rocm".
#[pyfunction]
fn backend() -> &'static str {
    somalloc::backend()
}

/// The text of the calling thread's last error ("" after a success): what
/// PyTorch's entry points left when they returned NULL.
#[pyfunction]
fn last_error() -> String {
    somalloc::last_error_text()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SomallocError", m.py().get_type::<SomallocError>())?;
    m.add_function(wrap_pyfunction!(configure, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(alloc, m)?)?;
    m.add_function(wrap_pyfunction!(free, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(plan_status, m)?)?;
    m.add_function(wrap_pyfunction!(segments, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peaks, m)?)?;
    m.add_function(wrap_pyfunction!(oom::torch_oom_init, m)?)?;
    m.add_function(wrap_pyfunction!(oom::torch_oom_ready, m)?)?;
    m.add_function(wrap_pyfunction!(flush, m)?)?;
    m.add_function(wrap_pyfunction!(trim, m)?)?;
    m.add_function(wrap_pyfunction!(empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(forget_stream, m)?)?;
    m.add_function(wrap_pyfunction!(backend, m)?)?;
    m.add_function(wrap_pyfunction!(last_error, m)?)?;
    Ok(())
}
