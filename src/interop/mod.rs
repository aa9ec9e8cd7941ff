//! Working with the GPU crates a program already uses.
//!
//! * [`cudarc`](mod@self::cudarc) (feature `cudarc`): a cudarc stream becomes
//!   a somalloc [`Stream`](crate::Stream) safely
//!   ([`Stream::from_cudarc`](crate::Stream::from_cudarc)), a
//!   [`DeviceBuffer`](crate::DeviceBuffer) is an argument of a cudarc kernel
//!   launch ([`Launch`](self::cudarc::Launch)), and buffers copy to and from
//!   cudarc's `CudaSlice`.
//!
//! Neither feature picks anything for the application: cudarc's CUDA version
//! and loading mode stay the application's choice (they are features of its
//! own cudarc dependency, which Cargo unifies with somalloc's).

#[cfg(feature = "cudarc")]
pub mod cudarc;
