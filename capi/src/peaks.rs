//! Resetting the peaks of the statistics (`somalloc_reset_peaks`).

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::error::{CapiError, SomallocStatus};
use crate::state::{self, DeviceState};

/// Starts the peaks of `device`'s counters over from their current values
/// (`-1`: every device in use): `live_peak_bytes`, the pool's
/// `pool_reserved_peak_bytes` and `pool_used_peak_bytes`, and with an arena
/// `arena_mapped_peak_bytes`. Nothing else changes: the counts of
/// allocations and frees, the failed ones and the cache tier's counts go on
/// from where they are. With `pool:default` the pool is the device's
/// default pool, whose peaks are the process's, other users of that pool
/// included.
pub fn reset_peaks(device: i32) -> Result<(), CapiError> {
    state::for_devices(device, reset_device)
}

fn reset_device(dev: &DeviceState) -> Result<(), CapiError> {
    let c = &dev.counters;
    // An allocation on another thread between the load and the store could
    // leave the peak below the live bytes: the second load raises it again.
    c.live_peak
        .store(c.live_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    c.live_peak
        .fetch_max(c.live_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    dev.pool.reset_peaks()?;
    if let Some(arena) = &dev.arena {
        arena.reset_peaks();
    }
    Ok(())
}

/// Starts the peaks of the counters of `device` (`-1`: every device in
/// use) over from their current values: `live_peak_bytes`, the pool's
/// `pool_reserved_peak_bytes` and `pool_used_peak_bytes`, and with
/// `pool:vmm` the arena's `arena_mapped_peak_bytes`; every other counter of
/// `SomallocStats` keeps its value. What PyTorch's
/// `torch.cuda.reset_peak_memory_stats()` does for its own allocator. With
/// `pool:default` the pool's peaks are those of the device's default pool,
/// which the whole process shares. Like `somalloc_stats`, the first call
/// for a device makes its state.
///
/// ```c
/// somalloc_reset_peaks(0);
/// run_one_step();
/// SomallocStats s;
/// somalloc_stats(0, &s, sizeof s);   /* s.live_peak_bytes: the step's peak */
/// ```
#[no_mangle]
pub extern "C" fn somalloc_reset_peaks(device: c_int) -> SomallocStatus {
    crate::run(|| reset_peaks(device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Status;

    /// No GPU is needed: a device that does not exist is refused with the
    /// status of the machine (no runtime, no device, or an invalid
    /// ordinal), and the text says so.
    #[test]
    fn a_device_that_is_not_there_is_refused() {
        let st = somalloc_reset_peaks(1 << 20);
        assert_ne!(st, Status::Ok);
        assert!(
            matches!(
                st,
                Status::RuntimeNotFound | Status::NoDevice | Status::InvalidDevice
            ),
            "{st:?}"
        );
        assert!(!crate::last_error_text().is_empty());
    }

    /// Every device in use: none were used in this test, so nothing to do
    /// where the runtime answers; without a runtime, its status.
    #[test]
    fn every_device_in_use() {
        let st = somalloc_reset_peaks(-1);
        assert!(
            matches!(st, Status::Ok | Status::RuntimeNotFound | Status::NoDevice),
            "{st:?}"
        );
    }
}
