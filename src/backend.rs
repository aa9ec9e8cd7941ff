//! The backend contract.
//!
//! Every vendor backend (backends/cuda, backends/rocm) implements [`Backend`].
//! The rest of the crate talks to the vendor only through this trait, so the
//! compiler checks the whole contract for whichever backend is built. All
//! FFI, symbol loading and raw-handle `unsafe` lives in the backends.
//!
//! Handles are plain `Copy` newtypes around the vendor's pointers. Ownership
//! (who destroys what, and when) is decided by the safe types in `src/`, not
//! here.

use std::ffi::c_void;
use std::fmt::Debug;

use crate::error::Result;

/// A device address. It is never dereferenced on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub(crate) usize);

impl DevicePtr {
    pub(crate) const NULL: DevicePtr = DevicePtr(0);

    pub(crate) fn as_mut_ptr(self) -> *mut c_void {
        self.0 as *mut c_void
    }
}

/// Pool attributes, in the order both vendors number them (1..=8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolAttr {
    ReuseFollowEventDependencies,
    ReuseAllowOpportunistic,
    ReuseAllowInternalDependencies,
    ReleaseThreshold,
    ReservedMemCurrent,
    ReservedMemHigh,
    UsedMemCurrent,
    UsedMemHigh,
}

impl PoolAttr {
    /// The three reuse-policy attributes are `int` in both runtimes, the rest
    /// are 64-bit.
    pub(crate) fn is_flag(self) -> bool {
        matches!(
            self,
            PoolAttr::ReuseFollowEventDependencies
                | PoolAttr::ReuseAllowOpportunistic
                | PoolAttr::ReuseAllowInternalDependencies
        )
    }
}

/// What a created pool is made with (the vendor-blind part of
/// `cudaMemPoolProps` / `hipMemPoolProps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawPoolProps {
    /// Where the memory lives (`cudaMemPoolProps::location`).
    pub location: RawLocation,
    /// `cudaMemPoolProps::allocType`.
    pub alloc: RawAlloc,
    /// 0: no limit beyond the device.
    pub max_size: usize,
    /// Export handle types as the vendor's bit mask (POSIX fd = 1 on both).
    pub handle_types: u32,
}

// ---------------------------------------------------------------------------
// Pool locations, allocation types and host memory (pinned host pools,
// `HostBuffer`, pointer attributes, the pinned-host baselines).

/// A memory location (`cudaMemLocation` / `hipMemLocation`): the type and
/// the id it gives meaning to. The numbers are the same on both vendors
/// (`common::LOCATION_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawLocation {
    /// `...MemLocationTypeDevice`, id = the ordinal.
    Device(i32),
    /// `...MemLocationTypeHost` (id ignored).
    Host,
    /// `...MemLocationTypeHostNuma`, id = the NUMA node.
    HostNuma(i32),
    /// `...MemLocationTypeNone` (managed pools: no preferred location).
    Unspecified,
}

/// `cudaMemAllocationType` / `hipMemAllocationType` (1 pinned, 2 managed on
/// both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawAlloc {
    Pinned,
    Managed,
}

/// What kind of memory an address belongs to, as the runtime reports it
/// (`cudaPointerGetAttributes` / `hipPointerGetAttributes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryType {
    /// Host memory the runtime does not know: pageable (`malloc`, a `Vec`).
    Pageable,
    /// Pinned (page-locked) host memory: from a host pool,
    /// `cudaMallocHost`, `cudaHostAlloc`, or registered.
    PinnedHost,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
    /// A type this version of somalloc does not know (the runtime's number).
    Other(i32),
}

/// What the runtime says about an address (`cudaPointerGetAttributes` /
/// `hipPointerGetAttributes`), decoded by the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawPointerInfo {
    pub kind: MemoryType,
    /// The device the runtime names (-1 or another negative: none).
    pub device: i32,
    /// Whether the runtime gave a device address for it (the current
    /// device can address it).
    pub device_pointer: bool,
    /// Whether the runtime gave a host address for it.
    pub host_pointer: bool,
}

/// What a stream is doing with respect to graph capture
/// (`cudaStreamCaptureStatus` / `hipStreamCaptureStatus`: 0, 1, 2 on both).
#[allow(dead_code)] // called by the capture layer (not in this branch yet)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CaptureStatus {
    /// Not capturing: work runs.
    None,
    /// Capturing: work is recorded into a graph.
    Active,
    /// The capture was invalidated by an illegal call; it must still be
    /// ended (which fails).
    Invalidated,
}

/// The capture state of a stream, with the capture's identity.
#[allow(dead_code)] // called by the capture layer (not in this branch yet)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CaptureInfo<G> {
    pub status: CaptureStatus,
    /// Unique per capture in the process; 0 when not capturing.
    pub id: u64,
    /// The graph being captured into (only while `Active`).
    pub graph: Option<G>,
}

/// How a capture guards against unsafe calls from other threads
/// (`cudaStreamCaptureMode` / `hipStreamCaptureMode`: 0, 1, 2 on both).
#[allow(dead_code)] // called by the capture layer (not in this branch yet)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawCaptureMode {
    Global,
    ThreadLocal,
    Relaxed,
}

/// The graph-memory attributes of a device
/// (`cudaGraphMemAttributeType` / `hipGraphMemAttributeType`: 0..=3 on both).
#[allow(dead_code)] // called by the capture layer (not in this branch yet)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphMemAttr {
    UsedMemCurrent,
    UsedMemHigh,
    ReservedMemCurrent,
    ReservedMemHigh,
}

/// A host function the runtime calls once, on a thread of its own, when a
/// graph that retains it (and every executable graph made from it) has been
/// destroyed and their launches have completed. It must not call the runtime.
#[allow(dead_code)] // called by the capture layer (not in this branch yet)
pub(crate) type GraphRelease = unsafe extern "C" fn(data: *mut c_void);

// ---------------------------------------------------------------------------
// The virtual-memory API (`cuMem*` of the CUDA driver, `hipMem*` of HIP):
// address ranges reserved apart from the physical chunks mapped into them.
// Used by the arena (src/arena/), which builds on nothing else of the vendor.

/// A physical allocation of the virtual-memory API
/// (`CUmemGenericAllocationHandle` / `hipMemGenericAllocationHandle_t`), as
/// the integer the runtime hands out (HIP's handle is a pointer, carried as
/// its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PhysHandle(pub(crate) u64);

/// How a physical chunk is made: on `device`, shareable as a POSIX file
/// descriptor when `posix_fd`, GPUDirect-RDMA-capable when `rdma` (only set
/// where the layout has the flag and the device says so:
/// [`VmmSupport::rdma`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PhysProps {
    pub device: usize,
    pub posix_fd: bool,
    pub rdma: bool,
}

/// What a device offers of the virtual-memory API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VmmSupport {
    /// The device and the loaded runtime support it (attribute
    /// VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, every entry point found).
    pub supported: bool,
    /// POSIX file-descriptor handles can be requested (attribute
    /// HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED; false where unknown).
    pub posix_fd: bool,
    /// GPUDirect RDMA with VMM memory
    /// (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED; false on
    /// HIP layouts without the flag).
    pub rdma: bool,
    /// Minimum and recommended granularity (bytes) for chunks made with
    /// `PhysProps { device, posix_fd, rdma }` as above; 0 when !supported.
    pub granularity: usize,
    pub recommended: usize,
    /// Why not, when !supported (e.g. "cuMemCreate not found in the driver",
    /// "the device does not support virtual memory management").
    pub why_not: Option<&'static str>,
}

impl VmmSupport {
    /// Not supported, for `why`.
    pub(crate) const fn unsupported(why: &'static str) -> VmmSupport {
        VmmSupport {
            supported: false,
            posix_fd: false,
            rdma: false,
            granularity: 0,
            recommended: 0,
            why_not: Some(why),
        }
    }
}

/// Faults of the loaded runtime's virtual-memory API that the arena works
/// around (decided by the runtime's version: see `vmm_quirks` in
/// backends/rocm/vmm.rs, where each is sourced; CUDA has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VmmQuirks {
    /// `vmm_release` answers success but the physical memory stays allocated
    /// (until the process ends): a chunk once made is better kept and
    /// remapped than released and made again.
    pub release_leaks: bool,
    /// The physical memory of an unmapped and released chunk is freed only
    /// when the whole reservation it was mapped in is freed
    /// (`vmm_free_reservation`): to give memory back, free (and, to keep the
    /// addresses, reserve again) the reservation.
    pub reservation_holds_memory: bool,
    /// Every physical chunk holds one file descriptor of the process until
    /// it is released, so `RLIMIT_NOFILE` bounds the number of live chunks
    /// (and running into it reads as out of memory).
    pub fd_per_create: bool,
    /// The largest chunk one `vmm_create` should make (bytes, a multiple of
    /// every granularity); `None`: no limit beyond the device's memory.
    pub max_chunk: Option<usize>,
}

impl VmmQuirks {
    /// A runtime without known faults.
    pub(crate) const NONE: VmmQuirks = VmmQuirks {
        release_leaks: false,
        reservation_holds_memory: false,
        fd_per_create: false,
        max_chunk: None,
    };
}

/// The contract each vendor backend implements.
///
/// Safe functions here may be called with any handle the backend itself
/// produced and has not destroyed; the runtime reports misuse as an error.
/// Functions that touch device memory through a [`DevicePtr`] are `unsafe`:
/// the caller guarantees the range belongs to a live allocation.
///
/// The calling thread's current device belongs to the user: only
/// `set_device` changes it. Every other function that needs a device current
/// (creating a stream or an event, `mem_info`) makes it current and then
/// restores the previous one (nothing is set when it already is current).
///
/// What only somalloc's own tests, examples and benchmarks need (synchronous
/// allocation, loading and launching the test kernels) is not part of this
/// contract: see `TestSupport` (feature `kernels`).
pub(crate) trait Backend: Sized + 'static {
    /// A stream handle (`cudaStream_t`, `hipStream_t`).
    type Stream: Copy + Debug + PartialEq + Send + Sync;
    /// An event handle.
    type Event: Copy + Debug + Send + Sync;
    /// A memory-pool handle.
    type Pool: Copy + Debug + PartialEq + Send + Sync;

    /// A graph (`cudaGraph_t` / `hipGraph_t`).
    type Graph: Copy + Debug + PartialEq + Send + Sync;
    /// An executable graph (`cudaGraphExec_t` / `hipGraphExec_t`).
    type GraphExec: Copy + Debug + PartialEq + Send + Sync;

    /// Loads the runtime (once per process). Missing library: `RuntimeNotFound`.
    fn init() -> Result<()>;
    /// The runtime's version, e.g. 13000 for CUDA 13.0.
    fn runtime_version() -> Result<i32>;

    // Devices
    fn device_count() -> Result<usize>;
    fn set_device(ordinal: usize) -> Result<()>;
    fn device_name(ordinal: usize) -> Result<String>;
    /// (free, total) bytes.
    fn mem_info(ordinal: usize) -> Result<(usize, usize)>;
    fn pools_supported(ordinal: usize) -> Result<bool>;

    // Streams and events
    fn stream_create(device: usize) -> Result<Self::Stream>;
    fn stream_destroy(stream: Self::Stream) -> Result<()>;
    fn stream_synchronize(stream: Self::Stream) -> Result<()>;
    fn stream_wait_event(stream: Self::Stream, event: Self::Event) -> Result<()>;
    fn stream_from_raw(raw: *mut c_void) -> Self::Stream;
    fn stream_as_raw(stream: Self::Stream) -> *mut c_void;
    fn event_create(device: usize, timing: bool) -> Result<Self::Event>;
    fn event_destroy(event: Self::Event) -> Result<()>;
    fn event_record(event: Self::Event, stream: Self::Stream) -> Result<()>;
    fn event_synchronize(event: Self::Event) -> Result<()>;
    /// Whether the work before the event's last record has completed
    /// (`cudaEventQuery`): `false` while it is pending.
    fn event_query(event: Self::Event) -> Result<bool>;
    /// Milliseconds between two recorded timing events.
    fn event_elapsed_ms(start: Self::Event, end: Self::Event) -> Result<f32>;
    fn event_as_raw(event: Self::Event) -> *mut c_void;
    /// Unit tests: a made-up event handle (fake events never reach the
    /// runtime).
    #[cfg(test)]
    fn event_from_raw(raw: *mut c_void) -> Self::Event;

    // Pools
    fn default_pool(device: usize) -> Result<Self::Pool>;
    fn current_pool(device: usize) -> Result<Self::Pool>;
    fn set_current_pool(device: usize, pool: Self::Pool) -> Result<()>;
    fn pool_create(props: &RawPoolProps) -> Result<Self::Pool>;
    fn pool_destroy(pool: Self::Pool) -> Result<()>;
    fn pool_get(pool: Self::Pool, attr: PoolAttr) -> Result<u64>;
    fn pool_set(pool: Self::Pool, attr: PoolAttr, value: u64) -> Result<()>;
    fn pool_trim_to(pool: Self::Pool, keep_bytes: usize) -> Result<()>;
    fn pool_as_raw(pool: Self::Pool) -> *mut c_void;

    // Peer access and IPC. Access values: 0 none, 1 read, 3 read-write (the
    // same numbers on both vendors).
    fn can_access_peer(device: usize, peer: usize) -> Result<bool>;
    fn pool_set_access(pool: Self::Pool, device: usize, access: u32) -> Result<()>;
    fn pool_get_access(pool: Self::Pool, device: usize) -> Result<u32>;
    /// A new POSIX file descriptor for a pool created with that handle type;
    /// the caller owns it.
    fn pool_export_fd(pool: Self::Pool) -> Result<i32>;
    /// A pool imported from a descriptor (which the caller still owns).
    fn pool_import_fd(fd: i32) -> Result<Self::Pool>;
    /// The opaque 64 bytes that name an allocation of an exportable pool.
    fn pool_export_pointer(ptr: DevicePtr) -> Result<[u8; 64]>;
    /// The address, in this process, of an allocation exported elsewhere.
    fn pool_import_pointer(pool: Self::Pool, data: &[u8; 64]) -> Result<DevicePtr>;

    // Stream-ordered allocation. `bytes` is never 0 here: the safe layer
    // handles 0 itself so that every vendor behaves the same.
    fn malloc_async(bytes: usize, stream: Self::Stream) -> Result<DevicePtr>;
    fn malloc_from_pool_async(bytes: usize, pool: Self::Pool, stream: Self::Stream) -> Result<DevicePtr>;
    /// # Safety
    /// `ptr` came from `malloc_async`/`malloc_from_pool_async`, is not freed
    /// yet, and no work that uses it is enqueued after this free unless it is
    /// ordered before it.
    unsafe fn free_async(ptr: DevicePtr, stream: Self::Stream) -> Result<()>;

    // Copies and fills (stream-ordered)
    /// A stream-ordered copy between any two of host and device memory (the
    /// direction is inferred from the addresses: unified addressing).
    ///
    /// # Safety
    /// Each range is either a live device allocation or host memory that
    /// stays valid (and, for `dst`, unaccessed; for `src`, unchanged) until
    /// the copy completes.
    unsafe fn copy_async(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        stream: Self::Stream,
    ) -> Result<()>;
    /// # Safety
    /// `dst..dst+bytes` is a live device allocation.
    unsafe fn memset_async(dst: DevicePtr, value: u8, bytes: usize, stream: Self::Stream) -> Result<()>;

    // Stream capture and graphs. Where the loaded runtime lacks a call, the
    // answer is `Error::Unsupported` naming the runtime version.
    /// The capture status alone (`cudaStreamIsCapturing`), the cheaper query.
    #[allow(dead_code)] // called by the capture layer
    fn stream_capture_status(stream: Self::Stream) -> Result<CaptureStatus>;
    /// Status, capture id and graph (`cudaStreamGetCaptureInfo`).
    #[allow(dead_code)] // called by the capture layer
    fn stream_capture_info(stream: Self::Stream) -> Result<CaptureInfo<Self::Graph>>;
    #[allow(dead_code)] // called by the capture layer
    fn stream_begin_capture(stream: Self::Stream, mode: RawCaptureMode) -> Result<()>;
    /// Ends the capture and returns its graph; an invalidated capture is
    /// ended too and reported as an error (no graph is returned).
    #[allow(dead_code)] // called by the capture layer
    fn stream_end_capture(stream: Self::Stream) -> Result<Self::Graph>;
    #[allow(dead_code)] // called by the capture layer
    fn graph_destroy(graph: Self::Graph) -> Result<()>;
    /// Instantiates with `cudaGraphInstantiateFlagAutoFreeOnLaunch` when
    /// `auto_free_on_launch`.
    #[allow(dead_code)] // called by the capture layer
    fn graph_instantiate(graph: Self::Graph, auto_free_on_launch: bool) -> Result<Self::GraphExec>;
    #[allow(dead_code)] // called by the capture layer
    fn graph_exec_destroy(exec: Self::GraphExec) -> Result<()>;
    #[allow(dead_code)] // called by the capture layer
    fn graph_launch(exec: Self::GraphExec, stream: Self::Stream) -> Result<()>;
    #[allow(dead_code)] // called by the capture layer
    fn graph_upload(exec: Self::GraphExec, stream: Self::Stream) -> Result<()>;
    /// `cudaDeviceGetGraphMemAttribute` (bytes).
    #[allow(dead_code)] // called by the capture layer
    fn graph_mem_get(device: usize, attr: GraphMemAttr) -> Result<u64>;
    /// `cudaDeviceGraphMemTrim`.
    #[allow(dead_code)] // called by the capture layer
    fn graph_mem_trim(device: usize) -> Result<()>;
    /// Makes `graph` own a user object whose destructor is `release(data)`
    /// (`cudaUserObjectCreate` with `cudaUserObjectNoDestructorSync`, then
    /// `cudaGraphRetainUserObject` with `cudaGraphUserObjectMove`): the
    /// runtime calls it once the graph and every executable graph made from
    /// it are destroyed and their launches have completed.
    ///
    /// On an error `release` is never called and the caller still owns
    /// `data` (a user object made before a failed retain is leaked rather
    /// than released, since releasing it would run `release`).
    ///
    /// # Safety
    /// `release(data)` is sound to call once from any thread at any later
    /// time, and does not call the runtime.
    #[allow(dead_code)] // called by the capture layer
    unsafe fn graph_retain_release(
        graph: Self::Graph,
        release: GraphRelease,
        data: *mut c_void,
    ) -> Result<()>;
    // -----------------------------------------------------------------------
    // Pool locations, allocation types and host memory. Where the loaded
    // runtime lacks a location, a type or a call, the answer is
    // `Error::Unsupported` naming the runtime version.

    /// The default pool of a location and allocation type
    /// (`cudaMemGetDefaultMemPool`, CUDA 13; device + pinned: the classic
    /// `cudaDeviceGetDefaultMemPool` on every runtime).
    fn default_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<Self::Pool>;
    /// The current pool of a location and allocation type (`cudaMemGetMemPool`).
    fn current_pool_at(location: RawLocation, alloc: RawAlloc) -> Result<Self::Pool>;
    /// Makes `pool` current for its location and type (`cudaMemSetMemPool`).
    fn set_current_pool_at(location: RawLocation, alloc: RawAlloc, pool: Self::Pool) -> Result<()>;
    /// `cudaPointerGetAttributes` / `hipPointerGetAttributes` (any address;
    /// the runtime validates it; never null here).
    fn pointer_info(ptr: *const c_void) -> Result<RawPointerInfo>;

    // -----------------------------------------------------------------------
    // The virtual-memory API (backends/<vendor>/vmm.rs). On CUDA these are
    // driver calls, found through the runtime (`cudaGetDriverEntryPoint`)
    // and made with a context current (the current device's primary
    // context where the thread has none); the calls that name a device make
    // it current and restore the previous one, as the rest of this trait
    // does. What the loaded runtime lacks is `Error::Unsupported`.

    fn vmm_support(device: usize) -> Result<VmmSupport>;
    /// The faults of the loaded runtime's virtual-memory API
    /// ([`VmmQuirks::NONE`] where the runtime cannot be loaded).
    fn vmm_quirks() -> VmmQuirks;
    /// Reserves `bytes` of device address space aligned to `align`
    /// (cuMemAddressReserve(ptr, size, align, 0, 0)).
    fn vmm_reserve(bytes: usize, align: usize) -> Result<DevicePtr>;
    /// # Safety
    /// A whole reservation from vmm_reserve, nothing mapped in it.
    unsafe fn vmm_free_reservation(base: DevicePtr, bytes: usize) -> Result<()>;
    /// cuMemCreate / hipMemCreate of `bytes` (a multiple of the granularity)
    /// pinned device memory on props.device. Out of memory answers
    /// Error::OutOfMemory (as check_alloc does for allocations).
    fn vmm_create(bytes: usize, props: PhysProps) -> Result<PhysHandle>;
    /// # Safety
    /// A handle from vmm_create / vmm_retain / vmm_import_fd, released once.
    unsafe fn vmm_release(handle: PhysHandle) -> Result<()>;
    /// # Safety
    /// [ptr, ptr+bytes) lies in a reservation and is unmapped; `bytes`
    /// equals the handle's size.
    unsafe fn vmm_map(ptr: DevicePtr, bytes: usize, handle: PhysHandle) -> Result<()>;
    /// cuMemSetAccess for one device: read-write when `read_write`, none
    /// otherwise.
    ///
    /// # Safety
    /// The range is mapped.
    unsafe fn vmm_set_access(ptr: DevicePtr, bytes: usize, device: usize, read_write: bool) -> Result<()>;
    /// # Safety
    /// The range is mapped (whole mappings), and no work in flight uses it.
    unsafe fn vmm_unmap(ptr: DevicePtr, bytes: usize) -> Result<()>;
    /// cuMemRetainAllocationHandle: the handle behind a mapped address (the
    /// caller releases it).
    #[allow(dead_code)] // the test kit's handle check (feature `kernels`)
    fn vmm_retain(ptr: DevicePtr) -> Result<PhysHandle>;
    /// cuMemExportToShareableHandle as a POSIX fd (the caller closes it).
    #[allow(dead_code)] // the backends' round-trip tests; an IPC export of arena blocks later
    fn vmm_export_fd(handle: PhysHandle) -> Result<i32>;
    /// cuMemImportFromShareableHandle of a POSIX fd.
    #[allow(dead_code)] // the backends' round-trip tests; an IPC import of arena blocks later
    fn vmm_import_fd(fd: i32) -> Result<PhysHandle>;
}

/// What somalloc's own tests, examples and benchmarks need from a backend
/// beyond [`Backend`] (feature `kernels`, through `crate::testkit`): the
/// synchronous allocation the seeds compare against, and loading and
/// launching the test kernels. Nothing of the library proper calls it.
///
/// `malloc_sync` and `free_sync` make the device current and restore the
/// previous one, as [`Backend`]'s functions do; `module_load` and `launch`
/// use the current device as they find it.
#[cfg(somalloc_kernels)]
pub(crate) trait TestSupport: Backend {
    /// A loaded code object (module / library).
    type Module: Copy + Debug + Send + Sync;
    /// A kernel inside a module.
    type Function: Copy + Debug + Send + Sync;

    /// The calling thread's last error of the runtime, left as it is
    /// (`cudaPeekAtLastError` / `hipPeekAtLastError`); 0: none.
    fn peek_last_error() -> Result<i32>;

    /// Synchronous allocation (`cudaMalloc` / `hipMalloc`), for baselines.
    fn malloc_sync(device: usize, bytes: usize) -> Result<DevicePtr>;
    /// # Safety
    /// `ptr` came from `malloc_sync` and is not freed yet; the device may
    /// still be using it (the call synchronises).
    unsafe fn free_sync(device: usize, ptr: DevicePtr) -> Result<()>;

    /// Synchronous pinned host allocation (`cudaHostAlloc` / `hipHostMalloc`,
    /// with the default or the portable flag), for baselines. `bytes` is
    /// never 0 here.
    fn host_alloc(bytes: usize, portable: bool) -> Result<*mut c_void>;
    /// `cudaMallocHost` (HIP: `hipHostMalloc` with flags 0), for baselines.
    fn malloc_host(bytes: usize) -> Result<*mut c_void>;
    /// `cudaFreeHost` / `hipHostFree`.
    ///
    /// # Safety
    /// `ptr` came from `host_alloc` or `malloc_host`, is freed once, and no
    /// work that uses it is still queued (the runtime synchronises, but the
    /// caller must not free memory a later-queued copy reads).
    unsafe fn host_free(ptr: *mut c_void) -> Result<()>;

    fn module_load(image: &[u8]) -> Result<Self::Module>;
    fn module_unload(module: Self::Module) -> Result<()>;
    fn module_function(module: Self::Module, name: &std::ffi::CStr) -> Result<Self::Function>;
    /// # Safety
    /// `args` point to values whose types and count match the kernel's
    /// parameters, and every device address they carry stays valid until the
    /// kernel completes.
    unsafe fn launch(
        function: Self::Function,
        grid: u32,
        block: u32,
        stream: Self::Stream,
        args: &mut [*mut c_void],
    ) -> Result<()>;
}
