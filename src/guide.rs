//! The guide: everything the API docs leave out, one page per subject. The
//! pages are the files of `docs/` in the repository, included here so that
//! their Rust examples compile as doc tests.
//!
//! * [`getting_started`]: a first program, devices and streams, the fast
//!   path, buffers, resources and statistics.
//! * [`deployment`]: what a machine needs to run a program built with
//!   somalloc, and what works on which vendor and runtime.
//! * [`features`]: the crate's features, API stability, dependencies.
//! * [`semantics`]: what a buffer, a stream and a pool promise, the same on
//!   every vendor; pinned host memory.
//! * [`graphs`]: stream capture and graphs.
//! * [`resources`]: memory resources, adaptors and the stream cache tier.
//! * [`memory_history`]: recording a program's allocations, replaying and
//!   looking at them.
//! * [`plan`]: planned placement (experimental).
//! * [`cudarc`] and [`hip_sys`]: working with those crates.
//! * [`c`]: somalloc from C and C++.
//! * [`pytorch`]: somalloc under PyTorch and CuPy.
//! * [`configuration`]: the C library's and the Python package's
//!   configuration keys (`SOMALLOC_CONF`).
//! * [`bad_input`]: what every kind of bad input and bad environment gives.
//!
//! The measurements, what is proven and tested, and the notes for working
//! on somalloc itself are pages of the repository:
//! [Measured](https://github.com/somalloc/somalloc/blob/main/docs/measured.md),
//! [benches/RESULTS.md](https://github.com/somalloc/somalloc/blob/main/benches/RESULTS.md),
//! [What is proven and what is tested](https://github.com/somalloc/somalloc/blob/main/docs/proofs.md)
//! and [Development](https://github.com/somalloc/somalloc/blob/main/docs/development.md).

// Links between the pages. On GitHub a page of docs/ links to another as a
// relative file, so the pages use reference links labelled with the file:
// `[Graphs][graphs.md]`, defined at the page's end as `[graphs.md]: graphs.md`.
// `links!()` defines every such label again, before the page's text; the
// first definition of a label wins (CommonMark), so in the crate docs the same
// link goes to the guide's module (or, for a file outside the crate docs, to
// the repository). The definitions come before any other text of the module's
// docs (after a paragraph they would be read as more of its text), and render
// as nothing. `python3 ci/doc-links.py` (a CI cell) fails on a relative link
// in an included page whose label is not defined here.
macro_rules! links {
    () => {
        concat!(
            "[bad_input.md]: crate::guide::bad_input\n",
            "[c.md]: crate::guide::c\n",
            "[configuration.md]: crate::guide::configuration\n",
            "[cudarc.md]: crate::guide::cudarc\n",
            "[deployment.md]: crate::guide::deployment\n",
            "[features.md]: crate::guide::features\n",
            "[getting_started.md]: crate::guide::getting_started\n",
            "[graphs.md]: crate::guide::graphs\n",
            "[hip_sys.md]: crate::guide::hip_sys\n",
            "[memory_history.md]: crate::guide::memory_history\n",
            "[plan.md]: crate::guide::plan\n",
            "[pytorch.md]: crate::guide::pytorch\n",
            "[resources.md]: crate::guide::resources\n",
            "[semantics.md]: crate::guide::semantics\n",
            "[development.md]: https://github.com/somalloc/somalloc/blob/main/docs/development.md\n",
            "[measured.md]: https://github.com/somalloc/somalloc/blob/main/docs/measured.md\n",
            "[proofs.md]: https://github.com/somalloc/somalloc/blob/main/docs/proofs.md\n",
            "[../CHANGELOG.md]: https://github.com/somalloc/somalloc/blob/main/CHANGELOG.md\n",
            "[../README.md]: https://github.com/somalloc/somalloc/blob/main/README.md\n",
            "[../benches/RESULTS.md]: https://github.com/somalloc/somalloc/blob/main/benches/RESULTS.md\n",
            "\n",
        )
    };
}

/// A page of docs/, with the links' definitions before it.
macro_rules! page {
    ($file:literal) => {
        concat!(links!(), include_str!(concat!("../docs/", $file)))
    };
}

#[doc = page!("getting_started.md")]
pub mod getting_started {}

#[doc = page!("deployment.md")]
pub mod deployment {}

#[doc = page!("features.md")]
pub mod features {}

#[doc = page!("semantics.md")]
pub mod semantics {}

#[doc = page!("graphs.md")]
pub mod graphs {}

#[doc = page!("resources.md")]
pub mod resources {}

#[doc = page!("memory_history.md")]
pub mod memory_history {}

#[doc = page!("plan.md")]
pub mod plan {}

#[cfg_attr(feature = "cudarc", doc = links!())]
/// With cudarc (feature `cudarc`; the page's example is compiled when the
/// feature is on).
#[cfg_attr(feature = "cudarc", doc = include_str!("../docs/cudarc.md"))]
pub mod cudarc {}

#[cfg_attr(feature = "hip-sys", doc = links!())]
/// With hip-sys (feature `hip-sys`; the page's example is compiled when the
/// feature is on).
#[cfg_attr(feature = "hip-sys", doc = include_str!("../docs/hip_sys.md"))]
pub mod hip_sys {}

#[doc = page!("c.md")]
pub mod c {}

#[doc = page!("pytorch.md")]
pub mod pytorch {}

#[doc = page!("configuration.md")]
pub mod configuration {}

#[doc = page!("bad_input.md")]
pub mod bad_input {}

/// Measured: the benchmark's recorded figures are pages of the repository,
/// [docs/measured.md](https://github.com/somalloc/somalloc/blob/main/docs/measured.md)
/// (the allocation benchmark) and
/// [benches/RESULTS.md](https://github.com/somalloc/somalloc/blob/main/benches/RESULTS.md)
/// (real models under PyTorch).
pub mod measured {}
