//! Stream capture and graphs. What the allocation paths do under capture
//! is documented for users in the crate docs (lib.rs, "Stream capture and
//! graphs").
//!
//! The imports, aliases and helpers below are shared: each submodule takes
//! them with `use super::*`.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{Backend, CaptureStatus as RawStatus, DevicePtr, GraphMemAttr};
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result, VendorCode};
use crate::stream::{capture_flag, Asked, Stream};
use crate::Active;

#[cfg(doc)]
use crate::DeviceBuffer;

type RawGraph = <Active as Backend>::Graph;
type RawGraphExec = <Active as Backend>::GraphExec;
type RawStream = <Active as Backend>::Stream;

/// cudaErrorInvalidValue / hipErrorInvalidValue.
const INVALID_VALUE: i32 = 1;
/// cudaErrorStreamCaptureInvalidated / hipErrorStreamCaptureInvalidated.
const CAPTURE_INVALIDATED: i32 = 901;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; the data stays consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

mod capture;
mod deferred;
mod exec;
mod free;
mod mem;
#[cfg(all(loom, test))]
mod models;
mod record;
#[cfg(test)]
mod tests;

pub(crate) use crate::capture::Capturing;
use crate::capture::CAPTURES;
pub use crate::capture::{CaptureMode, CaptureStatus};
use crate::stream::order_after;
pub(crate) use deferred::{defer, frees_ready, reclaim_if_ready, Deferred};
pub use deferred::{pending_graph_frees, reclaim_graph_frees};
pub use exec::{Graph, GraphExec};
pub(crate) use free::{vendor_free, vendor_free_asked};
pub use mem::GraphMemStats;
use record::{
    active_record, forget_graph_alloc, graph_alloc, take_active, CaptureRecord, GraphAlloc, RecordState,
    ACTIVE,
};
pub(crate) use record::{graph_allocs_live, note_graph_alloc};
