//! [`MemPool`] itself: getting, creating and configuring pools, and their
//! statistics.

use super::*;

#[derive(Debug)]
pub(super) struct PoolInner {
    pub(super) raw: RawPool,
    pub(super) device: Device,
    /// Where its memory lives and how it is allocated.
    pub(super) placement: Placement,
    pub(super) owned: bool,
    /// The device's default pool, which lives as long as the process.
    pub(super) default: bool,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if self.owned {
            // Under the registry's lock, so `MemPool::current` never hands out
            // a handle to a pool between its destruction and its removal.
            let mut created = CREATED.lock();
            // Buffers hold a clone of their pool, so none is outstanding on
            // the host side. Frees still queued on streams are fine: the
            // runtime releases the pool's memory once they have run.
            record_drop_error(Active::pool_destroy(self.raw));
            created.unregister(pool_key(self.raw), self);
        }
    }
}

/// A stream-ordered memory pool, used from the streams of one device.
///
/// Cheap to clone. A pool made by [`MemPool::create`] is destroyed when the
/// last clone and the last buffer allocated from it are gone; the default
/// pools are never destroyed.
///
/// Its memory is usually that device's ([`Location::Device`]); a pool of
/// pinned host memory or of managed memory (see [`PoolProperties`]) serves
/// [`HostBuffer`](crate::HostBuffer)s on the streams of its device, which
/// somalloc grants read-write access to it.
///
/// ```no_run
/// use somalloc::{Device, MemPool, PoolProperties};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let pool = MemPool::create(&dev, PoolProperties::device().max_size(1 << 30))?;
/// pool.set_release_threshold(usize::MAX)?; // keep freed memory for reuse
/// println!("{}", pool.stats()?);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MemPool {
    pub(super) inner: Arc<PoolInner>,
}

/// Two handles are equal when they name the same pool (the same vendor
/// handle), whichever way they were obtained (created, default, current,
/// imported).
impl PartialEq for MemPool {
    fn eq(&self, other: &MemPool) -> bool {
        self.inner.raw == other.inner.raw
    }
}

impl Eq for MemPool {}

/// Hashes the vendor handle, consistent with `==`.
impl std::hash::Hash for MemPool {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.as_raw() as usize).hash(state);
    }
}

impl MemPool {
    fn borrowed(device: &Device, raw: RawPool, default: bool) -> MemPool {
        Self::borrowed_at(device, raw, default, Placement::device(device.ordinal()))
    }

    fn borrowed_at(device: &Device, raw: RawPool, default: bool, placement: Placement) -> MemPool {
        MemPool {
            inner: Arc::new(PoolInner {
                raw,
                device: *device,
                placement,
                owned: false,
                default,
            }),
        }
    }

    /// A pool somalloc destroys when the last handle and buffer are gone.
    pub(super) fn owned(device: &Device, raw: RawPool, placement: Placement) -> MemPool {
        let inner = Arc::new(PoolInner {
            raw,
            device: *device,
            placement,
            owned: true,
            default: false,
        });
        CREATED.lock().register(pool_key(raw), &inner);
        MemPool { inner }
    }

    /// The handle for `raw`, a pool of `device` that `found` tells about:
    /// the owning handle when somalloc created the pool and it is alive, the
    /// device's default pool when somalloc is destroying it right now (the
    /// runtime then makes the default pool current again), else a borrowed
    /// handle. Called after the registry's lock is released, so that
    /// dropping a strong reference here cannot wait for that lock.
    fn for_raw(device: &Device, raw: RawPool, found: Lookup<PoolInner>) -> Result<MemPool> {
        Self::for_raw_at(device, raw, found, Placement::device(device.ordinal()))
    }

    /// `for_raw` for the current pool of a placement.
    fn for_raw_at(
        device: &Device,
        raw: RawPool,
        found: Lookup<PoolInner>,
        placement: Placement,
    ) -> Result<MemPool> {
        match found {
            Lookup::Live(inner) if inner.device == *device && inner.placement == placement => {
                Ok(MemPool { inner })
            }
            Lookup::Dying => Self::default_at(device, placement),
            Lookup::Live(_) | Lookup::Unknown => Ok(Self::borrowed_at(device, raw, false, placement)),
        }
    }

    /// The device's default pool (never destroyed by somalloc).
    pub fn default_for(device: &Device) -> Result<MemPool> {
        Ok(Self::borrowed(
            device,
            Active::default_pool(device.ordinal())?,
            true,
        ))
    }

    /// The pool that allocations without an explicit pool use on `device`.
    ///
    /// When that is a pool somalloc created ([`MemPool::create`]), the
    /// answer is a clone of its owning handle: it keeps the pool alive, so
    /// [`MemPool::stats`] and the setters stay valid after the creator's
    /// handle is dropped. Any other pool (the default pool, or one made
    /// outside somalloc) comes back as a borrowed handle that never destroys
    /// it ([`MemPool::is_owned`] is `false`). Being current does not keep a
    /// created pool alive: when its last handle goes, it is destroyed and
    /// the runtime makes the default pool current again.
    ///
    /// ```no_run
    /// use somalloc::{Device, MemPool, PoolProperties};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let pool = MemPool::create(&dev, PoolProperties::default())?;
    /// MemPool::set_current(&pool)?;
    /// let current = MemPool::current(&dev)?;
    /// assert!(current.is_owned() && current == pool);
    /// drop(pool);
    /// println!("{}", current.stats()?); // `current` keeps the pool alive
    /// MemPool::set_current(&MemPool::default_for(&dev)?)?;
    /// # Ok(()) }
    /// ```
    pub fn current(device: &Device) -> Result<MemPool> {
        // The lock is held across the query so that a pool being destroyed
        // is seen either before (registered, dying) or after (no longer
        // current) its destruction.
        let (raw, found) = {
            let created = CREATED.lock();
            let raw = Active::current_pool(device.ordinal())?;
            (raw, created.lookup(pool_key(raw)))
        };
        Self::for_raw(device, raw, found)
    }

    /// Makes `pool` the one allocations without an explicit pool use on its
    /// device: **process-wide**, for every `cudaMallocAsync` /
    /// `hipMallocAsync` in the process, whichever library makes it (and for
    /// [`DeviceBuffer::new`](crate::DeviceBuffer::new) while no
    /// [current resource](crate::set_current_resource) is set). For a pool
    /// of another placement: the current pool of that location and
    /// allocation type (`cudaMemSetMemPool`, CUDA 13.0+). When a created
    /// pool that is current is destroyed, the runtime makes the default
    /// pool current again.
    pub fn set_current(pool: &MemPool) -> Result<()> {
        let p = pool.inner.placement;
        if p == Placement::device(pool.inner.device.ordinal()) {
            return Active::set_current_pool(pool.inner.device.ordinal(), pool.inner.raw);
        }
        Active::set_current_pool_at(p.location.raw()?, p.allocation.raw(), pool.inner.raw)
    }

    /// The default pool of a location and allocation type, for the streams
    /// of `device` (`cudaMemGetDefaultMemPool`, CUDA 13.0+; for
    /// `Placement::device(device.ordinal())` it is [`MemPool::default_for`]
    /// on every runtime). Never destroyed by somalloc.
    ///
    /// For the default pool of pinned host memory, `device` is granted
    /// read-write access to it (a process-wide setting of that pool, which
    /// the runtime leaves without any device access).
    ///
    /// ```no_run
    /// use somalloc::{AllocationType, Device, HostBuffer, Location, MemPool, Placement, Stream};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let stream = Stream::new(&dev)?;
    /// let pinned = MemPool::default_at(&dev, Placement::new(Location::Host, AllocationType::Pinned))?;
    /// let staging = HostBuffer::<u8>::new_in(1 << 20, &pinned, &stream)?;
    /// # drop(staging);
    /// # Ok(()) }
    /// ```
    pub fn default_at(device: &Device, placement: Placement) -> Result<MemPool> {
        if placement == Placement::device(device.ordinal()) {
            return Self::default_for(device);
        }
        Self::check_placement_for(device, placement)?;
        let raw = Active::default_pool_at(placement.location.raw()?, placement.allocation.raw())?;
        if placement.is_pinned_host() {
            grant_own_device(raw, device)?;
        }
        Ok(Self::borrowed_at(device, raw, true, placement))
    }

    /// The current pool of a location and allocation type, for the streams
    /// of `device` (`cudaMemGetMemPool`, CUDA 13.0+; for
    /// `Placement::device(device.ordinal())` it is [`MemPool::current`] on
    /// every runtime). As with [`MemPool::current`], a pool somalloc created
    /// comes back as a clone of its owning handle.
    pub fn current_at(device: &Device, placement: Placement) -> Result<MemPool> {
        if placement == Placement::device(device.ordinal()) {
            return Self::current(device);
        }
        Self::check_placement_for(device, placement)?;
        let (location, alloc) = (placement.location.raw()?, placement.allocation.raw());
        let (raw, found) = {
            let created = CREATED.lock();
            let raw = Active::current_pool_at(location, alloc)?;
            (raw, created.lookup(pool_key(raw)))
        };
        Self::for_raw_at(device, raw, found, placement)
    }

    /// A device location must be `device`'s own.
    pub(super) fn check_placement_for(device: &Device, placement: Placement) -> Result<()> {
        match placement.location {
            Location::Device(d) if d != device.ordinal() => Err(Error::invalid(format!(
                "a pool located on device {d} for the streams of device {}",
                device.ordinal()
            ))),
            Location::Unspecified if placement.allocation == AllocationType::Pinned => Err(Error::invalid(
                "pinned memory needs a location (Location::Unspecified is for managed pools)",
            )),
            _ => Ok(()),
        }
    }

    /// Creates a pool whose memory is used from the streams of `device`. Its
    /// release threshold starts at 0 (freed memory is released at the next
    /// synchronisation) as on both runtimes; set it with
    /// [`MemPool::set_release_threshold`].
    ///
    /// Where the memory lives is `props.location` (by default on `device`);
    /// a location or allocation type the loaded runtime's pools do not take
    /// is [`Error::Unsupported`] naming the runtime (see [`Location`]). A
    /// pool of pinned host memory is made accessible (read-write) to
    /// `device`, so that its streams copy to and from it without staging;
    /// other devices get access through [`MemPool::set_access`]. Host pools
    /// are not exportable: [`ExportHandle::PosixFd`] with a host location is
    /// `Unsupported` (CUDA refuses IPC for `Location::Host`, and an imported
    /// pool's location cannot be read back from the runtime).
    ///
    /// ```no_run
    /// use somalloc::{Device, Error, MemPool, PoolProperties};
    /// # fn main() -> somalloc::Result<()> {
    /// let dev = Device::get(0)?;
    /// let pinned = match MemPool::create(&dev, PoolProperties::host()) {
    ///     Err(Error::Unsupported { .. }) => MemPool::create(&dev, PoolProperties::host_numa(0))?, // CUDA 12.6-12.9
    ///     other => other?,
    /// };
    /// assert!(pinned.placement().is_pinned_host());
    /// # Ok(()) }
    /// ```
    pub fn create(device: &Device, props: PoolProperties) -> Result<MemPool> {
        let max_size = match props.max_size {
            None => 0,
            Some(0) => return Err(Error::invalid("max_size of 0: use None for no limit")),
            Some(n) => n,
        };
        let placement = Placement::new(
            props.location.unwrap_or(Location::Device(device.ordinal())),
            props.allocation,
        );
        Self::check_placement_for(device, placement)?;
        if placement.location.is_host() && props.export != ExportHandle::None {
            return Err(Error::Unsupported {
                backend: crate::VENDOR,
                what: "exporting a pool of host memory (IPC of host pools is not supported)".into(),
            });
        }
        let raw = Active::pool_create(&RawPoolProps {
            location: placement.location.raw()?,
            alloc: placement.allocation.raw(),
            max_size,
            handle_types: props.export.mask(),
        })?;
        if placement.is_pinned_host() {
            if let Err(e) = grant_own_device(raw, device) {
                record_drop_error(Active::pool_destroy(raw));
                return Err(e);
            }
        }
        Ok(Self::owned(device, raw, placement))
    }

    /// The device whose streams use the pool (for a device pool: where its
    /// memory lives).
    pub fn device(&self) -> Device {
        self.inner.device
    }

    /// Where the pool's memory lives and how it is allocated.
    pub fn placement(&self) -> Placement {
        self.inner.placement
    }

    /// Whether somalloc created this pool (and will destroy it).
    pub fn is_owned(&self) -> bool {
        self.inner.owned
    }

    /// Bytes of unused memory the pool keeps when a stream, event or device
    /// is synchronised; above it, memory goes back to the device.
    pub fn release_threshold(&self) -> Result<usize> {
        Active::pool_get(self.inner.raw, PoolAttr::ReleaseThreshold).map(crate::pool_stats::bytes)
    }

    /// Sets the release threshold; `usize::MAX` keeps everything.
    ///
    /// Process-wide for a shared pool: on the device's default pool (or
    /// one that is current) it changes what every library allocating from
    /// it in the process gets (cudarc, PyTorch, `cudaMallocAsync` callers).
    pub fn set_release_threshold(&self, bytes: usize) -> Result<()> {
        Active::pool_set(self.inner.raw, PoolAttr::ReleaseThreshold, bytes as u64)
    }

    /// The three reuse-policy flags.
    pub fn reuse_policy(&self) -> Result<ReusePolicy> {
        let get = |a| Active::pool_get(self.inner.raw, a).map(|v| v != 0);
        Ok(ReusePolicy {
            follow_event_dependencies: get(PoolAttr::ReuseFollowEventDependencies)?,
            allow_opportunistic: get(PoolAttr::ReuseAllowOpportunistic)?,
            allow_internal_dependencies: get(PoolAttr::ReuseAllowInternalDependencies)?,
        })
    }

    /// Sets the three reuse-policy flags (process-wide for a shared pool, as
    /// [`MemPool::set_release_threshold`]).
    pub fn set_reuse_policy(&self, policy: ReusePolicy) -> Result<()> {
        let set = |a, on: bool| Active::pool_set(self.inner.raw, a, u64::from(on));
        set(
            PoolAttr::ReuseFollowEventDependencies,
            policy.follow_event_dependencies,
        )?;
        set(PoolAttr::ReuseAllowOpportunistic, policy.allow_opportunistic)?;
        set(
            PoolAttr::ReuseAllowInternalDependencies,
            policy.allow_internal_dependencies,
        )
    }

    /// Releases unused memory until at most `keep_bytes` stay reserved
    /// (memory backing live allocations is never released). On a shared
    /// pool this releases what other libraries freed, too.
    pub fn trim_to(&self, keep_bytes: usize) -> Result<()> {
        crate::trace::note(
            crate::trace::Action::Trim,
            self.device().ordinal(),
            None,
            keep_bytes,
        );
        Active::pool_trim_to(self.inner.raw, keep_bytes)
    }

    /// Reserved and used bytes, current and peak.
    pub fn stats(&self) -> Result<PoolStats> {
        let get = |a| Active::pool_get(self.inner.raw, a).map(crate::pool_stats::bytes);
        Ok(PoolStats {
            reserved_current: get(PoolAttr::ReservedMemCurrent)?,
            reserved_peak: get(PoolAttr::ReservedMemHigh)?,
            used_current: get(PoolAttr::UsedMemCurrent)?,
            used_peak: get(PoolAttr::UsedMemHigh)?,
        })
    }

    /// Resets both peaks (`reserved_peak`, `used_peak`) to the current values.
    pub fn reset_peaks(&self) -> Result<()> {
        // Both runtimes accept only 0 here, meaning "reset to current".
        Active::pool_set(self.inner.raw, PoolAttr::ReservedMemHigh, 0)?;
        Active::pool_set(self.inner.raw, PoolAttr::UsedMemHigh, 0)
    }
}
