//! Where a buffer's memory came from, and so where its free goes; the
//! other streams it was used on.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::backend::{Backend, DevicePtr};
use crate::cache::StreamCache;
use crate::error::Result;
use crate::graph;
use crate::pool::MemPool;
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};
use crate::Active;

/// Where a buffer's memory came from, and so where the free goes: at most
/// one of the fields is set (none: the current pool of the stream's device,
/// `new`, freed with the plain stream-ordered free).
///
/// A struct of plain optional handles rather than an enum: moving a buffer
/// is then a move of machine words, which the compiler keeps in registers
/// (an enum with payloads of different types is moved through memory, which
/// cost several nanoseconds on the cache tier's allocate + free).
#[derive(Clone, Default)]
pub(super) struct Origin {
    /// `new_with` on a [`StreamCache`]: the cache counts the block as
    /// pinned and stays alive (with its stream) until the block comes back
    /// through `StreamCache::free_pinned`, so the buffer holds no reference
    /// count.
    pub(super) cache: Option<CachePtr>,
    /// `new_with` on any other memory resource, kept alive; the free goes
    /// to its `deallocate`.
    pub(super) resource: Option<Arc<dyn MemoryResource>>,
    /// `new_in`, `import`: an explicit pool. Keeps a created pool alive, and
    /// answers whether another device may use the memory.
    pub(super) pool: Option<MemPool>,
    /// `new_in` from the device's default pool: it lives as long as the
    /// process, so no reference count is taken on the hot path.
    pub(super) default_pool: Option<<Active as Backend>::Pool>,
}

impl Origin {
    pub(super) const CURRENT_POOL: Origin = Origin {
        cache: None,
        resource: None,
        pool: None,
        default_pool: None,
    };

    pub(super) fn resource(resource: &Arc<dyn MemoryResource>) -> Origin {
        Origin {
            resource: Some(Arc::clone(resource)),
            ..Origin::CURRENT_POOL
        }
    }

    pub(super) fn pool(pool: &MemPool) -> Origin {
        if pool.is_default() {
            Origin {
                default_pool: Some(pool.raw()),
                ..Origin::CURRENT_POOL
            }
        } else {
            Origin {
                pool: Some(pool.clone()),
                ..Origin::CURRENT_POOL
            }
        }
    }
}

/// The streams a buffer was used on besides its own: one word, and no
/// heap allocation until `use_on`.
#[derive(Default)]
// One word in every buffer (a `Vec` is three); the second allocation is
// made only by `use_on`.
#[allow(clippy::box_collection)]
pub(super) struct Users(Option<Box<Vec<Stream>>>);

impl Users {
    pub(super) const NONE: Users = Users(None);

    pub(super) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|v| v.is_empty())
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Stream> {
        self.0.as_deref().map_or(&[][..], Vec::as_slice).iter()
    }

    pub(super) fn push(&mut self, stream: Stream) {
        self.0.get_or_insert_with(Box::default).push(stream);
    }
}

/// A stream cache that keeps itself alive for a buffer (see `Origin::cache`).
#[derive(Clone, Copy)]
pub(super) struct CachePtr(pub(super) NonNull<StreamCache>);

// SAFETY: a `StreamCache` is `Send + Sync`; the pointer is only used, from
// any thread, while the pinned block keeps the cache alive.
unsafe impl Send for CachePtr {}
// SAFETY: as above.
unsafe impl Sync for CachePtr {}

/// Frees `ptr` (`bytes` long) through where it came from, on `stream`,
/// with what the caller knows about `stream`'s capture (`asked`), which
/// goes on to where the memory came from.
///
/// # Safety
/// `ptr` and `bytes` are a live allocation of `origin` made on `stream`,
/// freed once, and every use is ordered before this point of `stream`.
#[inline(always)]
pub(super) unsafe fn free_via(
    origin: &Origin,
    ptr: DevicePtr,
    bytes: usize,
    stream: &Stream,
    asked: Asked,
) -> Result<()> {
    if let Some(cache) = origin.cache {
        // SAFETY: the caller's guarantees; the block is pinned by this
        // cache, and `stream` is the cache's own handle (the buffer's copy
        // of it).
        return unsafe { StreamCache::free_pinned(cache.0, ptr.as_mut_ptr(), bytes, stream, asked) };
    }
    match &origin.resource {
        // SAFETY: the caller's guarantees, for the resource that allocated it.
        Some(resource) => unsafe { resource.deallocate_asked(ptr.as_mut_ptr(), bytes, stream, asked) },
        // SAFETY: the caller's guarantees; the pool's stream-ordered free.
        None => unsafe { graph::vendor_free_asked(ptr, stream, asked) },
    }
}

/// Gives up on a buffer's block whose free failed (the error was
/// reported) and that nothing will try to free again: its memory stays
/// allocated (leaked rather than freed under work that may still use it).
/// A stream cache that pinned it stops counting it, so that the cache is
/// not kept alive for it.
///
/// # Safety
/// `ptr` and `bytes` are a live allocation of `origin` whose free failed
/// and doing nothing (the contract of every free path here), given up once.
#[cold]
pub(super) unsafe fn abandon(origin: &Origin, ptr: DevicePtr, bytes: usize) {
    if let Some(cache) = origin.cache {
        // SAFETY: the block is pinned by this cache, which its count keeps
        // alive (the caller's guarantees).
        unsafe { StreamCache::forget_pinned(cache.0, ptr.as_mut_ptr(), bytes) }
    }
}
