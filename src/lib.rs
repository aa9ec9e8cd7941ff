//! # somalloc
//!
//! One stream-ordered GPU memory allocator for NVIDIA (CUDA) and AMD
//! (ROCm/HIP). The vendor is picked when the crate is built, with exactly one
//! of the features `cuda` or `rocm`; the API is the same on both.
//!
//! Linux only (`x86_64-unknown-linux-gnu`). The vendor's runtime library is
//! loaded at run time, not linked: `libcudart.so.13` or `.so.12` (which the
//! NVIDIA driver does not ship: it comes with a CUDA toolkit, a distribution
//! package or the `nvidia-cuda-runtime` wheel; `SOMALLOC_CUDART` names the
//! file), or `libamdhip64.so.*` from ROCm (`SOMALLOC_AMDHIP`). The guide's
//! [Deployment](crate::guide::deployment) page says what each vendor needs
//! installed.
//!
//! * [`Device`], [`Stream`], [`Event`]: the minimum needed to order work.
//! * [`MemPool`]: the vendor's stream-ordered memory pool (default, current,
//!   or created), with its release threshold, reuse policy, statistics and
//!   trimming.
//! * [`DeviceBuffer`]: a typed allocation whose allocation and free are
//!   enqueued on a stream; use on another stream goes through
//!   [`DeviceBuffer::use_on`]. Views ([`DeviceView`], [`DeviceViewMut`],
//!   from [`DeviceBuffer::slice`]) are typed sub-ranges that go wherever a
//!   buffer goes (copies, fills, kernel arguments).
//! * Peer access ([`MemPool::set_access`]) and IPC ([`MemPool::export_fd`],
//!   [`MemPool::import_fd`], [`DeviceBuffer::export`], [`DeviceBuffer::import`]).
//! * Pools of pinned host memory and of managed memory ([`PoolProperties`],
//!   [`Location`], [`AllocationType`]) and [`HostBuffer`]: staging memory
//!   for asynchronous host-device copies, allocated in stream order, read on
//!   the host only once the stream is done with it.
//! * [`MemoryResource`]: where stream-ordered memory comes from (a pool is
//!   one); [`DeviceBuffer::new_with`] allocates from any. The [`adaptors`]
//!   wrap any resource (statistics, limiting, tracking, retry on out of
//!   memory), and the stream cache tier ([`CacheTier`], [`StreamCache`])
//!   serves repeat allocations on a stream without a driver call (see
//!   [The stream cache tier](#the-stream-cache-tier)).
//! * [`VmmArena`]: device memory owned through the vendor's virtual-memory
//!   API, split and merged at any size and given back chunk by chunk
//!   ([`VmmArena::trim`]); its chunks can be listed ([`VmmArena::segments`])
//!   for NCCL's buffer registration and granted to peers (see [the arena's
//!   docs](arena)). The C ABI and the Python package use it with
//!   `pool:vmm`.
//! * A current resource per device ([`set_current_resource`]): install a
//!   cache tier or an adaptor stack once, and [`DeviceBuffer::new`]
//!   allocates from it on that device's streams (a process-wide setting,
//!   like RMM's `set_current_device_resource`). [`fast_path`] installs the
//!   C interface's default in one call: a cache tier over a pool of
//!   somalloc's own that keeps freed memory.
//! * Memory history ([`trace`]): record a program's allocations into a
//!   file ([`adaptors::RecordingAdaptor`]), read it back ([`trace::Trace`]),
//!   replay it in the benchmark and view it with the `somalloc-trace` tool.
//! * Planned placement (experimental, feature `plan`): `somalloc::plan`
//!   places a recorded program's allocations in one arena by their
//!   lifetimes, and `adaptors::PlanningAdaptor` (from a trace of an earlier
//!   run) or `adaptors::AutoPlanner` (from the first steps of the same run)
//!   serves them from it.
//! * Stream capture into graphs ([`Stream::begin_capture`], [`Graph`],
//!   [`GraphExec`]): every allocation path is defined under capture (see
//!   [Stream capture and graphs](#stream-capture-and-graphs)).
//!
//! Errors are [`Error`] values, never panics: no runtime library
//! ([`Error::RuntimeNotFound`]), no device ([`Error::NoDevice`]), out of
//! memory ([`Error::OutOfMemory`], with the pool's or the arena's statistics), bad input
//! ([`Error::InvalidArgument`]), or any other vendor code ([`Error::Vendor`]).
//!
//! ```no_run
//! use somalloc::{Device, DeviceBuffer, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! // Once, at start-up: `DeviceBuffer::new` on device 0 allocates from a
//! // cache tier over a pool of somalloc's own that keeps freed memory (what
//! // the C interface does by default). Process-wide for device 0; other
//! // libraries' pools are untouched; `reset_current_resource` undoes it.
//! let tier = somalloc::fast_path(&dev)?;
//! let stream = Stream::new(&dev)?;
//!
//! let mut a = DeviceBuffer::<u32>::new(1 << 20, &stream)?; // enqueued, no sync
//! a.memset(0)?;
//! let other = Stream::new(&dev)?;
//! a.use_on(&other)?; // `other` may now use `a`; the free will wait for it
//! drop(a); // the free is enqueued on `stream` after `other`'s work, into `stream`'s cache
//! let b = DeviceBuffer::<u32>::new(1 << 20, &stream)?; // the same block again: no driver call
//! drop(b);
//! stream.synchronize()?;
//! println!("{}", tier.stats()); // 1 hit, 1 miss
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what |
//! |---|---|
//! | `cuda` | the NVIDIA backend (CUDA 12 or 13 runtime, loaded at run time) |
//! | `rocm` | the AMD backend (HIP runtime, loaded at run time) |
//! | `cudarc` | interop with the application's cudarc (implies `cuda`): `interop::cudarc`; buffers and views are cudarc's `DevicePtr`/`DevicePtrMut` (cuBLAS, cuDNN) |
//! | `hip-sys` | typed handles of the `hip-sys` crate (implies `rocm`): `interop::hip_sys` |
//! | `plan` | **experimental, no semver promise yet**: the planned placement's Rust API, the planner `somalloc::plan` and the adaptors that serve a plan (`adaptors::PlanningAdaptor`, `PlannedArena`, `StreamPlans`, `AutoPlanner`, `AutoOptions`, `AutoStatus`, `PLAN_WINDOW`); pure Rust. The C ABI and the Python package turn it on |
//! | `kernels` | **unstable, for this crate's own tests, examples and benchmarks only**: builds the test kernels with nvcc or hipcc, and turns on `plan`; never enable it from another crate (Cargo would make every build of the dependency graph need the compiler) |
//!
//! Exactly one of `cuda` and `rocm`; the build stops with a message otherwise.
//!
//! # The stream cache tier
//!
//! Per-stream free lists in front of any resource.
//!
//! The vendor pool costs a driver call (and, across threads, the driver's
//! lock) for every allocation and every free. But a block freed on stream
//! `S` may be handed to a later allocation on `S` with no call at all: later
//! work on `S` is ordered after earlier work on `S`. [`CacheTier`] keeps such
//! blocks, per stream and per size class, and hands them out again.
//!
//! ```no_run
//! use std::sync::Arc;
//! use somalloc::{CacheConfig, CacheTier, Device, DeviceBuffer, MemPool, MemoryResource, Stream};
//!
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let pool = MemPool::default_for(&dev)?;
//! let tier = CacheTier::new(Arc::new(pool), CacheConfig::default())?;
//! let stream = Stream::new(&dev)?;
//! let res: Arc<dyn MemoryResource> = tier.for_stream(&stream)?; // once per stream
//! for _ in 0..1000 {
//!     let buf = DeviceBuffer::<f32>::new_with(1 << 20, &res, &stream)?; // a hit after the first
//!     drop(buf); // back into `stream`'s cache, no driver call
//! }
//! println!("{}", tier.stats());
//! tier.flush()?; // everything cached goes back to the pool (stream-ordered frees)
//! # Ok(()) }
//! ```
//!
//! ## The hot path
//!
//! Each stream has its own [`StreamCache`] (from [`CacheTier::for_stream`]),
//! a separate heap object aligned to its own cache lines, with its own
//! lock. A hit is the stream check, the capture check (two relaxed loads
//! for an owned stream), the size class, the lock, a pop from the class's
//! free list and a few counters; a cached free pushes the block back the
//! same way. What makes it cheap:
//!
//! * **A lock biased to its thread.** A stream is nearly always driven by
//!   one thread, so the thread that has taken a stream's lock 16 times in
//!   a row becomes its owner and from then on enters and leaves with plain
//!   stores and a compiler fence: no atomic read-modify-write, which would
//!   drain the store buffer and cost more than the rest of the hit. Another
//!   thread that needs the stream takes the ownership away, paying for both
//!   sides with a process-wide memory barrier (Linux `membarrier`, a few
//!   microseconds), and each take-away makes the next grant four times
//!   harder to earn, so threads that take turns on a stream soon all use
//!   the plain spin lock (one compare-and-swap). The owner marks itself
//!   inside with a flag of its own thread, which no other thread writes, so
//!   a thread that lost ownership while paused cannot disturb the next
//!   owner. Where the OS has no such barrier, or with
//!   [`CacheConfig::thread_bias`] off, the lock is a plain spin lock.
//! * **Nothing shared is written.** Threads with streams of their own never
//!   touch a common cache line on a hit or a cached free. The shared parts
//!   are touched only on slow paths: the total cap's byte counter (a stream
//!   leases credit for its cached bytes in granules of `total_cap / 64`, at
//!   most 16 MiB, keeps it across hits, and gives back what exceeds two
//!   granules of slack on a miss, a trim or a flush; a stream that finds
//!   the cap used up takes back other streams' idle credit), and the
//!   registry of streams (registration, flush, trim, recovery from out of
//!   memory, reclaiming idle credit).
//! * **Buffers hold no reference count on their cache.** A
//!   [`DeviceBuffer`] made by
//!   [`new_with`](crate::DeviceBuffer::new_with) on a `StreamCache` does not
//!   clone the `Arc` of the cache nor of the stream: the cache counts the
//!   block as *pinned* (under the lock it takes anyway) and stays alive,
//!   with its stream, until the block comes back, even after the tier and
//!   every handle to it are gone. The buffer's drop is a static call.
//! * **Small answers on the fast paths.** The hit and the cached free answer
//!   with an `Option` or a `bool`; the misses, the caps and capture go
//!   through `#[cold]` functions.
//!
//! The guide's [Measured](https://github.com/somalloc/somalloc/blob/main/docs/measured.md) page gives the costs on a real device.
//!
//! ## Size classes and waste
//!
//! Requests of `1..=max_block_bytes` bytes are rounded up to a size class
//! and the class size is what the upstream resource allocates, so a cached
//! block serves any request of its class. Classes start at 256 bytes and
//! have 8 steps per power of two: 256, 288, 320, …, 480, 512, 576, …. A
//! request of `b ≥ 256` bytes gets a block of less than `b × 9/8`
//! ([`CacheTier::block_size`]), i.e. at most 12.5 % waste (about 4.5 % on
//! average for log-uniform sizes); smaller requests get 256 bytes. Requests
//! above `max_block_bytes` go straight to the upstream resource, unrounded
//! and uncached.
//!
//! ## Caps, the footprint budget, and the footprint guard
//!
//! * On a free, a block goes back to the upstream resource (a stream-ordered
//!   free on its stream) instead of into the cache when keeping it would put
//!   the stream's cached bytes above `per_stream_cap` (default 256 MiB), or
//!   the total cached bytes of all streams above `total_cap` (default
//!   1 GiB). Cached bytes are never above either cap.
//! * The footprint budget ([`CacheConfig::reuse_larger`], on by default):
//!   when a miss would take the stream's footprint (live + cached bytes)
//!   above its highest live bytes so far plus a headroom (12.5 % of that
//!   peak), the miss takes a cached block of
//!   up to twice its class size (the next eight classes), if there is one,
//!   instead of asking the upstream. The block keeps its size: its free
//!   puts it back in its own class (the cache remembers which blocks are
//!   out in a larger class), and the upstream sees it back in the size it
//!   handed out. Nothing is returned upstream for this, so the upstream
//!   sees fewer allocations and no extra frees, and a pool does not
//!   fragment on them. Allocations through the tier itself (the tier as
//!   the resource) never get a larger block.
//! * On an out-of-memory answer from upstream, the stream returns all its
//!   cached blocks and retries; then those of every other stream, and
//!   retries once more.
//! * The footprint guard ([`Headroom`] in [`CacheConfig::headroom`], off by
//!   default): on a miss, when the stream's live bytes plus its cached
//!   bytes would exceed its highest live bytes so far plus the headroom,
//!   the stream first returns cached blocks (largest first) to the
//!   upstream, on its own stream, so that what it holds from the upstream
//!   (live + cached) stays within its live peak (in class sizes) plus the
//!   headroom. The model test gives 1.08 × the requested peak on the churn
//!   workload. But the CUDA pool does not reuse blocks returned in one size
//!   for requests of another size well: on a real device the guard made
//!   the pool's reserved peak on the churn workload larger than without it,
//!   and larger than the raw pool's. Hence off unless the upstream reuses
//!   freed memory well; the footprint budget above keeps the footprint down
//!   without those frees.
//!
//! On the churn workload (up to 1000 live buffers of 2^U(8,22) bytes, one
//! stream) the default configuration serves nearly every allocation from
//! the cache, and the pool sees few frees, so it fragments less than under
//! the raw calls; its used bytes count the cached blocks too.
//!
//! [`CacheTier::flush`] and [`CacheTier::trim`] return cached blocks on
//! demand; dropping the tier returns everything (a [`StreamCache`] that a
//! buffer still holds is detached: its later frees go straight upstream).
//!
//! ## Why a cached block is safe to reuse
//!
//! A block enters the cache of stream `S` only through
//! [`MemoryResource::deallocate`] on `S`, whose contract is that every use
//! of the block, on any stream, is ordered before that point of `S`.
//! [`DeviceBuffer`]'s drop keeps it: before it calls
//! `deallocate` it makes `S` wait on an event recorded on every stream the
//! buffer was given to with `use_on`, so the uses on those streams that
//! were enqueued before the drop precede that point of `S`, and the uses on
//! `S` precede it by stream order. A later allocation on `S` that takes the
//! block from the cache enqueues its work on `S` after that point, hence
//! after every earlier use; a stream it is then given to waits on an event
//! recorded on `S` after the allocation, hence after them too. Work on
//! another stream `T` is not ordered after that point of `S`, so the cache
//! is keyed by stream: a [`StreamCache`] refuses (with
//! [`Error::InvalidArgument`]) an allocation or a free on any stream other
//! than its own, and never hands a block cached on `S` to `T`. Returning a
//! cached block upstream (flush, trim, caps, guard, recovery, drop) frees it
//! on `S`, after that same point.
//!
//! ## Under stream capture
//!
//! While `S` is captured into a graph, an allocation on `S` records a graph
//! allocation node: the graph owns that memory and replays its work on it
//! later, again and again. A cached block handed into a capture would be
//! used by every replay of the graph while the cache (which saw it come
//! back at the captured free) hands it to ordinary allocations too; a
//! graph address taken into the cache would be handed out while the graph
//! owns it. So the cache stands aside while its stream captures:
//!
//! * an allocation goes to the upstream resource (a graph allocation node
//!   when the upstream is a pool), in its class size, and is counted in
//!   [`StreamCacheStats::captured`]; the block is remembered (in a small map
//!   looked at only while it is not empty), so that its free, during the
//!   capture or after it, goes back upstream and never into the cache;
//! * a free on the capturing stream goes upstream too (the pool defers the
//!   free of memory allocated outside the capture until the graph is gone;
//!   a [`DeviceBuffer`] defers it before it reaches
//!   the cache);
//! * flush, trim and out-of-memory recovery leave a capturing stream's
//!   cached blocks where they are (they are freed on a later call); dropping
//!   the tier or removing the stream hands them to the queue of frees that
//!   wait for the stream to leave its capture.
//!
//! These calls ([`CacheTier::flush`], [`CacheTier::trim`],
//! [`StreamCache::flush`], [`StreamCache::trim`],
//! [`CacheTier::remove_stream`], dropping the tier) ask the stream once
//! whether it captures, and then free its cached blocks on it. So **a
//! capture of a stream must not begin, on any thread, while one of them
//! runs for that stream's cache**: a capture begun in between would receive
//! the frees as its own work (recorded into its graph, or refused by the
//! runtime) instead of leaving the blocks cached or queued, and the cache
//! would count them as returned. No lock of the cache can close that
//! window, since beginning a capture takes none; it is the rule for any
//! call that enqueues work on a stream, whose program orders the beginning
//! of the stream's capture with that work.
//!
//! An allocation that runs out of memory does the same for **every other
//! stream of the tier** (it frees their cached blocks on their streams,
//! then retries): while a thread may run out of memory allocating through
//! a tier, another thread must not begin a capture of one of the tier's
//! streams. A program that captures on one thread while others allocate
//! through the same tier either keeps its captured streams on a tier of
//! their own, or begins their captures where no other thread allocates
//! (at a barrier).
//!
//! Knowing that the stream captures costs two relaxed loads for an owned
//! stream while no capture is in progress (see
//! [Stream capture](crate::Stream#stream-capture)); a borrowed stream is
//! asked once per allocation and once per free, unless its program promised
//! that only somalloc captures it
//! ([`Stream::assume_captured_only_by_somalloc`]).
//!
//! # Stream capture and graphs
//!
//! A stream in capture (CUDA graphs, HIP graphs) records its work into a
//! graph instead of running it;
//! the graph is then instantiated once and launched (replayed) many times.
//! Stream-ordered allocations made during a capture become *graph memory
//! nodes*: the graph owns that memory, at addresses fixed for the graph, and
//! every replay allocates and frees it again. somalloc therefore treats a
//! capturing stream specially on every path:
//!
//! | path | under capture |
//! |---|---|
//! | [`DeviceBuffer::new`], [`DeviceBuffer::new_in`], a [`MemPool`] as a resource | a graph allocation node; its drop in the same capture is a graph free node |
//! | the cache tier ([`StreamCache`], [`CacheTier`]) | stands aside: allocations go to the upstream resource (graph memory, counted as `captured` in its statistics) and such a block is never cached, not even when it is freed after the capture; no cached block is handed into a capture; flush, trim and out-of-memory recovery skip a capturing stream |
//! | a buffer allocated outside the capture and dropped inside it | the graph may use the memory on every replay, so the free waits until the graph and every executable graph made from it are destroyed (and their launches done); it then happens on the buffer's stream, through its pool or resource, at the next safe point (an allocation or a drop through somalloc, a [`Graph`] or [`GraphExec`] drop, or [`reclaim_graph_frees`]) |
//! | a buffer allocated inside the capture and alive at its end (a graph *output*) | holds the latest launch's result; each launch frees the previous launch's output first (executables are always made with auto-free-on-launch); dropping it frees the latest launch's memory (on the stream of that launch, after the buffer's own stream), or does nothing if the graph was never launched; an executable launched after such a drop frees what that launch allocated again when it is dropped |
//! | [`DeviceBuffer::use_on`] and [`Stream::wait_event`] between a capturing and a non-capturing stream (or two captures) | [`Error::Capture`]; within one capture (fork/join) they work as usual |
//! | [`Stream::synchronize`] of a capturing stream | [`Error::Capture`]: the capture goes on |
//! | the adaptors | count host-side calls: a captured allocation is counted once, at capture, however often the graph is replayed |
//!
//! ```no_run
//! use somalloc::{CaptureMode, Device, DeviceBuffer, Stream};
//! # fn main() -> somalloc::Result<()> {
//! let dev = Device::get(0)?;
//! let stream = Stream::new(&dev)?;
//! stream.begin_capture(CaptureMode::ThreadLocal)?;
//! let mut scratch = DeviceBuffer::<f32>::new(1 << 20, &stream)?; // a graph allocation node
//! scratch.memset(0)?; // recorded, not run
//! drop(scratch); // a graph free node
//! let graph = stream.end_capture()?;
//! let exec = graph.instantiate()?;
//! for _ in 0..1000 {
//!     exec.launch(&stream)?; // allocates, fills and frees on every replay
//! }
//! stream.synchronize()?;
//! println!("{}", dev.graph_mem_stats()?);
//! # Ok(()) }
//! ```
//!
//! ## Which streams are asked
//!
//! Asking whether a stream is capturing costs more than a whole cached
//! allocation of the cache tier (see the guide's [Measured](https://github.com/somalloc/somalloc/blob/main/docs/measured.md) page). somalloc
//! counts the captures begun through [`Stream::begin_capture`]; an owned
//! stream ([`Stream::new`]) is asked only while that count is not zero or
//! after it waited on an event recorded during a capture. A borrowed stream
//! ([`Stream::from_raw`], `Stream::from_cudarc`) is asked on every
//! allocation and free (once each), since whoever lent it may capture it,
//! unless the program promises, with the `unsafe`
//! [`Stream::assume_captured_only_by_somalloc`], that it captures the stream
//! only through somalloc: it then costs what an owned stream costs. So:
//! **capture owned (and promised) streams only through
//! [`Stream::begin_capture`]**.
//!
//! # Layers
//!
//! The crate's modules form layers that only point down (a module uses
//! only modules below it; `python3 ci/layers.py` checks this and prints the
//! layers). From the bottom: `format` (the trace file's types, reader and
//! writer: `std` only) and `plan` (the placement planner, feature `plan`,
//! which reads traces: no device, no runtime); `error` (the error type, the vendor names);
//! `backend`, the contract a vendor backend fulfils, with the vendor-blind
//! values it speaks in (pointers, memory types, capture states); `common`
//! and the one vendor backend built (`cuda` or `rocm`), which load the
//! runtime and implement the contract; `device` and `capture` (what
//! somalloc knows about stream capture below the streams: the status types
//! and the count of captures in progress); `stream`; `trace` (recording,
//! which notes stream handles); `pool` and `graph` (captures, graphs, the
//! deferred frees); `resource`, the [`MemoryResource`] trait with its
//! implementations for the pools; `cache`, the stream cache tier, and
//! `current`, the current resource per device; `buffer` and the
//! [`adaptors`]; and at the top `host` (host buffers, which wrap device
//! buffers' bookkeeping) and `interop` (cudarc, hip-sys). So a change to the
//! cache cannot reach the backend contract, and the crate can be read from
//! the bottom up.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(missing_debug_implementations)]

pub mod adaptors;
pub mod arena;
mod backend;
mod buffer;
mod cache;
mod capture;
mod current;
mod device;
mod error;
mod format;
mod graph;
pub mod guide;
mod host;
#[cfg(feature = "plan")]
pub mod plan;
mod pool;
mod pool_stats;
mod resource;
mod stream;
mod sync;
#[cfg(test)]
mod testing;
pub mod trace;
// The test kit of the crate's own tests, examples and benchmarks: hidden,
// unstable, no semver promise (see its module docs).
#[cfg(somalloc_kernels)]
#[doc(hidden)]
pub mod testkit;

#[cfg(any(feature = "cudarc", feature = "hip-sys"))]
pub mod interop;

#[path = "../backends/common.rs"]
mod common;

// The backend: build.rs sets exactly one of these cfgs (and stops the build
// with a message naming the features otherwise), so the last arm is only a
// guard for builds that bypass build.rs.
cfg_if::cfg_if! {
    if #[cfg(somalloc_cuda)] {
        #[path = "../backends/cuda/mod.rs"]
        mod cuda;
        pub(crate) type Active = cuda::Cuda;
        const VENDOR: Vendor = Vendor::Cuda;
    } else if #[cfg(somalloc_rocm)] {
        #[path = "../backends/rocm/mod.rs"]
        mod rocm;
        pub(crate) type Active = rocm::Rocm;
        const VENDOR: Vendor = Vendor::Rocm;
    } else {
        compile_error!("somalloc: enable exactly one backend feature: `cuda` or `rocm`");
    }
}

pub use arena::{ArenaOptions, ArenaSegment, ArenaStats, VmmArena};
pub use backend::MemoryType;
pub use buffer::{AsDeviceView, AsDeviceViewMut, DeviceBuffer, DeviceView, DeviceViewMut, ExportedBuffer};
pub use bytemuck::Pod;
pub use cache::{CacheConfig, CacheStats, CacheTier, Headroom, StreamCache, StreamCacheStats};
pub use current::{current_resource, fast_path, reset_current_resource, set_current_resource};
pub use device::Device;
pub use error::{drop_errors, DropErrors, Error, InvalidReason, Result, Vendor, VendorCode};
pub use graph::{
    pending_graph_frees, reclaim_graph_frees, CaptureMode, CaptureStatus, Graph, GraphExec, GraphMemStats,
};
pub use host::{pointer_info, HostBuffer, PointerInfo};
pub use pool::{
    AllocationType, ExportHandle, Location, MemPool, PeerAccess, Placement, PoolProperties, ReusePolicy,
};
pub use pool_stats::PoolStats;
pub use resource::{MemoryResource, SharedResource};
pub use stream::{Event, Stream};
