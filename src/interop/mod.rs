//! Working with the GPU crates a program already uses.
//!
//! * `cudarc` (feature `cudarc`): a cudarc stream becomes a somalloc
//!   [`Stream`](crate::Stream) safely (`Stream::from_cudarc`), a
//!   [`DeviceBuffer`](crate::DeviceBuffer) is an argument of a cudarc kernel
//!   launch (`interop::cudarc::Launch`), and buffers copy to and from
//!   cudarc's `CudaSlice`.
//! * `hip_sys` (feature `hip-sys`): typed constructors from, and getters
//!   for, the handle types of the `hip-sys` crate (`Stream::from_hip_sys`,
//!   `as_hip_sys`).
//!
//! Neither feature picks anything for the application: cudarc's CUDA version
//! and loading mode stay the application's choice (they are features of its
//! own cudarc dependency, which Cargo unifies with somalloc's).

#[cfg(feature = "cudarc")]
pub mod cudarc;
#[cfg(feature = "hip-sys")]
pub mod hip_sys;
