//! The arena as a [`MemoryResource`]: argument checks, captures routed to
//! the device's pool (graph memory), the pool again for an allocation the
//! arena cannot serve, and the frees made on the per-thread default stream
//! relayed through a stream of the arena's own (see [the module
//! docs](super)).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::core::Arena;
use super::phys::Phys;
use crate::device::Device;
use crate::error::{Error, InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

/// An [`Arena`] with the resource contract around it.
pub(crate) struct Front<P: Phys> {
    pub(crate) arena: Arena<P>,
    device: Device,
    /// The device's pool: allocations on capturing streams (graph memory),
    /// and those the arena could not serve.
    pool: Arc<dyn MemoryResource>,
    /// Allocations the pool served because the arena could not.
    pub(crate) stepped_aside: AtomicU64,
    said: AtomicBool,
    /// The relay of frees made on the per-thread default stream: a stream
    /// of the arena's own and a fence, made on first use.
    relay: Mutex<Option<(Stream, P::Fence)>>,
    this: Weak<Front<P>>,
}

impl<P: Phys> Front<P> {
    pub(crate) fn new(arena: Arena<P>, device: Device, pool: Arc<dyn MemoryResource>) -> Arc<Front<P>> {
        Arc::new_cyclic(|this| Front {
            arena,
            device,
            pool,
            stepped_aside: AtomicU64::new(0),
            said: AtomicBool::new(false),
            relay: Mutex::new(None),
            this: this.clone(),
        })
    }

    /// An allocation the arena could not serve because a virtual-memory
    /// call failed: the pool's, if it has one (said once on stderr). Out of
    /// memory stays the arena's answer: its recovery already gave back what
    /// it could, and the pool draws on the same device memory (and a
    /// `max_mapped` cap would not hold otherwise).
    #[cold]
    fn step_aside(&self, bytes: usize, stream: &Stream, e: crate::Error) -> Result<*mut c_void> {
        if matches!(e, crate::Error::OutOfMemory { .. }) {
            return Err(e);
        }
        match self.pool.allocate_asked(bytes, stream, Asked::answer(None)) {
            Ok(p) => {
                self.stepped_aside.fetch_add(1, Ordering::Relaxed);
                if !matches!(e, crate::Error::OutOfMemory { .. }) && !self.said.swap(true, Ordering::Relaxed)
                {
                    eprintln!(
                        "somalloc: the arena of device {} could not map memory ({e}); \
                         allocations it cannot serve come from the device's pool",
                        self.device.ordinal()
                    );
                }
                Ok(p)
            }
            Err(_) => Err(e),
        }
    }

    /// Frees the arena's block at `addr` that the calling thread freed on
    /// its per-thread default stream (`stream`, not capturing): a fence is
    /// recorded on that stream here, on the freeing thread, where the
    /// handle names the stream that used the block; the relay stream waits
    /// for it on the device, and the block is booked as freed on the
    /// relay. The relay is one real stream, so its fences may be recorded
    /// and waited for from any thread, as every arena stream's are. A
    /// failure frees nothing (the block stays live).
    fn free_per_thread(&self, addr: usize, bytes: usize, stream: &Stream) -> Result<()> {
        let phys = &self.arena.phys;
        let mut relay = self.relay.lock().unwrap_or_else(|p| p.into_inner());
        let (relay_stream, fence) = match &mut *relay {
            Some(r) => r,
            None => {
                let s = phys.new_stream()?;
                let f = phys.new_fence(&s)?;
                relay.insert((s, f))
            }
        };
        phys.record(fence, stream)?;
        phys.wait_on(relay_stream, fence)?;
        self.arena.deallocate(addr, bytes, relay_stream)
    }

    fn check(&self, bytes: usize, stream: &Stream, what: &str) -> Result<()> {
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error(format!("0-byte {what} of an arena")));
        }
        if stream.device() != self.device {
            return Err(InvalidReason::WrongDevice.error(format!(
                "arena of device {} used with a stream of device {}",
                self.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        Ok(())
    }
}

// SAFETY: (1) the arena hands out each mapped byte to one live block at a
// time, to a stream that may use it at once: its own frees are ordered
// before the stream's later work, another stream's only once a fence shows
// them complete (`Phys`'s contract); nothing is unmapped before every free
// in it completed. (2) `deallocate` books the block as freed on `stream`,
// or, for the per-thread default stream, on the relay stream after it
// waited on the device for an event recorded on the freeing thread's
// per-thread stream at the free (so every use the caller ordered before
// the free precedes the relay's later work).
// Allocations the arena refuses are the pool's (its contract). (3) On a
// capturing stream allocations are the pool's (graph memory); an arena block freed in a capture is freed only once the
// graph and its executables are gone (`crate::graph::defer`).
unsafe impl<P: Phys> MemoryResource for Front<P> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        self.check(bytes, stream, "allocation")?;
        if let Some(c) = asked.capturing(stream)? {
            return self.pool.allocate_asked(bytes, stream, Asked::answer(Some(c)));
        }
        if stream.as_raw() as usize == crate::stream::PER_THREAD {
            // The handle names another stream on every thread: the arena's
            // books (which key frees by stream) and its fences (recorded
            // from any thread) cannot stand for it. The pool serves it.
            return self.pool.allocate_asked(bytes, stream, Asked::answer(None));
        }
        match self.arena.allocate(bytes, stream) {
            Ok(a) => Ok(a as *mut c_void),
            Err(e) => self.step_aside(bytes, stream, e),
        }
    }

    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        self.check(bytes, stream, "free")?;
        let addr = ptr as usize;
        let capture = asked.capturing(stream)?;
        match capture {
            // The per-thread default stream: relayed (see
            // `free_per_thread`).
            None if stream.is_per_thread_default() => {
                if self.arena.owns(addr) {
                    return self.free_per_thread(addr, bytes, stream);
                }
            }
            // Not capturing: the arena's free, under one lock with the
            // question whether the block is the arena's.
            None => {
                if let Some(freed) = self.arena.deallocate_owned(addr, bytes, stream) {
                    return freed;
                }
            }
            Some(c) if self.arena.owns(addr) && stream.is_per_thread_default() => {
                // The graph may use the block on every replay, so its free
                // must wait for the graph; but what the thread enqueued on
                // its per-thread stream before the capture began can be
                // marked only by a record on that thread, which the
                // capture turns into a node of the graph. Refused: nothing
                // is freed.
                return Err(Error::capture(format!(
                    "an arena block freed on the per-thread default stream while it captures \
                     (capture {}): free it on the stream it was allocated on, or after the capture",
                    c.id
                )));
            }
            Some(c) if self.arena.owns(addr) => {
                // Memory from outside the capture: the graph may use it on
                // every replay, so it is freed once the graph is gone.
                let Some(this) = self.this.upgrade() else {
                    return self.arena.deallocate(addr, bytes, stream);
                };
                let item = crate::graph::Deferred {
                    stream: stream.clone(),
                    users: Vec::new(),
                    free: Box::new(move |s: &Stream| this.arena.deallocate(addr, bytes, s)),
                };
                return crate::graph::defer(item, &[c]);
            }
            Some(_) => {}
        }
        // SAFETY: not the arena's: the caller's guarantees are for the
        // pool, where it came from.
        unsafe {
            self.pool
                .deallocate_asked(ptr, bytes, stream, Asked::answer(capture))
        }
    }

    fn device(&self) -> Device {
        self.device
    }
}
