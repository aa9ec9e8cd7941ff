//! Adaptors: resources that wrap any [`MemoryResource`](crate::MemoryResource)
//! and add one behaviour each, so that they compose (as RMM's do).
//!
//! | adaptor | adds |
//! |---|---|
//! | [`StatisticsAdaptor`] | counts, bytes current / peak / total, a power-of-two size histogram |
//! | [`LimitingAdaptor`] | a byte cap: above it, [`Error::OutOfMemory`](crate::Error::OutOfMemory) |
//! | [`TrackingAdaptor`] | the outstanding allocations (optionally with backtraces), a leak report |
//! | [`RetryAdaptor`] | on out of memory: recovery steps (flush a cache, trim a pool, a callback), then one retry |
//! | [`RecordingAdaptor`] | every allocation and free into a trace file ([`trace`](crate::trace)), for replay and viewing |
//! | `PlanningAdaptor` (feature `plan`) | allocations served from a placement planned from a trace of an earlier run |
//!
//! `AutoPlanner` (feature `plan`) plans in the same run instead (the C
//! ABI's `plan:auto`): it records the first steps in memory, finds the
//! repeated step, and hands the plan's arena to the caller's streams at the
//! start of a later step. The planned placement is experimental, so its
//! Rust API (`PlanningAdaptor`, `AutoPlanner`, `PlannedArena` and what goes
//! with them, and the planner itself, `somalloc::plan`) is built only with
//! the crate's `plan` feature; the C ABI and the Python package turn it on.
//!
//! Each holds its inner resource as an `Arc<dyn MemoryResource>` and is one
//! itself, so a stack is built inside out and used through its outermost
//! layer.
//!
//! # Under stream capture
//!
//! The adaptors count host-side calls. An allocation made while its stream
//! is captured into a graph is counted once, when it is captured, not at
//! each replay of the graph (replays do not call the host); its free is
//! counted when it is made: inside the capture (a graph free node) or, for
//! a graph output, when its buffer is dropped. So after a capture whose
//! allocations are all freed inside it, the statistics show the allocation
//! and the free, nothing outstanding, and the limit's bytes are back where
//! they were, however often the graph is launched. The limit therefore caps
//! what is captured at a time, not the graph memory the replays use (that
//! is the device's: [`Device::graph_mem_stats`](crate::Device::graph_mem_stats)).
//! A buffer allocated outside a capture and dropped inside it stays
//! outstanding until its free is done, after the graph is gone.
//! The retry adaptor's steps skip capturing streams (a cache tier flush
//! leaves a capturing stream's blocks cached); a trim step is not
//! stream-ordered and runs as usual.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::adaptors::{Backtraces, LimitingAdaptor, RetryAdaptor, StatisticsAdaptor, TrackingAdaptor};
//! use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! let pool = MemPool::default_for(&dev)?;
//! let limited = Arc::new(LimitingAdaptor::new(Arc::new(pool.clone()), 8 << 30));
//! let tier = Arc::new(CacheTier::new(limited, CacheConfig::default())?);
//! let retry = Arc::new(RetryAdaptor::new(tier.clone()).flush_on_oom(&tier).trim_on_oom(&pool));
//! let tracked = Arc::new(TrackingAdaptor::new(retry, Backtraces::Off));
//! let stats = Arc::new(StatisticsAdaptor::new(tracked.clone()));
//! let res: Arc<dyn MemoryResource> = stats.clone();
//!
//! let buf = DeviceBuffer::<u8>::new_with(1 << 20, &res, &stream)?;
//! print!("{}", tracked.leak_report()); // one allocation outstanding
//! drop(buf);
//! println!("{}", stats.stats());
//! # Ok(()) }
//! ```

#[cfg(feature = "plan")]
mod auto;
mod limit;
#[cfg(feature = "plan")]
mod plan;
#[cfg(feature = "plan")]
mod planning;
mod record;
mod retry;
mod stats;
mod tracking;

#[cfg(feature = "plan")]
pub use auto::{AutoOptions, AutoPlanner, AutoStatus, SwitchPreview};
pub use limit::LimitingAdaptor;
#[cfg(feature = "plan")]
pub use plan::{PlanShare, PlanWaits, PlannedArena, StreamPlans, PLAN_WINDOW, STALL_MS};
#[cfg(feature = "plan")]
pub use planning::PlanningAdaptor;
pub use record::RecordingAdaptor;
pub use retry::{RetryAdaptor, RetryStats};
pub use stats::{ResourceStats, StatisticsAdaptor};
pub use tracking::{Backtraces, Outstanding, TrackingAdaptor};

#[cfg(test)]
mod tests;
