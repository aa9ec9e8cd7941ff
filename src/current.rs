//! The current resource of each device: where [`DeviceBuffer::new`]
//! allocates when a program has installed one ([`set_current_resource`]),
//! as RMM's `set_current_device_resource` does for its `device_buffer`.
//!
//! A program builds its allocator once (a cache tier over a pool, an
//! adaptor stack, a created pool) and installs it for a device; every
//! [`DeviceBuffer::new`] (and so [`DeviceBuffer::zeroed`] and
//! [`DeviceBuffer::from_slice`]) on a stream of that device then goes
//! through it, without passing the resource around. With no resource set
//! (the default) `new` allocates from the vendor's current pool, as before.
//!
//! The setting is process-wide, like the vendor's current pool: every
//! thread and every library that calls `DeviceBuffer::new` in the process
//! sees it. It changes nothing for allocations that name their pool or
//! resource ([`DeviceBuffer::new_in`], [`DeviceBuffer::new_with`]), nor
//! for other libraries' allocations (cudarc, PyTorch): they use the vendor
//! pools. A buffer keeps the resource it came from: replacing or resetting
//! the current resource does not move buffers, and their frees go back
//! where they came from.
//!
//! The same slots serve somalloc's C interface: a foreign caller installs
//! a resource for a device and allocates through `DeviceBuffer::new`, or
//! reads the slot back with [`current_resource`].
//!
//! [`fast_path`] installs what the C interface uses by default (a cache
//! tier over a pool of somalloc's own that keeps freed memory) in one call;
//! the example below builds a tier by hand over the default pool instead.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let tier = CacheTier::new(Arc::new(MemPool::default_for(&dev)?), CacheConfig::default())?;
//! let tier = Arc::new(tier);
//! somalloc::set_current_resource(&dev, tier.clone())?; // process-wide, for device 0
//!
//! let stream = Stream::new(&dev)?;
//! for _ in 0..1000 {
//!     drop(DeviceBuffer::<f32>::new(1 << 20, &stream)?); // from `stream`'s cache
//! }
//! println!("{}", tier.stats());
//! somalloc::reset_current_resource(&dev); // back to the vendor's current pool
//! # Ok(()) }
//! ```
//!
//! # The cost on the default path
//!
//! `DeviceBuffer::new` reads one counter (a relaxed atomic load) of how
//! many devices have a resource set; while it is 0 nothing else is
//! looked at. With a resource set, `new` takes a read lock on the table,
//! clones the resource's `Arc`, and allocates through it as
//! [`DeviceBuffer::new_with`] would (for a [`CacheTier`](crate::CacheTier):
//! from the stream's cache, found under the tier's lock). The fastest way
//! into a tier stays a [`StreamCache`](crate::StreamCache) kept per stream
//! ([`DeviceBuffer::new_cached`]).
//!
//! # Why a relaxed load is enough
//!
//! The counter only says whether to look; the slot itself is read under
//! the table's lock. A `set_current_resource` that happens before a `new`
//! (the setter's thread spawned or signalled the allocating thread, through
//! anything that synchronises) has its counter update visible to that
//! `new`: a load sees the last store that happens before it (coherence), so
//! the buffer comes from the new resource. A `new` concurrent with a
//! `set_current_resource` gets either the old or the new answer, and both
//! are valid allocations with their own frees.
//!
//! [`DeviceBuffer::new`]: crate::DeviceBuffer::new
//! [`DeviceBuffer::zeroed`]: crate::DeviceBuffer::zeroed
//! [`DeviceBuffer::from_slice`]: crate::DeviceBuffer::from_slice
//! [`DeviceBuffer::new_in`]: crate::DeviceBuffer::new_in
//! [`DeviceBuffer::new_with`]: crate::DeviceBuffer::new_with
//! [`DeviceBuffer::new_cached`]: crate::DeviceBuffer::new_cached

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::cache::{CacheConfig, CacheTier};
use crate::device::Device;
use crate::error::{Error, InvalidReason, Result};
use crate::pool::{MemPool, PoolProperties};
use crate::resource::MemoryResource;

type Slots = Vec<Option<Arc<dyn MemoryResource>>>;

/// The current resource of each device, by ordinal.
static TABLE: RwLock<Slots> = RwLock::new(Vec::new());
/// How many slots of `TABLE` are set; written under its write lock.
static SET: AtomicUsize = AtomicUsize::new(0);

/// Whether any device has a current resource: one relaxed load (see the
/// module docs for why that is enough).
#[inline(always)]
pub(crate) fn any_set() -> bool {
    SET.load(Ordering::Relaxed) != 0
}

/// The table, read; a panic while it was held cannot leave it
/// inconsistent (every change is one assignment), so a poisoned lock is
/// used as is.
fn read() -> RwLockReadGuard<'static, Slots> {
    TABLE.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> RwLockWriteGuard<'static, Slots> {
    TABLE.write().unwrap_or_else(|p| p.into_inner())
}

/// The current resource of `device`, if one is set.
pub(crate) fn get(device: &Device) -> Option<Arc<dyn MemoryResource>> {
    read().get(device.ordinal()).and_then(Clone::clone)
}

/// Makes `resource` the current resource of `device`: from now on
/// [`DeviceBuffer::new`](crate::DeviceBuffer::new) (and `zeroed`,
/// `from_slice`) on the streams of `device` allocates from it. Returns the
/// resource it replaces, if any.
///
/// **Process-wide**: it applies to every thread and every caller of
/// `DeviceBuffer::new` in the process, like the vendor's current pool.
/// Buffers already allocated are not affected: each keeps the resource it
/// came from, and its free goes back there.
///
/// The resource must serve `device` ([`MemoryResource::device`]; otherwise
/// [`InvalidReason::WrongDevice`]) and hand out memory a
/// [`DeviceBuffer`](crate::DeviceBuffer) may hold (pinned host memory is
/// refused with [`Error::InvalidArgument`]). A
/// [`StreamCache`](crate::StreamCache) serves one stream only: installed as
/// the current resource, `new` on any other stream of the device fails with
/// [`InvalidReason::WrongStream`]; install its tier instead. A tier keeps
/// every stream it has served alive until
/// [`CacheTier::remove_stream`](crate::CacheTier::remove_stream) (or its
/// drop): a program that makes streams as it goes removes each from the
/// tier when it is done with it.
///
/// With none set (the default), `new` allocates from the vendor's current
/// pool ([`MemPool::current`](crate::MemPool::current)). The check costs
/// `new` one relaxed atomic load. With one set, `new` allocates through
/// it as [`DeviceBuffer::new_with`](crate::DeviceBuffer::new_with) would;
/// for a [`CacheTier`](crate::CacheTier), from the stream's own cache.
/// Allocations that name their pool or resource
/// ([`DeviceBuffer::new_in`](crate::DeviceBuffer::new_in),
/// [`new_with`](crate::DeviceBuffer::new_with)), and other libraries'
/// allocations (cudarc, PyTorch: they use the vendor pools), are not
/// affected. somalloc's C interface installs and reads the same slots.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::adaptors::StatisticsAdaptor;
/// use somalloc::{Device, DeviceBuffer, MemPool, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stats = Arc::new(StatisticsAdaptor::new(Arc::new(MemPool::default_for(&dev)?)));
/// let previous = somalloc::set_current_resource(&dev, stats.clone())?;
/// assert!(previous.is_none());
/// let buf = DeviceBuffer::<u8>::new(4096, &Stream::new(&dev)?)?;
/// assert_eq!(stats.stats().allocations, 1);
/// # drop(buf);
/// # Ok(()) }
/// ```
pub fn set_current_resource(
    device: &Device,
    resource: Arc<dyn MemoryResource>,
) -> Result<Option<Arc<dyn MemoryResource>>> {
    if resource.device() != *device {
        return Err(InvalidReason::WrongDevice.error(format!(
            "a resource of device {} as the current resource of device {}",
            resource.device().ordinal(),
            device.ordinal()
        )));
    }
    if resource.placement().is_pinned_host() {
        return Err(Error::invalid(format!(
            "a resource of pinned host memory ({:?}) cannot be a device's current resource: \
             DeviceBuffer::new never holds host memory",
            resource.placement().location
        )));
    }
    let mut table = write();
    let ordinal = device.ordinal();
    if table.len() <= ordinal {
        table.resize(ordinal + 1, None);
    }
    let previous = table[ordinal].replace(resource);
    if previous.is_none() {
        SET.fetch_add(1, Ordering::Relaxed);
    }
    Ok(previous)
}

/// The current resource of `device`, if one is set (see
/// [`set_current_resource`]); `None` means `DeviceBuffer::new` allocates
/// from the vendor's current pool.
///
/// ```no_run
/// # fn main() -> somalloc::Result<()> {
/// let dev = somalloc::Device::get(0)?;
/// if somalloc::current_resource(&dev).is_none() {
///     println!("DeviceBuffer::new uses {:?}", somalloc::MemPool::current(&dev)?);
/// }
/// # Ok(()) }
/// ```
pub fn current_resource(device: &Device) -> Option<Arc<dyn MemoryResource>> {
    get(device)
}

/// Unsets the current resource of `device` (process-wide): `DeviceBuffer::new`
/// allocates from the vendor's current pool again. Returns the resource
/// that was set, if any; buffers allocated from it keep it alive until
/// they are dropped.
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{Device, MemPool, PoolProperties};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::create(&dev, PoolProperties::default())?;
/// somalloc::set_current_resource(&dev, Arc::new(pool))?;
/// assert!(somalloc::reset_current_resource(&dev).is_some());
/// assert!(somalloc::current_resource(&dev).is_none());
/// # Ok(()) }
/// ```
pub fn reset_current_resource(device: &Device) -> Option<Arc<dyn MemoryResource>> {
    let mut table = write();
    let previous = table.get_mut(device.ordinal()).and_then(Option::take);
    if previous.is_some() {
        SET.fetch_sub(1, Ordering::Relaxed);
    }
    previous
}

/// The fast path for [`DeviceBuffer::new`](crate::DeviceBuffer::new) on
/// `device`, as somalloc's C interface sets it up by default: a pool of
/// somalloc's own ([`MemPool::create`] with [`PoolProperties::device`]) that
/// keeps the memory freed into it (release threshold `usize::MAX`), a
/// [`CacheTier`] with [`CacheConfig::default`] in front of it, and that tier
/// installed as the device's current resource ([`set_current_resource`]).
/// Returns the tier, for its statistics ([`CacheTier::stats`]) and for
/// [`flush`](CacheTier::flush), [`trim`](CacheTier::trim) and
/// [`remove_stream`](CacheTier::remove_stream).
///
/// From then on `DeviceBuffer::new` (and `zeroed`, `from_slice`) on a
/// stream of `device` allocates from that stream's cache: the first
/// allocation of a size class on a stream asks the pool, and a block freed
/// on the stream serves its later allocations of that class with no driver
/// call. Without it, `new` asks the vendor's current pool every time (a
/// driver call each), and that pool (the default pool, unless the program
/// changed it) gives freed memory back to the system at each
/// synchronisation unless its release threshold is raised for the whole
/// process.
///
/// ```no_run
/// use somalloc::{Device, DeviceBuffer, Stream};
///
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let tier = somalloc::fast_path(&dev)?; // once, at start-up
/// let stream = Stream::new(&dev)?;
/// for _ in 0..1000 {
///     let buf = DeviceBuffer::<f32>::new(1 << 20, &stream)?; // from `stream`'s cache after the first
///     drop(buf); // back into `stream`'s cache, no driver call
/// }
/// println!("{}", tier.stats()); // 999 hits, 1 miss
/// somalloc::reset_current_resource(&dev); // undo: `new` uses the vendor's current pool again
/// # Ok(()) }
/// ```
///
/// **What is process-wide**: the installation, as for
/// [`set_current_resource`]: every thread and every caller of
/// `DeviceBuffer::new` in the process, for `device`. It replaces any current
/// resource of the device. Nothing else changes: the pool is somalloc's own,
/// so the vendor's default and current pools, their release thresholds, and
/// other libraries' allocations (cudarc, PyTorch) are as before, and so are
/// allocations that name their pool or resource
/// ([`DeviceBuffer::new_in`](crate::DeviceBuffer::new_in),
/// [`new_with`](crate::DeviceBuffer::new_with)).
///
/// **Undo** with [`reset_current_resource`]: `new` then allocates from the
/// vendor's current pool again. Buffers allocated before keep the tier (and
/// its pool) alive, and their frees go back to it; the tier returns its
/// cached blocks to the pool when its last handle and buffer are gone (or on
/// [`flush`](CacheTier::flush)), and the pool is destroyed after that.
///
/// The tier keeps each stream it has served alive until
/// [`remove_stream`](CacheTier::remove_stream): a program that makes
/// streams as it goes removes each from the tier when it is done with it.
/// For other settings (a size cap on the pool, a reuse policy, peer access,
/// another [`CacheConfig`]), build the same by hand:
///
/// ```no_run
/// use std::sync::Arc;
/// use somalloc::{CacheConfig, CacheTier, Device, MemPool, PeerAccess, PoolProperties};
///
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::create(&dev, PoolProperties::device().max_size(8 << 30))?;
/// pool.set_release_threshold(usize::MAX)?;
/// # let peer = Device::get(1)?;
/// pool.set_access(&peer, PeerAccess::ReadWrite)?; // the C interface: for every peer that can
/// let tier = Arc::new(CacheTier::new(Arc::new(pool), CacheConfig::default())?);
/// somalloc::set_current_resource(&dev, tier.clone())?;
/// # Ok(()) }
/// ```
///
/// Fails as [`MemPool::create`] does (a device or runtime without memory
/// pools: [`Error::Unsupported`]), installing nothing.
pub fn fast_path(device: &Device) -> Result<Arc<CacheTier>> {
    let pool = MemPool::create(device, PoolProperties::device())?;
    pool.set_release_threshold(usize::MAX)?;
    let tier = Arc::new(CacheTier::new(Arc::new(pool), CacheConfig::default())?);
    set_current_resource(device, tier.clone())?;
    Ok(tier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Stream;
    use crate::testing::FakeResource;
    use crate::DeviceBuffer;

    /// The slots of fake devices 40..: no other test uses them (the table
    /// is process-wide), and no call here reaches a runtime.
    #[test]
    fn new_allocates_from_the_current_resource_of_the_stream_device() {
        let (d40, d41) = (Device::fake(40), Device::fake(41));
        let first = FakeResource::on(40);
        let second = FakeResource::on(40);
        assert!(current_resource(&d40).is_none());
        // Another device's resource is refused.
        let refused = set_current_resource(&d41, first.clone()).map(|_| ());
        assert_eq!(
            refused.unwrap_err().invalid_reason(),
            Some(InvalidReason::WrongDevice)
        );
        assert!(current_resource(&d41).is_none());
        assert!(set_current_resource(&d40, first.clone()).unwrap().is_none());
        assert!(any_set());

        let s40 = Stream::fake(0x4000, 40);
        let buf = DeviceBuffer::<u32>::new(100, &s40).unwrap();
        assert_eq!(
            first.live(),
            1,
            "DeviceBuffer::new went through the current resource"
        );
        let empty = DeviceBuffer::<u8>::zeroed(0, &s40).unwrap();
        assert_eq!(first.calls(), (1, 0), "a 0-byte buffer calls nothing");

        // Replacing it leaves the buffer with its own resource.
        let previous = set_current_resource(&d40, second.clone()).unwrap();
        assert_eq!(previous.map(|p| p.device()), Some(d40));
        let next = DeviceBuffer::<u8>::new(10, &s40).unwrap();
        assert_eq!((first.live(), second.live()), (1, 1));
        drop((buf, next, empty));
        assert_eq!(
            first.calls(),
            (1, 1),
            "the free went back where the buffer came from"
        );
        assert_eq!(second.calls(), (1, 1));

        assert!(reset_current_resource(&d40).is_some());
        assert!(reset_current_resource(&d40).is_none());
        assert!(current_resource(&d40).is_none());
        first.assert_clean();
        second.assert_clean();
    }

    /// A tier installed as the current resource serves `new` from the
    /// stream's cache, and `new_with` takes a concrete `Arc` of any
    /// resource type.
    #[test]
    fn a_current_tier_serves_new_from_the_streams_cache() {
        use crate::{CacheConfig, CacheTier};
        let d42 = Device::fake(42);
        let fake = FakeResource::on(42);
        let tier = Arc::new(CacheTier::new(fake.clone(), CacheConfig::default()).unwrap());
        set_current_resource(&d42, tier.clone()).unwrap();
        let s = Stream::fake(0x4200, 42);
        drop(DeviceBuffer::<u8>::new(1000, &s).unwrap());
        drop(DeviceBuffer::<u8>::new(1000, &s).unwrap());
        let stats = tier.stats();
        assert_eq!((stats.total.hits, stats.total.misses), (1, 1));
        assert_eq!(fake.calls(), (1, 0), "the second allocation was a hit");
        reset_current_resource(&d42);

        // `new_with` on `&Arc<CacheTier>` and `&Arc<FakeResource>`, no
        // conversion to `Arc<dyn MemoryResource>`.
        drop(DeviceBuffer::<u8>::new_with(1000, &tier, &s).unwrap());
        assert_eq!(tier.stats().total.hits, 2);
        let direct = DeviceBuffer::<u8>::new_with(1000, &fake, &s).unwrap();
        assert_eq!(fake.calls(), (2, 0));
        drop(direct);
        assert_eq!(fake.calls(), (2, 1));
        drop(tier);
        fake.assert_clean();
    }
}
