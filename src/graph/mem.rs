//! The graph memory of a device ([`GraphMemStats`], trim).

use super::*;

// ---------------------------------------------------------------------------
// Graph memory of a device.

/// The device's graph memory (`cudaDeviceGetGraphMemAttribute`): what
/// graph allocation nodes use, apart from the pools. Freed graph memory
/// stays counted until [`Device::graph_mem_trim`].
///
/// Read-only: fields may be added, so it is made only by somalloc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphMemStats {
    /// Bytes in use by graph allocations now.
    pub used_current: usize,
    /// Highest `used_current` since the last reset.
    pub used_peak: usize,
    /// Bytes reserved for graph allocations now.
    pub reserved_current: usize,
    /// Highest `reserved_current` since the last reset.
    pub reserved_peak: usize,
}

impl fmt::Display for GraphMemStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "graph memory: used {} (peak {}), reserved {} (peak {})",
            self.used_current, self.used_peak, self.reserved_current, self.reserved_peak
        )
    }
}

impl Device {
    /// The device's graph-memory counters.
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// println!("{}", dev.graph_mem_stats()?);
    /// # Ok(()) }
    /// ```
    pub fn graph_mem_stats(&self) -> Result<GraphMemStats> {
        let get = |a| Active::graph_mem_get(self.ordinal(), a).map(crate::pool_stats::bytes);
        Ok(GraphMemStats {
            used_current: get(GraphMemAttr::UsedMemCurrent)?,
            used_peak: get(GraphMemAttr::UsedMemHigh)?,
            reserved_current: get(GraphMemAttr::ReservedMemCurrent)?,
            reserved_peak: get(GraphMemAttr::ReservedMemHigh)?,
        })
    }

    /// Returns the graph memory that no executable graph is using back to
    /// the system (`cudaDeviceGraphMemTrim`).
    ///
    /// ```no_run
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = somalloc::Device::get(0)?;
    /// dev.graph_mem_trim()?;
    /// # Ok(()) }
    /// ```
    pub fn graph_mem_trim(&self) -> Result<()> {
        Active::graph_mem_trim(self.ordinal())
    }
}
