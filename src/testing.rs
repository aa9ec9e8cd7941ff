//! Test doubles for the host-side bookkeeping (cfg(test) only): a resource
//! that hands out made-up, never-overlapping addresses and checks every free
//! against what it handed out, and a small seeded PRNG.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::resource::MemoryResource;
use crate::stream::{Asked, Stream};

/// What a [`FakeResource`] saw.
#[derive(Debug, Default)]
pub(crate) struct FakeState {
    next: usize,
    /// addr -> (bytes, stream) of every block handed out and not freed.
    pub live: HashMap<usize, (usize, usize)>,
    pub used: usize,
    pub used_peak: usize,
    pub allocs: u64,
    pub frees: u64,
    /// Every contract violation seen (double free, wrong size or stream).
    pub errors: Vec<String>,
    /// Log of (is_alloc, addr, bytes, stream), when enabled.
    pub log: Option<Vec<(bool, usize, usize, usize)>>,
}

/// A host-only [`MemoryResource`]: addresses are made up (never
/// dereferenced), blocks never overlap, frees are checked.
pub(crate) struct FakeResource {
    device: Device,
    limit: Option<usize>,
    fail_frees: AtomicBool,
    state: Mutex<FakeState>,
}

impl FakeResource {
    pub fn new(limit: Option<usize>) -> Arc<FakeResource> {
        Self::with(0, limit)
    }

    /// An unlimited fake resource of [`Device::fake`]`(device)`.
    pub fn on(device: usize) -> Arc<FakeResource> {
        Self::with(device, None)
    }

    fn with(device: usize, limit: Option<usize>) -> Arc<FakeResource> {
        Arc::new(FakeResource {
            device: Device::fake(device),
            limit,
            fail_frees: AtomicBool::new(false),
            state: Mutex::new(FakeState {
                next: 0x1_0000_0000,
                ..FakeState::default()
            }),
        })
    }

    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks handed out and not freed.
    pub fn live(&self) -> usize {
        self.state().live.len()
    }

    /// (allocations, frees) so far.
    pub fn calls(&self) -> (u64, u64) {
        let s = self.state();
        (s.allocs, s.frees)
    }

    pub fn enable_log(&self) {
        self.state().log = Some(Vec::new());
    }

    /// Makes every later free fail (with a vendor-like error) without
    /// freeing.
    pub fn fail_frees(&self, on: bool) {
        self.fail_frees.store(on, Ordering::Relaxed);
    }

    /// Panics (in tests) if any contract violation was seen.
    pub fn assert_clean(&self) {
        let s = self.state();
        assert!(s.errors.is_empty(), "fake upstream saw: {:?}", s.errors);
    }
}

// SAFETY: test double: its addresses are made up and never dereferenced;
// it never hands out a block twice while live (blocks never overlap).
// Like somalloc's pool, it wants to know whether the stream is capturing on
// every call, and takes the caller's answer where there is one (so that the
// tests count the questions a path asks in all).
unsafe impl MemoryResource for FakeResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<*mut c_void> {
        self.allocate_asked(bytes, stream, Asked::NOT_YET)
    }

    unsafe fn deallocate(&self, ptr: *mut c_void, bytes: usize, stream: &Stream) -> Result<()> {
        // SAFETY: forwarded.
        unsafe { self.deallocate_asked(ptr, bytes, stream, Asked::NOT_YET) }
    }

    fn allocate_asked(&self, bytes: usize, stream: &Stream, asked: Asked) -> Result<*mut c_void> {
        asked.capturing(stream)?;
        let mut s = self.state();
        if bytes == 0 {
            s.errors.push("0-byte allocation".into());
            return Err(Error::invalid("0 bytes"));
        }
        if self.limit.is_some_and(|l| s.used + bytes > l) {
            return Err(Error::OutOfMemory {
                requested: bytes,
                stats: None,
            });
        }
        let addr = s.next;
        // A gap after every block, so that adjacent blocks never touch.
        s.next += bytes.div_ceil(256) * 256 + 256;
        let key = stream.as_raw() as usize;
        s.live.insert(addr, (bytes, key));
        s.used += bytes;
        s.used_peak = s.used_peak.max(s.used);
        s.allocs += 1;
        if let Some(log) = &mut s.log {
            log.push((true, addr, bytes, key));
        }
        Ok(addr as *mut c_void)
    }

    unsafe fn deallocate_asked(
        &self,
        ptr: *mut c_void,
        bytes: usize,
        stream: &Stream,
        asked: Asked,
    ) -> Result<()> {
        asked.capturing(stream)?;
        if self.fail_frees.load(Ordering::Relaxed) {
            return Err(Error::Vendor {
                call: "fakeFreeAsync",
                code: crate::VendorCode(1),
                name: "fakeError".into(),
                message: "free refused".into(),
            });
        }
        let mut s = self.state();
        let addr = ptr as usize;
        let key = stream.as_raw() as usize;
        match s.live.remove(&addr) {
            None => s.errors.push(format!("free of {addr:#x}, not live")),
            Some((b, k)) => {
                if b != bytes {
                    s.errors
                        .push(format!("free of {addr:#x} with {bytes} bytes, allocated {b}"));
                }
                if k != key {
                    s.errors.push(format!(
                        "free of {addr:#x} on stream {key:#x}, allocated on {k:#x}"
                    ));
                }
                s.used -= b;
            }
        }
        s.frees += 1;
        if let Some(log) = &mut s.log {
            log.push((false, addr, bytes, key));
        }
        Ok(())
    }

    fn device(&self) -> Device {
        self.device
    }
}

/// xorshift64*: small, seeded, good enough for model tests.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 2^U(lo, hi), as the benchmark's churn draws sizes.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> usize {
        (lo + (hi - lo) * self.unit()).exp2() as usize
    }
}
