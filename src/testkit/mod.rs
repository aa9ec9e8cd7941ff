//! The test kit of somalloc's own tests, examples and benchmarks (feature
//! `kernels`). **Unstable: not part of the public API.** It is hidden from
//! the documentation, carries no semver promise, and may change or vanish
//! in any release; nothing outside this repository should use it.
//!
//! * [`TestKernels`]: fill, verify, spin, the seeds' `processKernel`, and
//!   32-bit iota / axpy / add for per-replay patterns of graphs, compiled
//!   from `kernels/` by nvcc or hipcc at build time, embedded, and loaded at
//!   run time. A kernel that writes takes its target by `&mut`, as the
//!   buffer's own writes do ([`DeviceBuffer::memset`]); `process` is the one
//!   exception, kept as the seeds' pipeline and the benchmark call it.
//! * [`SyncBuffer`]: the synchronous `cudaMalloc` / `cudaFree` baseline.
//! * [`RawRange`]: raw device memory named for the kernels (`unsafe` to make).
//! * [`raw`]: the vendor's stream-ordered calls with nothing on top
//!   (raw pointers; the free is `unsafe`).
//!
//! The backend calls behind it (synchronous allocation, code objects and
//! launches) are not part of the allocator's backend contract either: they
//! live in a trait of their own that only this module uses.

use std::ffi::{c_void, CStr};

use bytemuck::Pod;

use crate::backend::{Backend, DevicePtr, TestSupport};
use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut};
use crate::device::Device;
use crate::error::{record_drop_error, Error, InvalidReason, Result};
use crate::pool::MemPool;
use crate::stream::Stream;
use crate::Active;

static IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/somalloc_kernels.bin"));

const BLOCK: u32 = 256;
const MAX_GRID: u64 = 4096;

/// The calling thread's last error of the runtime (what `cudaGetLastError`
/// / `hipGetLastError` would return), without resetting it; 0: none.
pub fn runtime_last_error() -> Result<i32> {
    Active::peek_last_error()
}

/// Whether the vendor names a physical allocation behind `ptr`
/// (`cuMemRetainAllocationHandle` / `hipMemRetainAllocationHandle`, then
/// its release): what NCCL's buffer registration asks of memory.
pub fn vmm_handle_check(ptr: *mut c_void) -> Result<()> {
    let handle = Active::vmm_retain(DevicePtr(ptr as usize))?;
    // SAFETY: retained just above, released once.
    unsafe { Active::vmm_release(handle) }
}

/// The byte the fill kernel writes at `index` for `seed` (host copy of the
/// device function, for checks on the host).
pub fn pattern_byte(index: u64, seed: u32) -> u8 {
    let mut x = index
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(seed).wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    x = x.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    x ^= x >> 29;
    (x & 0xFF) as u8
}

mod sealed {
    pub trait Sealed {}
}

/// Device memory the test kernels can work on: a [`DeviceBuffer`] or a view
/// of one ([`DeviceView`], [`DeviceViewMut`]), a
/// [`SyncBuffer`], or a raw allocation named by a [`RawRange`].
pub trait KernelTarget: sealed::Sealed {
    /// Device address and size in bytes.
    fn range(&self) -> (*mut c_void, usize);
    /// Whether work on `stream` may touch this memory.
    fn usable_on(&self, stream: &Stream) -> bool;
}

impl<T: Pod> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Pod> KernelTarget for DeviceBuffer<T> {
    fn range(&self) -> (*mut c_void, usize) {
        (self.as_raw(), self.size_in_bytes())
    }
    fn usable_on(&self, stream: &Stream) -> bool {
        self.is_usable_on(stream)
    }
}

impl<T: Pod> sealed::Sealed for DeviceView<'_, T> {}
impl<T: Pod> KernelTarget for DeviceView<'_, T> {
    fn range(&self) -> (*mut c_void, usize) {
        (self.as_raw(), self.size_in_bytes())
    }
    fn usable_on(&self, stream: &Stream) -> bool {
        self.is_usable_on(stream)
    }
}

impl<T: Pod> sealed::Sealed for DeviceViewMut<'_, T> {}
impl<T: Pod> KernelTarget for DeviceViewMut<'_, T> {
    fn range(&self) -> (*mut c_void, usize) {
        (self.as_raw(), self.size_in_bytes())
    }
    fn usable_on(&self, stream: &Stream) -> bool {
        self.is_usable_on(stream)
    }
}

/// Memory from the synchronous `cudaMalloc` / `hipMalloc`, freed with the
/// synchronous `cudaFree` / `hipFree` on drop: the baseline the seeds compare
/// stream-ordered allocation against. Usable on every stream of its device,
/// since the synchronous free waits for the whole device.
#[derive(Debug)]
pub struct SyncBuffer {
    ptr: DevicePtr,
    bytes: usize,
    device: Device,
}

impl SyncBuffer {
    /// Allocates `bytes` (at least 1) synchronously on `device`.
    pub fn new(device: &Device, bytes: usize) -> Result<SyncBuffer> {
        if bytes == 0 {
            return Err(InvalidReason::ZeroBytes.error("SyncBuffer of 0 bytes"));
        }
        Ok(SyncBuffer {
            ptr: Active::malloc_sync(device.ordinal(), bytes)?,
            bytes,
            device: *device,
        })
    }
}

impl Drop for SyncBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from malloc_sync and is freed exactly once; the
        // synchronous free waits for any kernel still using it.
        record_drop_error(unsafe { Active::free_sync(self.device.ordinal(), self.ptr) });
    }
}

impl sealed::Sealed for SyncBuffer {}
impl KernelTarget for SyncBuffer {
    fn range(&self) -> (*mut c_void, usize) {
        (self.ptr.as_mut_ptr(), self.bytes)
    }
    fn usable_on(&self, stream: &Stream) -> bool {
        stream.device() == self.device
    }
}

/// A raw device allocation (from [`raw`], a [`MemoryResource`](crate::MemoryResource)'s
/// `allocate`, ...) named for the test kernels, usable on one stream.
///
/// It owns nothing and frees nothing: the caller keeps the allocation alive
/// and orders its free after the kernels (for a stream-ordered free, enqueue
/// it on the same stream after them). It holds a raw pointer, so it is
/// neither `Send` nor `Sync`; make one where the kernels are enqueued.
///
/// ```no_run
/// use somalloc::testkit::{raw, RawRange, TestKernels};
/// use somalloc::{Device, MemPool, Stream};
/// # fn main() -> somalloc::Result<()> {
/// let dev = Device::get(0)?;
/// let stream = Stream::new(&dev)?;
/// let pool = MemPool::default_for(&dev)?;
/// let kernels = TestKernels::load(&dev)?;
/// let ptr = raw::malloc_from_pool_async(4 << 20, &pool, &stream)?;
/// // SAFETY: a live 4 MiB allocation usable on `stream`, freed on `stream`
/// // after the kernel below.
/// let range = unsafe { RawRange::new(ptr, 4 << 20, &stream) };
/// kernels.process(&range, &stream)?;
/// // SAFETY: from malloc_from_pool_async, freed once, after its last use on `stream`.
/// unsafe { raw::free_async(ptr, &stream)? };
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RawRange {
    ptr: *mut c_void,
    bytes: usize,
    stream: Stream,
}

impl RawRange {
    /// Names `bytes` of device memory at `ptr` for kernels enqueued on
    /// `stream` (and on no other stream).
    ///
    /// # Safety
    /// `ptr..ptr + bytes` is a live device allocation that work on `stream`
    /// may use (allocated on `stream`, or ordered before it), and it stays
    /// allocated until every kernel enqueued with this target has completed
    /// (a stream-ordered free enqueued on `stream` after those kernels
    /// does).
    pub unsafe fn new(ptr: *mut c_void, bytes: usize, stream: &Stream) -> RawRange {
        RawRange {
            ptr,
            bytes,
            stream: stream.clone(),
        }
    }
}

impl sealed::Sealed for RawRange {}
impl KernelTarget for RawRange {
    fn range(&self) -> (*mut c_void, usize) {
        (self.ptr, self.bytes)
    }
    fn usable_on(&self, stream: &Stream) -> bool {
        *stream == self.stream
    }
}

/// The loaded test kernels.
#[derive(Debug)]
pub struct TestKernels {
    module: <Active as TestSupport>::Module,
    fill: <Active as TestSupport>::Function,
    verify: <Active as TestSupport>::Function,
    spin: <Active as TestSupport>::Function,
    process: <Active as TestSupport>::Function,
    iota: <Active as TestSupport>::Function,
    axpy: <Active as TestSupport>::Function,
    add: <Active as TestSupport>::Function,
    device: Device,
}

fn grid_for(n: u64) -> u32 {
    // n > 0 here; at most MAX_GRID blocks, each thread loops over the rest.
    n.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GRID) as u32
}

impl TestKernels {
    /// Loads the embedded code object for `device`.
    pub fn load(device: &Device) -> Result<TestKernels> {
        Active::set_device(device.ordinal())?;
        // Code objects want 8-byte alignment; `include_bytes!` gives 1.
        let mut aligned = vec![0u64; IMAGE.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..IMAGE.len()].copy_from_slice(IMAGE);
        let module = Active::module_load(bytemuck::cast_slice(&aligned))?;
        let get = |name: &CStr| Active::module_function(module, name);
        let loaded = (|| {
            Ok::<_, Error>((
                [
                    get(c"somalloc_fill")?,
                    get(c"somalloc_verify")?,
                    get(c"somalloc_spin")?,
                    get(c"somalloc_process")?,
                ],
                [
                    get(c"somalloc_iota_u32")?,
                    get(c"somalloc_axpy_u32")?,
                    get(c"somalloc_add_u32")?,
                ],
            ))
        })();
        match loaded {
            Ok(([fill, verify, spin, process], [iota, axpy, add])) => Ok(TestKernels {
                module,
                fill,
                verify,
                spin,
                process,
                iota,
                axpy,
                add,
                device: *device,
            }),
            Err(e) => {
                record_drop_error(Active::module_unload(module));
                Err(e)
            }
        }
    }

    fn check(buf: &impl KernelTarget, stream: &Stream) -> Result<()> {
        if !buf.usable_on(stream) {
            return Err(InvalidReason::WrongStream
                .error("the buffer is not usable on this stream; call use_on first"));
        }
        Ok(())
    }

    fn launch(
        &self,
        f: <Active as TestSupport>::Function,
        n: u64,
        stream: &Stream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        Active::set_device(stream.device().ordinal())?;
        // SAFETY: every caller passes arguments matching the kernel's
        // signature in kernels/somalloc_kernels.cu, and device addresses of
        // buffers usable on `stream`, whose frees are ordered after this
        // launch (same stream, or through use_on's event).
        unsafe { Active::launch(f, grid_for(n), BLOCK, stream.raw(), args) }
    }

    /// Enqueues on `stream` a fill of every byte of `buf` with the pattern
    /// for `seed` (see [`pattern_byte`]).
    pub fn fill(&self, buf: &mut impl KernelTarget, seed: u32, stream: &Stream) -> Result<()> {
        Self::check(buf, stream)?;
        let (mut ptr, n) = buf.range();
        let mut n = n as u64;
        if n == 0 {
            return Ok(());
        }
        let mut seed = seed;
        self.launch(
            self.fill,
            n,
            stream,
            &mut [
                (&mut ptr as *mut *mut c_void).cast(),
                (&mut n as *mut u64).cast(),
                (&mut seed as *mut u32).cast(),
            ],
        )
    }

    /// Counts, on `stream`, the bytes of `buf` that differ from the pattern
    /// for `seed`; waits for the answer.
    pub fn verify(&self, buf: &impl KernelTarget, seed: u32, stream: &Stream) -> Result<u64> {
        Self::check(buf, stream)?;
        let (mut ptr, n) = buf.range();
        let mut n = n as u64;
        if n == 0 {
            return Ok(0);
        }
        let pool = MemPool::default_for(&stream.device())?;
        let mut counter = DeviceBuffer::<u64>::new_in(1, &pool, stream)?;
        counter.memset(0)?;
        let mut seed = seed;
        let mut out = counter.as_raw();
        self.launch(
            self.verify,
            n,
            stream,
            &mut [
                (&mut ptr as *mut *mut c_void).cast(),
                (&mut n as *mut u64).cast(),
                (&mut seed as *mut u32).cast(),
                (&mut out as *mut *mut c_void).cast(),
            ],
        )?;
        // `counter` lives on `stream`; copy_to_host synchronises it.
        let mut host = [0u64];
        counter.copy_to_host(&mut host)?;
        Ok(host[0])
    }

    /// Enqueues on `stream` a kernel that busy-waits `cycles` GPU clock
    /// cycles (about `cycles / clock rate` seconds).
    pub fn spin(&self, cycles: u64, stream: &Stream) -> Result<()> {
        let mut cycles = cycles;
        self.launch(self.spin, 1, stream, &mut [(&mut cycles as *mut u64).cast()])
    }

    /// The seeds' `processKernel`: `data[i] = sqrt(i)` for every `f32` in
    /// `buf`.
    ///
    /// It writes through a shared reference, unlike the other writing
    /// kernels: the benchmark's allocator trait hands its blocks out by `&`.
    /// Ordering is still the stream's (`buf` must be usable on `stream`);
    /// to be made `&mut` with the benchmark.
    pub fn process(&self, buf: &impl KernelTarget, stream: &Stream) -> Result<()> {
        Self::check(buf, stream)?;
        let (mut ptr, bytes) = buf.range();
        let len = bytes / std::mem::size_of::<f32>();
        if len == 0 {
            return Ok(());
        }
        let mut n = i32::try_from(len)
            .map_err(|_| Error::invalid("process kernel takes at most i32::MAX elements"))?;
        let grid = len.div_ceil(BLOCK as usize);
        let grid = u32::try_from(grid).map_err(|_| Error::invalid("grid too large"))?;
        Active::set_device(stream.device().ordinal())?;
        // SAFETY: (float*, int) matches somalloc_process; the buffer is
        // usable on `stream` (checked above) and one thread per element stays
        // in bounds.
        unsafe {
            Active::launch(
                self.process,
                grid,
                BLOCK,
                stream.raw(),
                &mut [(&mut ptr as *mut *mut c_void).cast(), (&mut n as *mut i32).cast()],
            )
        }
    }

    /// The number of 32-bit words of `buf` (its bytes must be a multiple of 4).
    fn words(buf: &impl KernelTarget) -> Result<u64> {
        let (_, bytes) = buf.range();
        if bytes % 4 != 0 {
            return Err(Error::invalid("the 32-bit kernels need a multiple of 4 bytes"));
        }
        Ok((bytes / 4) as u64)
    }

    /// Enqueues `buf[i] = i * mul + add` over the 32-bit words of `buf`
    /// (wrapping; see [`iota_word`]).
    pub fn iota_u32(&self, buf: &mut impl KernelTarget, mul: u32, add: u32, stream: &Stream) -> Result<()> {
        Self::check(buf, stream)?;
        let mut n = Self::words(buf)?;
        if n == 0 {
            return Ok(());
        }
        let (mut ptr, _) = buf.range();
        let (mut mul, mut add) = (mul, add);
        self.launch(
            self.iota,
            n,
            stream,
            &mut [
                (&mut ptr as *mut *mut c_void).cast(),
                (&mut n as *mut u64).cast(),
                (&mut mul as *mut u32).cast(),
                (&mut add as *mut u32).cast(),
            ],
        )
    }

    /// Enqueues `dst[i] += a * src[i]` over the 32-bit words (wrapping);
    /// both must be usable on `stream` and of the same size.
    pub fn axpy_u32(
        &self,
        dst: &mut impl KernelTarget,
        src: &impl KernelTarget,
        a: u32,
        stream: &Stream,
    ) -> Result<()> {
        Self::check(dst, stream)?;
        Self::check(src, stream)?;
        let mut n = Self::words(dst)?;
        if Self::words(src)? != n {
            return Err(InvalidReason::LengthMismatch.error("axpy_u32 over buffers of different sizes"));
        }
        if n == 0 {
            return Ok(());
        }
        let (mut d, _) = dst.range();
        let (mut s, _) = src.range();
        let mut a = a;
        self.launch(
            self.axpy,
            n,
            stream,
            &mut [
                (&mut d as *mut *mut c_void).cast(),
                (&mut s as *mut *mut c_void).cast(),
                (&mut n as *mut u64).cast(),
                (&mut a as *mut u32).cast(),
            ],
        )
    }

    /// Enqueues `buf[i] += value` over the 32-bit words (wrapping).
    pub fn add_u32(&self, buf: &mut impl KernelTarget, value: u32, stream: &Stream) -> Result<()> {
        Self::check(buf, stream)?;
        let mut n = Self::words(buf)?;
        if n == 0 {
            return Ok(());
        }
        let (mut ptr, _) = buf.range();
        let mut value = value;
        self.launch(
            self.add,
            n,
            stream,
            &mut [
                (&mut ptr as *mut *mut c_void).cast(),
                (&mut n as *mut u64).cast(),
                (&mut value as *mut u32).cast(),
            ],
        )
    }

    /// The device the kernels were loaded for.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// The word the iota kernel writes at `index` (host copy, for checks).
pub fn iota_word(index: u64, mul: u32, add: u32) -> u32 {
    (index as u32).wrapping_mul(mul).wrapping_add(add)
}

impl Drop for TestKernels {
    fn drop(&mut self) {
        record_drop_error(Active::module_unload(self.module));
    }
}

pub mod raw;

mod pinned;
pub use pinned::{PinnedHost, PinnedHostCall};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_differs_by_seed_and_index() {
        let a: Vec<u8> = (0..256).map(|i| pattern_byte(i, 1)).collect();
        let b: Vec<u8> = (0..256).map(|i| pattern_byte(i, 2)).collect();
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        // Unrelated bytes agree about 1 time in 256.
        assert!(same < 8, "{same} equal bytes between seeds 1 and 2");
        let distinct = a.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 100, "only {distinct} distinct bytes");
    }

    #[test]
    fn grid_is_bounded() {
        assert_eq!(grid_for(1), 1);
        assert_eq!(grid_for(256), 1);
        assert_eq!(grid_for(257), 2);
        assert_eq!(grid_for(u64::MAX), MAX_GRID as u32);
    }
}
