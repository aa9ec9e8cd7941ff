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
    pub reserved_current: u64,
    /// Highest `reserved_current` since creation or the last reset.
    pub reserved_high: u64,
    /// Bytes handed out to allocations now.
    pub used_current: u64,
    /// Highest `used_current` since creation or the last reset.
    pub used_high: u64,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "used {} (high {}), reserved {} (high {})",
            self.used_current, self.used_high, self.reserved_current, self.reserved_high
        )
    }
}
