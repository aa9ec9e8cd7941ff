//! The stream cache under stream capture: allocations and frees pass
//! through to the upstream resource, blocks allocated in a capture are
//! remembered so that they never enter the cache, and a capturing stream's
//! cached blocks wait for the capture to end (see the
//! [module docs](super#under-stream-capture)).

use std::ffi::c_void;
use std::sync::Arc;

use super::class::class_size;
use super::stream_cache::StreamCache;
use crate::error::{record_drop_error, Result};
use crate::stream::{Asked, Stream};

impl StreamCache {
    /// An allocation while the stream captures: upstream (graph memory), in
    /// the class size, remembered so that it never enters the cache.
    /// `asked`: the capture, for the upstream.
    #[cold]
    pub(super) fn allocate_captured(&self, bytes: usize, asked: Asked) -> Result<*mut c_void> {
        let size = self.shared.class_of(bytes).map_or(bytes, class_size);
        // Out-of-memory recovery skips this (capturing) stream's cache.
        let ptr = self.allocate_upstream(bytes, size, asked)?;
        let mut state = self.lock();
        state.captured_allocs += 1;
        state.captured.insert(ptr as usize, size);
        Ok(ptr)
    }

    /// A free while the stream captures: straight upstream, never cached.
    /// `asked`: the capture, for the upstream.
    ///
    /// # Safety
    /// As for `deallocate`.
    #[cold]
    pub(super) unsafe fn deallocate_captured(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        asked: Asked,
    ) -> Result<()> {
        let shared = &*self.shared;
        let class = shared.class_of(bytes);
        let addr = ptr as usize;
        // (the size freed, and how to put the books back if the free fails)
        let (size, undo) = {
            let mut state = self.lock();
            match state.captured.remove(&addr) {
                Some(size) => (size, Undo::Captured(size)),
                None => match class {
                    // Allocated before the capture: it counted as live, in
                    // its class or the larger one it was handed out in.
                    Some(idx) => {
                        let real = state.real_class(addr, idx);
                        let size = class_size(real);
                        state.live = state.live.saturating_sub(size);
                        (
                            size,
                            Undo::Live {
                                real,
                                larger: real != idx,
                            },
                        )
                    }
                    None => (bytes, Undo::Nothing),
                },
            }
        };
        // SAFETY: the block came from `upstream.allocate(size, stream)` (a
        // captured allocation in the size remembered, an ordinary one in its
        // class size, or one above the classes unrounded); the caller's
        // guarantees carry over; it is not cached.
        let r = unsafe { shared.upstream.deallocate_asked(ptr, size, &self.stream, asked) };
        if r.is_err() {
            // Nothing was freed: the books as they were, for a later attempt.
            let mut state = self.lock();
            match undo {
                Undo::Captured(size) => {
                    state.captured.insert(addr, size);
                }
                Undo::Live { real, larger } => {
                    state.live += class_size(real);
                    if larger {
                        state.larger.insert(addr, real);
                    }
                }
                Undo::Nothing => {}
            }
        }
        r
    }

    /// Frees blocks taken out of the cache of a capturing stream (or one
    /// that cannot say whether it captures) once the stream leaves the
    /// capture: they wait in the deferred-free queue, then go upstream on it.
    #[cold]
    pub(super) fn park(&self, blocks: Vec<(usize, usize)>) {
        for (addr, size) in blocks {
            let upstream = Arc::clone(&self.shared.upstream);
            let item = crate::graph::Deferred {
                stream: self.stream.clone(),
                users: Vec::new(),
                // SAFETY (of the call inside): a block taken out of this
                // cache's bins (see `free_upstream`), freed on its stream
                // once the stream no longer captures.
                free: Box::new(move |stream: &Stream| unsafe {
                    upstream.deallocate(addr as *mut c_void, size, stream)
                }),
            };
            // No capture is named: the free waits only for the stream to
            // leave its capture, so this cannot fail.
            record_drop_error(crate::graph::defer(item, &[]));
        }
    }
}

/// How `deallocate_captured` puts a block's books back when its free fails.
enum Undo {
    Captured(usize),
    Live { real: usize, larger: bool },
    Nothing,
}
