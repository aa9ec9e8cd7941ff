//! The free of a buffer: stream-ordered, after every stream it was used
//! on, through where its memory came from; under stream capture, in the
//! graph or once the graph is gone; `release` and `Drop`.

use std::mem::ManuallyDrop;

use bytemuck::Pod;

use super::origin::{abandon, free_via};
use super::DeviceBuffer;
use crate::backend::DevicePtr;
use crate::cache::StreamCache;
use crate::error::{record_drop_error, Result};
use crate::graph::{self, CaptureStatus, Capturing, Deferred};
use crate::stream::order_after;
use crate::stream::{Asked, Stream};

impl<T: Pod> DeviceBuffer<T> {
    /// Frees the memory (stream-ordered), once: only `Drop` and `release`
    /// call it, each on a buffer that is gone afterwards. Writes nothing
    /// into the buffer. An error means that nothing was freed or handed on
    /// (a question, an ordering, a registration or the free itself failed):
    /// the caller gives the block up (`give_up`).
    #[inline(always)]
    pub(super) fn free(&self) -> Result<()> {
        let ptr = self.ptr;
        if ptr == DevicePtr::NULL {
            return Ok(());
        }
        if self.capture_id != 0 || graph::frees_ready() || !self.users.is_empty() {
            return self.free_slow(ptr, Asked::NOT_YET);
        }
        if self.stream.may_capture() {
            // The free's one question (none on an owned stream outside
            // captures): freed on a capturing stream, memory from outside
            // the capture must wait until the graph is gone. The answer goes
            // on to where the memory came from, which then asks nothing.
            if let Some(c) = self.stream.ask_capturing()? {
                return self.free_under_capture(ptr, Asked::answer(Some(c)));
            }
        }
        // Not capturing: known now, from the flags or the answer.
        let asked = Asked::answer(None);
        if let Some(cache) = self.origin.cache {
            // SAFETY: as below; the block is pinned by this cache, and the
            // stream is the cache's own, just found not capturing.
            return unsafe {
                StreamCache::free_pinned(
                    cache.0,
                    ptr.as_mut_ptr(),
                    self.size_in_bytes(),
                    &self.stream,
                    asked,
                )
            };
        }
        // SAFETY: `ptr` is this buffer's live allocation, freed once (see
        // above), used on no other stream.
        unsafe { free_via(&self.origin, ptr, self.size_in_bytes(), &self.stream, asked) }
    }

    /// The free of a buffer used on other streams, or when a capture may be
    /// involved (`asked`: what the caller knows about this buffer's stream).
    #[cold]
    #[inline(never)]
    fn free_slow(&self, ptr: DevicePtr, asked: Asked) -> Result<()> {
        if self.capture_id != 0
            || !asked.quiet(&self.stream)
            || graph::frees_ready()
            || self.users.iter().any(Stream::may_capture)
        {
            return self.free_under_capture(ptr, asked);
        }
        // Order the free after every other stream's use. If that fails the
        // block is given up (leaked) rather than freed under running work.
        for user in self.users.iter() {
            order_after(&self.stream, user)?;
        }
        // SAFETY: `ptr` is this buffer's live allocation (freed once, see
        // `free`), and every stream that used it is ordered before this
        // point of the owning stream.
        unsafe { free_via(&self.origin, ptr, self.size_in_bytes(), &self.stream, asked) }
    }

    /// Drops what the buffer holds besides its memory (which is freed).
    fn drop_handles(&mut self) {
        if self.origin.cache.is_none() {
            // SAFETY: the buffer's own handle, dropped once, here (a cache's
            // handle is only borrowed: see the field).
            unsafe { ManuallyDrop::drop(&mut self.stream) }
        }
    }

    /// The free when a capture may be involved: of this buffer's stream, of
    /// a stream it was used on, or of the allocation itself (`asked`: what
    /// the caller knows about this buffer's stream).
    #[cold]
    fn free_under_capture(&self, ptr: DevicePtr, asked: Asked) -> Result<()> {
        graph::reclaim_if_ready();
        // The free's question about its own stream, unless asked already.
        let mine = asked.capturing(&self.stream)?;
        let mut theirs = Vec::with_capacity(self.users.len());
        for user in self.users.iter() {
            theirs.push(user.capturing()?);
        }
        let bytes = self.size_in_bytes();
        // (free in the graph or now, order after the users first)
        let (in_graph, order) = match mine {
            // No capture anywhere: the ordinary free (a graph output's
            // rules are applied by the pool).
            None if theirs.iter().all(Option::is_none) => (true, true),
            // Allocated in a capture that was invalidated: it never
            // existed; the origin only updates its books.
            Some(c) if c.id == self.capture_id && c.status == CaptureStatus::Invalidated => (true, false),
            // Allocated and freed in the same capture, used only in it: a
            // graph free node.
            Some(c) if c.id == self.capture_id && c.status == CaptureStatus::Active => {
                (theirs.iter().all(|t| matches!(t, Some(u) if u.id == c.id)), true)
            }
            _ => (false, true),
        };
        if in_graph {
            for user in self.users.iter().filter(|_| order) {
                order_after(&self.stream, user)?;
            }
            // SAFETY: as in `free`: the live allocation, freed once, every
            // use ordered before this point of the owning stream (in the
            // graph, when capturing).
            return unsafe { free_via(&self.origin, ptr, bytes, &self.stream, Asked::answer(mine)) };
        }
        // A graph that is being captured may use the memory on each replay:
        // free it after every such graph is gone.
        let captures: Vec<Capturing> = mine.into_iter().chain(theirs.into_iter().flatten()).collect();
        let origin = self.origin.clone();
        graph::defer(
            Deferred {
                stream: Stream::clone(&self.stream),
                users: self.users.iter().cloned().collect(),
                // SAFETY (of the call inside): this buffer's live
                // allocation, freed once, on its own stream after the
                // streams that used it (ordered by the queue's drain), once
                // no graph that may use it exists.
                free: Box::new(move |stream: &Stream| unsafe {
                    free_via(&origin, ptr, bytes, stream, Asked::NOT_YET)
                }),
            },
            &captures,
        )
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// `free`'s error, after giving the block up: every failing free path
    /// did nothing, and the buffer is going away, so nothing will try again.
    #[cold]
    #[inline(never)]
    pub(super) fn give_up(&self, e: crate::Error) -> crate::Error {
        // SAFETY: this buffer's live allocation, whose free just failed
        // doing nothing; given up once (the buffer is being dropped or
        // released).
        unsafe { abandon(&self.origin, self.ptr, self.size_in_bytes()) };
        e
    }
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    #[inline]
    fn drop(&mut self) {
        // Nothing to free after `release` or for a 0-byte buffer.
        if self.ptr != DevicePtr::NULL {
            record_drop_error(self.free().map_err(|e| self.give_up(e)));
        }
        self.drop_handles();
    }
}
