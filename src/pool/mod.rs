//! Vendor memory pools (`cudaMemPool_t` / `hipMemPool_t`).
//!
//! The imports and aliases below are shared: each submodule takes them with
//! `use super::*`.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::backend::{Backend, PoolAttr, RawAlloc, RawLocation, RawPoolProps};
use crate::device::Device;
use crate::error::{record_drop_error, Error, Result};
use crate::pool_stats::PoolStats;
use crate::Active;

type RawPool = <Active as Backend>::Pool;

mod access;
mod mem_pool;
mod options;
mod placement;
mod registry;
#[cfg(test)]
mod tests;

use access::grant_own_device;
pub(crate) use access::{raw_access, with_stats};
pub use mem_pool::MemPool;
use mem_pool::PoolInner;
pub use options::{ExportHandle, PeerAccess, ReusePolicy};
pub use placement::{AllocationType, Location, Placement, PoolProperties};
#[cfg(test)]
use registry::Registry;
use registry::{pool_key, Lookup, CREATED};
