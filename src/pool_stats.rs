//! The byte counts of a pool, in a module of their own: [`Error`] carries
//! them (`OutOfMemory`), and the pool code returns them.
//!
//! [`Error`]: crate::Error

use std::fmt;

/// Byte counts of a pool, as the runtime reports them.
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Bytes the pool holds from the device now.
    pub reserved_current: usize,
    /// Highest `reserved_current` since creation or the last reset.
    pub reserved_peak: usize,
    /// Bytes handed out to allocations now.
    pub used_current: usize,
    /// Highest `used_current` since creation or the last reset.
    pub used_peak: usize,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "used {} (peak {}), reserved {} (peak {})",
            self.used_current, self.used_peak, self.reserved_current, self.reserved_peak
        )
    }
}

/// A byte count the runtime reports as a 64-bit integer, as `usize` (on a
/// 64-bit host the same number; a count above `usize::MAX` saturates).
pub(crate) fn bytes(reported: u64) -> usize {
    usize::try_from(reported).unwrap_or(usize::MAX)
}
