//! The guide: everything the README leaves out, one page per subject. The
//! pages are the files of `docs/` in the repository, included here so that
//! their Rust examples compile as doc tests.
//!
//! * [`deployment`]: what a machine needs to run a program built with
//!   somalloc, and what works on which vendor and runtime.
//! * [`features`]: the crate's features, API stability, dependencies.
//! * [`semantics`]: what a buffer, a stream and a pool promise, the same on
//!   every vendor; pinned host memory.
//! * [`graphs`]: stream capture and graphs.
//! * [`resources`]: memory resources, adaptors and the stream cache tier.
//! * [`memory_history`]: recording a program's allocations, replaying and
//!   looking at them.
//! * [`cudarc`] and [`hip_sys`]: working with those crates.
//! * [`c_abi`]: somalloc from C, C++, PyTorch and CuPy, and the real-model
//!   benchmark.
//! * [`measured`]: the benchmark's recorded figures.
//! * [`proofs`]: what is model-checked, property-tested and stress-tested.
//! * [`bad_input`]: what every kind of bad input and bad environment gives.
//! * [`development`]: the bindings, running the GPU suite without cargo,
//!   the repository's layout.

#[doc = include_str!("../docs/deployment.md")]
pub mod deployment {}

#[doc = include_str!("../docs/features.md")]
pub mod features {}

#[doc = include_str!("../docs/semantics.md")]
pub mod semantics {}

#[doc = include_str!("../docs/graphs.md")]
pub mod graphs {}

#[doc = include_str!("../docs/resources.md")]
pub mod resources {}

#[doc = include_str!("../docs/memory_history.md")]
pub mod memory_history {}

/// With cudarc (feature `cudarc`; the page's example is compiled when the
/// feature is on).
#[cfg_attr(feature = "cudarc", doc = include_str!("../docs/cudarc.md"))]
pub mod cudarc {}

/// With hip-sys (feature `hip-sys`; the page's example is compiled when the
/// feature is on).
#[cfg_attr(feature = "hip-sys", doc = include_str!("../docs/hip_sys.md"))]
pub mod hip_sys {}

#[doc = include_str!("../docs/c_abi.md")]
pub mod c_abi {}

#[doc = include_str!("../docs/measured.md")]
pub mod measured {}

#[doc = include_str!("../docs/proofs.md")]
pub mod proofs {}

#[doc = include_str!("../docs/bad_input.md")]
pub mod bad_input {}

#[doc = include_str!("../docs/development.md")]
pub mod development {}
