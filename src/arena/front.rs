//! The arena as a [`MemoryResource`]: argument checks, and captures routed
//! to the graph-memory resource (see [the module docs](super)).

use std::ffi::c_void;
use std::sync::{Arc, Weak};

use super::core::Arena;
use super::phys::Phys;
use crate::device::Device;
use crate::error::{InvalidReason, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

/// An [`Arena`] with the resource contract around it.
pub(crate) struct Front<P: Phys> {
    pub(crate) arena: Arena<P>,
    device: Device,
    /// Graph memory: allocations on capturing streams.
    graph: Arc<dyn MemoryResource>,
    this: Weak<Front<P>>,
}

impl<P: Phys> Front<P> {
    pub(crate) fn new(arena: Arena<P>, device: Device, graph: Arc<dyn MemoryResource>) -> Arc<Front<P>> {
        Arc::new_cyclic(|this| Front {
            arena,
            device,
            graph,
            this: this.clone(),
        })
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
// in it completed. (2) `deallocate` books the block as freed on `stream`.
// (3) On a capturing stream allocations are the graph resource's (a pool:
// graph memory); an arena block freed in a capture is freed only once the
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
            return self.graph.allocate_asked(bytes, stream, Asked::answer(Some(c)));
        }
        self.arena.allocate(bytes, stream).map(|a| a as *mut c_void)
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
        if !self.arena.owns(addr) {
            // SAFETY: not the arena's: the caller's guarantees are for the
            // graph resource, where it came from.
            return unsafe { self.graph.deallocate_asked(ptr, bytes, stream, asked) };
        }
        match asked.capturing(stream)? {
            None => self.arena.deallocate(addr, bytes, stream),
            Some(c) => {
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
                crate::graph::defer(item, &[c])
            }
        }
    }

    fn device(&self) -> Device {
        self.device
    }
}
