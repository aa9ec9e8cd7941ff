//! The process-wide state behind the entry points: the configuration, the
//! live allocations, and one lazily made state per device (its pool, its
//! cache tier, and the streams it has seen, `streams.rs`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use somalloc_rs::trace::{Action, Recorder};
use somalloc_rs::{
    CacheTier, Device, Event, MemPool, MemoryResource, PeerAccess, PoolProperties, Stream, VmmArena,
};

use crate::conf::{Conf, PoolChoice, ENV};
use crate::error::{CapiError, Status};
use crate::registry::{Live, Path, Refused, Registry};
use crate::streams::{key_of, Entry, Streams, PER_THREAD};
use somalloc_rs::adaptors::StreamPlans;

/// A device's state, made on its first use (or why it could not be).
type DeviceSlot = OnceLock<Result<DeviceState, CapiError>>;

pub struct Global {
    pub registry: Registry,
    /// One slot per device the runtime sees, or why there are none.
    devices: Result<Box<[DeviceSlot]>, CapiError>,
}

/// The configuration: what `somalloc_configure` set (`None`: read
/// `SOMALLOC_CONF`), and whether a device state was made with it, after
/// which it no longer changes.
struct ConfSlot {
    conf: Option<Conf>,
    frozen: bool,
}

static CONF: Mutex<ConfSlot> = Mutex::new(ConfSlot {
    conf: None,
    frozen: false,
});
static GLOBAL: OnceLock<Global> = OnceLock::new();

fn conf_lock() -> std::sync::MutexGuard<'static, ConfSlot> {
    CONF.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets the configuration (`None`: from `SOMALLOC_CONF`). Only before the
/// first device state is made (the first allocation or statistics call on
/// a GPU); afterwards only the configuration in force is accepted again.
pub fn configure(text: Option<&str>) -> Result<(), CapiError> {
    let conf = match text {
        Some(t) => Conf::parse(t).map_err(|e| CapiError::new(Status::Config, e))?,
        None => env_conf()?,
    };
    // Device states are made under this same lock (`conf_for_device`), so
    // either none was made yet and every one made later reads this
    // configuration, or `frozen` is set and the one in force is compared.
    let mut slot = conf_lock();
    if slot.frozen {
        if slot.conf.as_ref() == Some(&conf) {
            return Ok(());
        }
        return Err(CapiError::new(
            Status::Busy,
            "somalloc is already in use with another configuration: configure it before the \
             first allocation (or statistics call)",
        ));
    }
    slot.conf = Some(conf);
    Ok(())
}

/// The configuration a new device state is made with; it is fixed from
/// now on.
fn conf_for_device() -> Result<Conf, CapiError> {
    let mut slot = conf_lock();
    let conf = match slot.conf.clone() {
        Some(c) => c,
        None => env_conf()?,
    };
    slot.conf = Some(conf.clone());
    slot.frozen = true;
    Ok(conf)
}

fn env_conf() -> Result<Conf, CapiError> {
    match std::env::var(ENV) {
        Ok(text) => Conf::parse(&text).map_err(|e| CapiError::new(Status::Config, format!("{ENV}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(Conf::default()),
        Err(e) => Err(CapiError::new(Status::Config, format!("{ENV}: {e}"))),
    }
}

/// The global state, if it was made.
pub fn made() -> Option<&'static Global> {
    GLOBAL.get()
}

pub fn global() -> &'static Global {
    GLOBAL.get_or_init(|| Global {
        registry: Registry::default(),
        devices: Device::count()
            .map(|n| (0..n).map(|_| OnceLock::new()).collect())
            .map_err(CapiError::from),
    })
}

impl Global {
    pub fn device_count(&self) -> Result<usize, CapiError> {
        self.devices.as_ref().map(|d| d.len()).map_err(Clone::clone)
    }

    /// The state of `device`, made on first use.
    pub fn device(&self, device: i32) -> Result<&DeviceState, CapiError> {
        let slots = self.devices.as_ref().map_err(Clone::clone)?;
        let slot = usize::try_from(device)
            .ok()
            .and_then(|d| slots.get(d))
            .ok_or_else(|| {
                CapiError::new(
                    Status::InvalidDevice,
                    format!(
                        "invalid device {device} (the runtime sees {} device(s))",
                        slots.len()
                    ),
                )
            })?;
        slot.get_or_init(|| DeviceState::new(device as usize, &conf_for_device()?))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The devices made so far.
    pub fn devices_in_use(&self) -> Vec<&DeviceState> {
        match &self.devices {
            Ok(slots) => slots.iter().filter_map(|s| s.get()?.as_ref().ok()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

#[derive(Default)]
pub struct Counters {
    pub allocations: AtomicU64,
    pub frees: AtomicU64,
    pub failed_allocations: AtomicU64,
    pub failed_frees: AtomicU64,
    pub live_bytes: AtomicU64,
    pub live_peak: AtomicU64,
}

pub struct DeviceState {
    pub device: Device,
    pub pool: MemPool,
    /// The virtual-memory arena in front of the pool (`pool:vmm`, `base.rs`).
    pub arena: Option<Arc<VmmArena>>,
    pub tier: Option<CacheTier>,
    /// The plans of the streams not seen yet (`plan:PATH`).
    pub plans: Option<StreamPlans>,
    /// What became of `plan:` on this device.
    pub plan_status: crate::plan::PlanStatus,
    /// The same-run planner (`plan:auto`).
    pub auto: Option<Arc<somalloc_rs::adaptors::AutoPlanner>>,
    /// The process's recorder (`trace:PATH`), shared by every device.
    pub recorder: Option<Arc<Recorder>>,
    /// The streams seen, by key.
    pub streams: Streams,
    pub counters: Counters,
}

impl DeviceState {
    fn new(ordinal: usize, conf: &Conf) -> Result<DeviceState, CapiError> {
        let device = Device::get(ordinal)?;
        let _current = DeviceGuard::set(&device)?;
        let pool = match conf.pool {
            PoolChoice::Own | PoolChoice::Vmm | PoolChoice::Auto => {
                let mut props = PoolProperties::device();
                if let Some(max) = conf.max_size {
                    props = props.max_size(max);
                }
                MemPool::create(&device, props)?
            }
            PoolChoice::Default => {
                if conf.max_size.is_some() {
                    return Err(CapiError::new(
                        Status::Config,
                        "max_size applies to an own pool only (pool:own)",
                    ));
                }
                MemPool::default_for(&device)?
            }
        };
        pool.set_release_threshold(usize::try_from(conf.release_threshold).unwrap_or(usize::MAX))?;
        if let Some(policy) = conf.reuse {
            pool.set_reuse_policy(policy)?;
        }
        if conf.peer_access {
            // Every device that can reach this one may read and write its
            // pool's memory: a copy between devices (PyTorch's `x.to("cuda:1")`)
            // runs on one device and reads or writes the other's.
            for other in 0..Device::count()? {
                let peer = Device::get(other)?;
                if other != ordinal && peer.can_access_peer(&device)? {
                    pool.set_access(&peer, PeerAccess::ReadWrite)?;
                }
            }
        }
        let arena = match conf.pool {
            PoolChoice::Vmm => crate::base::arena_for(&device, &pool, conf, false),
            PoolChoice::Auto => crate::base::arena_for(&device, &pool, conf, true),
            _ => None,
        };
        let tier = match conf.cache {
            Some(c) => Some(CacheTier::new(crate::base::upstream(&pool, &arena), c)?),
            None => None,
        };
        // Made after the runtime is loaded: its end-of-process handler then
        // runs before the runtime's own.
        let recorder = crate::recording::recorder(conf)?;
        // A plan that cannot be made is not used: never a failure.
        let (plans, plan_status) = crate::plan::load_or_explain(conf, ordinal);
        Ok(DeviceState {
            device,
            pool,
            arena,
            tier,
            plans,
            plan_status,
            auto: crate::auto::planner(conf),
            recorder,
            streams: Streams::default(),
            counters: Counters::default(),
        })
    }

    /// The entry of a stream that is not the per-thread default stream,
    /// registered on its first use.
    fn entry(&self, key: usize) -> Result<Arc<Entry>, CapiError> {
        self.streams
            .entry(key, &self.device, self.tier.as_ref(), self.plans.as_ref())
    }

    /// Gives the event just recorded at `t` on stream `key` its device
    /// time (`trace_device:on`), with this device current for the default
    /// streams' handles.
    fn record_device_time(&self, recorder: &Recorder, key: usize, t: u64) {
        if !recorder.device_times() {
            return;
        }
        let Ok(_current) = DeviceGuard::set(&self.device) else {
            return;
        };
        if key == PER_THREAD {
            // SAFETY: used only inside this call, on this thread, with this
            // device current.
            let stream = unsafe { Stream::per_thread_default(&self.device) };
            recorder.record_device_time(&stream, t);
        } else if let Ok(entry) = self.entry(key) {
            recorder.record_device_time(&entry.stream, t);
        }
    }

    /// Allocates on stream `key`, with this device made current for every
    /// path that reaches the runtime.
    fn allocate(&self, size: usize, key: usize) -> Result<(*mut c_void, Path), CapiError> {
        if key == PER_THREAD {
            let _current = DeviceGuard::set(&self.device)?;
            // SAFETY: used only inside this call, on this thread, with this
            // device current.
            let stream = unsafe { Stream::per_thread_default(&self.device) };
            return Ok((self.base_allocate(size, &stream)?, Path::Pool));
        }
        // The common case, a stream seen before: served under the read
        // lock (nothing below takes the streams' lock again).
        {
            let streams = self.streams.read();
            if let Some(entry) = streams.get(&key) {
                if let Some(p) = Self::allocate_quiet(entry, size) {
                    return Ok(p);
                }
                let _current = DeviceGuard::set(&self.device)?;
                return self.allocate_on(entry, size);
            }
        }
        // A stream seen for the first time: registered, then served under
        // the read lock as well, so that an allocation never uses an entry
        // that a forget of the stream has removed (`Streams::forget`). Should
        // such a forget come between the two, the stream is registered anew.
        let _current = DeviceGuard::set(&self.device)?;
        loop {
            self.entry(key)?;
            if let Some(entry) = self.streams.read().get(&key) {
                return self.allocate_on(entry, size);
            }
        }
    }

    /// A planned slot of the stream's plan served with no runtime call
    /// that reads the current device: `None` when it cannot be served so
    /// (no plan, a capturing stream, the arena not made yet, no free slot,
    /// a slot that needs a wait), and then nothing was done. The legacy
    /// stream is never capturing; another stream's handle names its device
    /// whatever device is current, so asking whether it captures needs no
    /// `DeviceGuard` (an error sends the request the guarded way). A
    /// training loop allocates this way on PyTorch's default stream and on
    /// its side streams.
    fn allocate_quiet(entry: &Entry, size: usize) -> Option<(*mut c_void, Path)> {
        let plan = entry.plan.get()?;
        if !entry.legacy && entry.stream.is_capturing().ok()? {
            return None;
        }
        let (ptr, slot) = plan.arena.allocate_ready(plan.lane, size, &entry.stream)?;
        // Slots number fewer than `plan::MAX_BLOCKS`.
        Some((ptr, Path::Plan(slot as u32)))
    }

    fn allocate_on(&self, entry: &Entry, size: usize) -> Result<(*mut c_void, Path), CapiError> {
        if let Some(plan) = entry.plan.get() {
            // Not during a capture (the cache tier's or the pool's rules).
            // The plan's arena comes from `base()`: with `pool:vmm` the
            // chunks of the blocks before a `plan:auto` switch remap into it.
            if !entry.is_capturing()? {
                if let Some((ptr, slot)) = plan.arena.allocate(plan.lane, size, &entry.stream, self.base()) {
                    // Slots number fewer than `plan::MAX_BLOCKS`.
                    return Ok((ptr, Path::Plan(slot as u32)));
                }
            }
        }
        match &entry.cache {
            Some(cache) => Ok((cache.allocate(size, &entry.stream)?, Path::Cache)),
            None => Ok((self.base_allocate(size, &entry.stream)?, Path::Pool)),
        }
    }

    /// Frees on stream `key`, with this device made current for every path
    /// that reaches the runtime.
    ///
    /// # Safety
    /// `ptr` was allocated here as `live` says and is freed once; every use
    /// is ordered before this point of the stream `key`.
    unsafe fn deallocate(&self, ptr: *mut c_void, live: Live, key: usize) -> Result<(), CapiError> {
        let size = live.size;
        if let Path::Plan(slot) = live.path {
            if key == live.stream {
                // A planned slot freed on its own stream, which asks for no
                // event: no runtime call that reads the current device (see
                // `allocate_quiet`), under the read lock.
                let streams = self.streams.read();
                if let Some(e) = streams.get(&key) {
                    if let Some(plan) = e.plan.get() {
                        let quiet = e.legacy || matches!(e.stream.is_capturing(), Ok(false));
                        if quiet && plan.arena.free_ready(slot as usize) {
                            return Ok(());
                        }
                    }
                }
            }
        }
        let _current = DeviceGuard::set(&self.device)?;
        if key == PER_THREAD {
            // SAFETY: used only inside this call, on this thread, with this
            // device current.
            let stream = unsafe { Stream::per_thread_default(&self.device) };
            return match live.path {
                // SAFETY: the caller's guarantees; an allocation of `base_allocate`.
                Path::Pool => unsafe { self.base_deallocate(ptr, size, &stream) },
                // SAFETY: as below, `on_own_stream` orders the free.
                Path::Cache | Path::Plan(_) => unsafe { self.on_own_stream(ptr, live, &stream) },
            };
        }
        if live.path == Path::Cache && key == live.stream {
            // The common case: freed on its own stream, seen before; under
            // the read lock (nothing below takes the streams' lock again).
            let streams = self.streams.read();
            if let Some(cache) = streams
                .get(&key)
                .and_then(|e| e.cache.as_ref().map(|c| (c, &e.stream)))
            {
                // SAFETY: the caller's guarantees; the block came from this
                // stream's cache with this size.
                return unsafe { Ok(cache.0.deallocate(ptr, size, cache.1)?) };
            }
        }
        let entry = self.entry(key)?;
        match live.path {
            // SAFETY: the caller's guarantees; an allocation of
            // `base_allocate`, freed in the order of the stream named.
            Path::Pool => unsafe { self.base_deallocate(ptr, size, &entry.stream) },
            Path::Plan(slot) if key == live.stream => Self::free_slot(&entry, slot),
            Path::Cache if key == live.stream => {
                let cache = entry.cache.as_ref().ok_or_else(|| {
                    CapiError::new(Status::Internal, "a cached allocation's stream has no cache")
                })?;
                // SAFETY: the caller's guarantees; the block came from this
                // stream's cache with this size.
                unsafe { Ok(cache.deallocate(ptr, size, &entry.stream)?) }
            }
            // SAFETY: the caller's guarantees.
            Path::Cache | Path::Plan(_) => unsafe { self.on_own_stream(ptr, live, &entry.stream) },
        }
    }

    /// Slot `slot` of `entry`'s plan is freed in `entry`'s stream order.
    fn free_slot(entry: &Entry, slot: u32) -> Result<(), CapiError> {
        let plan = entry
            .plan
            .get()
            .ok_or_else(|| CapiError::new(Status::Internal, "a planned allocation's stream has no plan"))?;
        Ok(plan.arena.free(slot as usize, entry.is_capturing()?)?)
    }

    /// A block of the cache of stream `live.stream` freed on another stream
    /// `on`: the allocation stream waits for the current end of `on` (an
    /// event), and the block goes back through its own stream's cache.
    /// Every use was ordered before this point of `on`, hence before the
    /// free on the allocation stream. Refused (nothing freed) when either
    /// stream is capturing, where that wait would join the capture.
    ///
    /// # Safety
    /// As for `deallocate`.
    unsafe fn on_own_stream(&self, ptr: *mut c_void, live: Live, on: &Stream) -> Result<(), CapiError> {
        let own = self.entry(live.stream)?;
        if own.is_capturing()? || on.is_capturing()? {
            return Err(CapiError::new(
                Status::Capture,
                "a block of the cache tier freed on another stream than its own while one of \
                 the two is capturing: free it on the stream it was allocated on",
            ));
        }
        let event = Event::new(&self.device)?;
        event.record(on)?;
        own.stream.wait_event(&event)?;
        if let Path::Plan(slot) = live.path {
            // Every use is ordered before the recorded point of `on`, which
            // the plan's stream now waits for.
            return Self::free_slot(&own, slot);
        }
        let cache = own
            .cache
            .as_ref()
            .ok_or_else(|| CapiError::new(Status::Internal, "a cached allocation's stream has no cache"))?;
        // SAFETY: every use is ordered before the recorded point of `on`,
        // which the allocation stream now waits for; the block came from
        // this cache with this size and is freed once.
        unsafe { Ok(cache.deallocate(ptr, live.size, &own.stream)?) }
    }

    /// Forgets a stream: its cached blocks go back (on it), the arena waits
    /// for its frees and lets it go, and then its entry is dropped; if the
    /// tier or the arena fails, the stream stays registered and a second
    /// call tries again (the order, and why no allocation undoes it:
    /// `Streams::forget`). `false`: unknown.
    pub fn forget(&self, stream: *mut c_void) -> Result<bool, CapiError> {
        let key = key_of(stream);
        // A stream whose plan has live blocks stays: their frees need it.
        // Otherwise its arena goes back to the pool, in its order.
        let entry = self.streams.seen(key);
        if let Some((entry, plan)) = entry.as_ref().and_then(|e| Some((e, e.plan.get()?))) {
            if !plan.arena.release(plan.lane, &entry.stream, self.base())? {
                return Err(CapiError::new(
                    Status::Busy,
                    "the stream has live allocations from its plan's arena: free them before forgetting it",
                ));
            }
        }
        self.streams.forget(
            key,
            |entry| match &self.tier {
                Some(tier) => Ok(tier.remove_stream(&entry.stream).map(drop)?),
                None => Ok(()),
            },
            // After the tier's frees on it: the arena waits for them, lets go.
            |entry| match &self.arena {
                Some(arena) => Ok(arena.forget_stream(&entry.stream).map(drop)?),
                None => Ok(()),
            },
        )
    }
}

/// Makes a device current on the calling thread for as long as it lives,
/// then the previous one again. Every entry point that touches a device's
/// state holds one: the legacy and per-thread default streams are read by
/// the runtime relative to the current device, and the cache tier may free
/// cached blocks on the legacy stream from any call on that device.
pub struct DeviceGuard {
    previous: Option<Device>,
}

impl DeviceGuard {
    pub fn set(device: &Device) -> Result<DeviceGuard, CapiError> {
        let current = Device::current()?;
        if current == *device {
            return Ok(DeviceGuard { previous: None });
        }
        device.bind_to_thread()?;
        Ok(DeviceGuard {
            previous: Some(current),
        })
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // A device that was current a moment ago can be made current
            // again; should the runtime refuse, there is nobody to tell.
            let _ = previous.bind_to_thread();
        }
    }
}

// ---------------------------------------------------------------------------
// The operations of the entry points.

pub fn allocate(size: usize, device: i32, stream: *mut c_void) -> Result<*mut c_void, CapiError> {
    if size == 0 {
        return Ok(std::ptr::null_mut());
    }
    let g = global();
    let dev = g.device(device)?;
    let key = key_of(stream);
    crate::auto::before_allocate(dev);
    let (ptr, path) = match dev.allocate(size, key) {
        Ok(p) => p,
        Err(e) => {
            dev.counters.failed_allocations.fetch_add(1, Ordering::Relaxed);
            if let Some(r) = &dev.recorder {
                r.record(
                    r.now_ns(),
                    Action::FailedAllocate,
                    dev.device.ordinal(),
                    Some(key as u64),
                    size,
                    0,
                );
            }
            return Err(e);
        }
    };
    let live = Live {
        size,
        device: dev.device.ordinal(),
        stream: key,
        path,
    };
    if !g.registry.insert(ptr as usize, live) {
        // The allocator handed out an address that is live: never give it
        // out twice (leak it instead) and say so.
        dev.counters.failed_allocations.fetch_add(1, Ordering::Relaxed);
        return Err(CapiError::new(
            Status::Internal,
            format!("the allocator returned the live address {ptr:p} again"),
        ));
    }
    if let Some(r) = &dev.recorder {
        // After the allocator answered (see `Recorder::record`).
        let t = r.now_ns();
        r.record(
            t,
            Action::Allocate,
            dev.device.ordinal(),
            Some(key as u64),
            size,
            ptr as usize,
        );
        dev.record_device_time(r, key, t);
    }
    let c = &dev.counters;
    c.allocations.fetch_add(1, Ordering::Relaxed);
    let now = c.live_bytes.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
    c.live_peak.fetch_max(now, Ordering::Relaxed);
    crate::auto::allocated(dev, key, ptr as usize, size, path);
    Ok(ptr)
}

/// # Safety
/// Every use of the memory is ordered before this point of `stream` (the
/// C contract of `somalloc_free`); everything else is checked.
pub unsafe fn deallocate(
    ptr: *mut c_void,
    size: usize,
    device: i32,
    stream: *mut c_void,
) -> Result<(), CapiError> {
    if ptr.is_null() {
        return match size {
            0 => Ok(()),
            _ => Err(CapiError::new(
                Status::UnknownPointer,
                format!("free of a null pointer with {size} bytes"),
            )),
        };
    }
    let g = global();
    let dev = g.device(device)?;
    // Before the memory is given back (see `Recorder::record`).
    let recorded_at = dev.recorder.as_ref().map(|r| r.now_ns());
    let result = (|| {
        let live = g
            .registry
            .take(ptr as usize, size, dev.device.ordinal())
            .map_err(|r| refused(ptr, size, device, r))?;
        // SAFETY: the registry said `ptr` is live with this size on this
        // device and took it (so it is freed once); the caller orders every
        // use before this point of `stream`.
        match unsafe { dev.deallocate(ptr, live, key_of(stream)) } {
            Ok(()) => Ok(live),
            Err(e) => {
                // Whether anything was freed is unknown for a vendor error;
                // the refusals before any free (capture, another device's
                // stream) leave the block allocated and live again.
                if matches!(
                    e.status,
                    Status::Capture | Status::InvalidArgument | Status::WrongDevice
                ) {
                    g.registry.restore(ptr as usize, live);
                }
                Err(e)
            }
        }
    })();
    let c = &dev.counters;
    match result {
        Ok(live) => {
            if let (Some(r), Some(t)) = (&dev.recorder, recorded_at) {
                let key = key_of(stream) as u64;
                r.record(
                    t,
                    Action::Free,
                    dev.device.ordinal(),
                    Some(key),
                    live.size,
                    ptr as usize,
                );
                dev.record_device_time(r, key as usize, t);
            }
            c.frees.fetch_add(1, Ordering::Relaxed);
            c.live_bytes.fetch_sub(live.size as u64, Ordering::Relaxed);
            crate::auto::freed(dev, ptr as usize);
            Ok(())
        }
        Err(e) => {
            c.failed_frees.fetch_add(1, Ordering::Relaxed);
            Err(e)
        }
    }
}

fn refused(ptr: *mut c_void, size: usize, device: i32, why: Refused) -> CapiError {
    match why {
        Refused::Unknown => CapiError::new(
            Status::UnknownPointer,
            format!("free of {ptr:p}, which somalloc did not allocate or has freed already"),
        ),
        Refused::WrongSize(live) => CapiError::new(
            Status::WrongSize,
            format!(
                "free of {ptr:p} with {size} bytes; it was allocated with {} bytes",
                live.size
            ),
        ),
        Refused::WrongDevice(live) => CapiError::new(
            Status::WrongDevice,
            format!(
                "free of {ptr:p} on device {device}; it was allocated on device {}",
                live.device
            ),
        ),
    }
}

/// The devices a call names: one, or every device in use for `-1`.
pub fn for_devices(
    device: i32,
    mut f: impl FnMut(&DeviceState) -> Result<(), CapiError>,
) -> Result<(), CapiError> {
    let g = global();
    if device < 0 {
        g.device_count()?;
        let mut first = None;
        for dev in g.devices_in_use() {
            if let Err(e) = DeviceGuard::set(&dev.device).and_then(|_guard| f(dev)) {
                first.get_or_insert(e);
            }
        }
        return first.map_or(Ok(()), Err);
    }
    let dev = g.device(device)?;
    let _current = DeviceGuard::set(&dev.device)?;
    f(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test of this binary that touches the process-wide
    /// configuration.
    #[test]
    fn configuration_is_free_until_a_device_state_is_made() {
        assert_eq!(configure(Some("bogus:1")).unwrap_err().status, Status::Config);
        configure(Some("cache:off")).unwrap();
        configure(Some("cache:on,cache_total_cap:1GiB")).unwrap();
        let conf = conf_for_device().unwrap();
        assert_eq!(conf.cache.unwrap().total_cap, 1 << 30);
        assert_eq!(configure(Some("cache:off")).unwrap_err().status, Status::Busy);
        configure(Some("cache_total_cap:1GiB")).unwrap();
        assert_eq!(conf_for_device().unwrap(), conf);
    }
}
