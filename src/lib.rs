//! # somalloc
//!
//! One stream-ordered GPU memory allocator for NVIDIA (CUDA) and AMD
//! (ROCm/HIP). The vendor is picked when the crate is built, with exactly one
//! of the features `cuda` or `rocm`; the API is the same on both.
//!
//! * [`Device`], [`Stream`], [`Event`]: the minimum needed to order work.
//! * [`MemPool`]: the vendor's stream-ordered memory pool (default, current,
//!   or created), with its release threshold, reuse policy, statistics and
//!   trimming.
//! * [`DeviceBuffer`]: a typed allocation whose allocation and free are
//!   enqueued on a stream; use on another stream goes through
//!   [`DeviceBuffer::use_on`].
//! * Peer access ([`MemPool::set_access`]) and IPC ([`MemPool::export_fd`],
//!   [`MemPool::import_fd`], [`DeviceBuffer::export`], [`DeviceBuffer::import`]).
//! * Pools of pinned host memory and of managed memory ([`PoolProperties`],
//!   [`Location`], [`AllocationType`]) and [`HostBuffer`]: staging memory
//!   for asynchronous host-device copies, allocated in stream order, read on
//!   the host only once the stream is done with it.
//! * [`MemoryResource`]: where stream-ordered memory comes from (a pool is
//!   one); [`DeviceBuffer::new_with`] allocates from any. The [`adaptors`]
//!   wrap any resource (statistics, limiting, tracking, retry on out of
//!   memory), and the stream cache tier ([`CacheTier`], [`StreamCache`])
//!   serves repeat allocations on a stream without a driver call.
//! * Stream capture into graphs ([`Stream::begin_capture`], [`Graph`],
//!   [`GraphExec`]): every allocation path is defined under capture (see
//!   the [`graph`] module).
//!
//! Errors are [`Error`] values, never panics: no runtime library
//! ([`Error::RuntimeNotFound`]), no device ([`Error::NoDevice`]), out of
//! memory ([`Error::OutOfMemory`], with the pool's statistics), bad input
//! ([`Error::InvalidArgument`]), or any other vendor code ([`Error::Vendor`]).
//!
//! ```no_run
//! use somalloc::{Device, DeviceBuffer, MemPool, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! let pool = MemPool::default_for(&dev)?;
//! pool.set_release_threshold(u64::MAX)?; // keep freed memory for reuse
//!
//! let mut a = DeviceBuffer::<u32>::new(1 << 20, &stream)?; // enqueued, no sync
//! a.memset(0)?;
//! let other = Stream::new(&dev)?;
//! a.use_on(&other)?; // `other` may now use `a`; the free will wait for it
//! drop(a); // the free is enqueued on `stream` after `other`'s work
//! stream.synchronize()?;
//! println!("{}", pool.stats()?);
//! # Ok(()) }
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod adaptors;
mod backend;
mod buffer;
pub mod cache;
mod device;
mod error;
pub mod graph;
mod host;
mod pool;
mod resource;
mod stream;
#[cfg(test)]
mod testing;
#[cfg(somalloc_kernels)]
pub mod testkit;

#[cfg(any(feature = "cudarc", feature = "hip-sys"))]
pub mod interop;

#[path = "../backends/common.rs"]
mod common;

// The backend: build.rs sets exactly one of these cfgs (and stops the build
// with a message naming the features otherwise), so the last arm is only a
// guard for builds that bypass build.rs.
cfg_if::cfg_if! {
    if #[cfg(somalloc_cuda)] {
        #[path = "../backends/cuda/mod.rs"]
        mod cuda;
        pub(crate) type Active = cuda::Cuda;
    } else if #[cfg(somalloc_rocm)] {
        #[path = "../backends/rocm/mod.rs"]
        mod rocm;
        pub(crate) type Active = rocm::Rocm;
    } else {
        compile_error!("somalloc: enable exactly one backend feature: `cuda` or `rocm`");
    }
}

pub use buffer::{DeviceBuffer, ExportedBuffer};
pub use bytemuck::Pod;
pub use cache::{CacheConfig, CacheStats, CacheTier, Headroom, StreamCache, StreamCacheStats};
pub use device::Device;
pub use error::{drop_errors, DropErrors, Error, Result, VendorCode};
pub use graph::{
    pending_graph_frees, reclaim_graph_frees, CaptureMode, CaptureStatus, Graph, GraphExec, GraphMemStats,
};
pub use host::{pointer_info, HostBuffer, MemoryType, PointerInfo};
pub use pool::{
    AllocationType, ExportHandle, Location, MemPool, PeerAccess, Placement, PoolProperties, PoolStats,
    ReusePolicy,
};
pub use resource::MemoryResource;
pub use stream::{Event, Stream};
