//! The allocators a trace is replayed on, each on every stream of a plan.

use std::ffi::c_void;
use std::sync::Arc;

use somalloc::testkit::raw;
use somalloc::{DeviceBuffer, MemPool, MemoryResource, Stream, StreamCache};

use crate::alloc::{CudarcAlloc, StreamAlloc};

/// An allocator on every stream of a plan.
pub trait Replayer: Sync {
    type Block: Send;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<Self::Block>;
    fn free(&self, block: Self::Block) -> somalloc::Result<()>;
    fn streams(&self) -> Vec<&Stream>;
}

/// A raw block: the address (a plain number) and its stream.
pub struct RawBlock(usize, u32);

pub struct RawReplay {
    pub(super) pool: MemPool,
    pub(super) streams: Vec<Stream>,
}

impl Replayer for RawReplay {
    type Block = RawBlock;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<RawBlock> {
        raw::malloc_from_pool_async(bytes, &self.pool, &self.streams[stream as usize])
            .map(|p| RawBlock(p as usize, stream))
    }
    fn free(&self, b: RawBlock) -> somalloc::Result<()> {
        // SAFETY: from `alloc` on that stream, freed once, on it; nothing
        // used the block.
        unsafe { raw::free_async(b.0 as *mut c_void, &self.streams[b.1 as usize]) }
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

pub struct SomallocReplay {
    pub(super) pool: MemPool,
    pub(super) streams: Vec<Stream>,
}

impl Replayer for SomallocReplay {
    type Block = DeviceBuffer<u8>;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<DeviceBuffer<u8>> {
        DeviceBuffer::new_in(bytes, &self.pool, &self.streams[stream as usize])
    }
    fn free(&self, b: DeviceBuffer<u8>) -> somalloc::Result<()> {
        b.release()
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

/// A cache block: address, requested size, stream.
pub struct CachedBlock(usize, usize, u32);

pub struct CacheReplay {
    pub(super) caches: Vec<Arc<StreamCache>>,
    pub(super) streams: Vec<Stream>,
}

impl Replayer for CacheReplay {
    type Block = CachedBlock;
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<CachedBlock> {
        let s = stream as usize;
        self.caches[s]
            .allocate(bytes, &self.streams[s])
            .map(|p| CachedBlock(p as usize, bytes, stream))
    }
    fn free(&self, b: CachedBlock) -> somalloc::Result<()> {
        let s = b.2 as usize;
        // SAFETY: from `allocate` of this stream's cache with these bytes,
        // freed once, on that stream; nothing used the block.
        unsafe { self.caches[s].deallocate(b.0 as *mut c_void, b.1, &self.streams[s]) }
    }
    fn streams(&self) -> Vec<&Stream> {
        self.streams.iter().collect()
    }
}

pub struct CudarcReplay {
    pub(super) allocs: Vec<CudarcAlloc>,
}

impl Replayer for CudarcReplay {
    type Block = (<CudarcAlloc as StreamAlloc>::Block, u32);
    fn alloc(&self, stream: u32, bytes: usize) -> somalloc::Result<Self::Block> {
        self.allocs[stream as usize].alloc(bytes).map(|b| (b, stream))
    }
    fn free(&self, b: Self::Block) -> somalloc::Result<()> {
        self.allocs[b.1 as usize].free(b.0)
    }
    fn streams(&self) -> Vec<&Stream> {
        self.allocs.iter().map(|a| a.stream()).collect()
    }
}
