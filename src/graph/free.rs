//! The vendor free under capture: a free inside a capture, of memory from
//! outside it (deferred), or of a graph output after the capture.

use super::*;

/// The stream-ordered free of a vendor pool allocation
/// (`cudaFreeAsync`), under the capture rules of the [module docs](super).
///
/// # Safety
/// As for `Backend::free_async`: `ptr` came from the vendor's stream-ordered
/// allocation, is freed once, and every use is ordered before this point of
/// `stream`.
#[inline]
pub(crate) unsafe fn vendor_free(ptr: DevicePtr, stream: &Stream) -> Result<()> {
    // SAFETY: the caller's guarantees.
    unsafe { vendor_free_asked(ptr, stream, Asked::NOT_YET) }
}

/// [`vendor_free`] with what the caller already knows about `stream`'s
/// capture (so that a free asks at most once).
///
/// # Safety
/// As for [`vendor_free`].
#[inline]
pub(crate) unsafe fn vendor_free_asked(ptr: DevicePtr, stream: &Stream, asked: Asked) -> Result<()> {
    if !graph_allocs_live() && asked.quiet(stream) {
        // SAFETY: the caller's guarantees.
        return unsafe { Active::free_async(ptr, stream.raw()) };
    }
    // SAFETY: the caller's guarantees.
    unsafe { vendor_free_slow(ptr, stream, asked) }
}

#[cold]
unsafe fn vendor_free_slow(ptr: DevicePtr, stream: &Stream, asked: Asked) -> Result<()> {
    // The free's question, unless the caller asked already: memory from
    // outside a capture freed in it must wait for the graph.
    let capture = asked.capturing(stream)?;
    let alloc = if graph_allocs_live() {
        graph_alloc(ptr)
    } else {
        None
    };
    if let Some(c) = capture {
        match &alloc {
            Some(a) if a.id == c.id && c.status == CaptureStatus::Active => {
                forget_graph_alloc(ptr);
                // SAFETY: an allocation of this capture freed in it: a graph
                // free node (the caller's guarantees order its uses before).
                return unsafe { Active::free_async(ptr, stream.raw()) };
            }
            // An allocation of a capture that was invalidated: it never
            // existed, and the capture makes no graph.
            Some(a) if a.id == c.id => {
                forget_graph_alloc(ptr);
                return Ok(());
            }
            _ => {}
        }
        // Memory from outside this capture: the graph may use it on every
        // replay, so free it once the graph is gone.
        let item = Deferred {
            stream: stream.clone(),
            users: Vec::new(),
            // SAFETY (of the call inside): the caller's guarantees hold for
            // this free, which now only happens later, after the graph and
            // its launches are gone, on the same stream.
            free: Box::new(move |s: &Stream| unsafe { vendor_free(ptr, s) }),
        };
        return defer(item, &[c]);
    }
    match alloc {
        None => {
            // SAFETY: the caller's guarantees.
            unsafe { Active::free_async(ptr, stream.raw()) }
        }
        // SAFETY: the caller's guarantees.
        Some(a) => unsafe { free_graph_output(ptr, stream, a) },
    }
}

/// Frees, outside any capture, an allocation a capture made and did not
/// free (a graph output).
///
/// # Safety
/// As for [`vendor_free`].
unsafe fn free_graph_output(ptr: DevicePtr, stream: &Stream, alloc: GraphAlloc) -> Result<()> {
    forget_graph_alloc(ptr);
    let Some(record) = alloc.record else {
        // A graph somalloc did not make: the runtime refuses the free
        // (invalid value) exactly when no launch has allocated the memory,
        // and then there is nothing to free.
        // SAFETY: the caller's guarantees.
        return match unsafe { Active::free_async(ptr, stream.raw()) } {
            Err(Error::Vendor {
                code: VendorCode(INVALID_VALUE),
                ..
            }) => Ok(()),
            other => other,
        };
    };
    let last = {
        let mut state = lock(&record.state);
        if state.invalid {
            return Ok(());
        }
        // Later launches allocate this address again; the executable's drop
        // frees it then.
        state.orphans.push((ptr, false));
        if !state.launched {
            // Never launched: nothing was allocated.
            return Ok(());
        }
        state.last_launch.clone()
    };
    // Freed on the stream of the latest launch, after everything queued on
    // `stream` so far: later launches on that stream (which allocate the
    // address again) are then ordered after the free.
    let freed = match last {
        Some(last) if last != *stream => order_after(&last, stream).and_then(|()| {
            // SAFETY: the latest launch allocated it and nothing freed it
            // since; every use is ordered before this point of `stream` (the
            // caller's guarantees), and `last` now waits for that point.
            unsafe { Active::free_async(ptr, last.raw()) }
        }),
        // SAFETY: as above, on `stream` itself.
        _ => unsafe { Active::free_async(ptr, stream.raw()) },
    };
    if freed.is_err() {
        // Not freed: the executable's drop frees it (as it does the
        // allocations of later launches), so it is not lost.
        let mut state = lock(&record.state);
        if let Some(orphan) = state.orphans.iter_mut().rev().find(|o| o.0 == ptr) {
            orphan.1 = true;
        }
    }
    freed
}
