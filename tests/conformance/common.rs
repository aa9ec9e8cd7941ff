//! Shared set-up for the conformance tests.

use std::io::Write;
use std::sync::{Arc, Barrier, Condvar, Mutex, MutexGuard};

use somalloc::testkit::TestKernels;
use somalloc::{Device, DeviceBuffer, Error, MemPool, PoolProperties, Stream, Vendor};

/// Everything a GPU test needs: a device, the test kernels, a pool of its own
/// (release threshold usize::MAX) and a stream.
pub struct Ctx {
    pub dev: Device,
    pub k: TestKernels,
    pub pool: MemPool,
    pub stream: Stream,
    used_at_start: usize,
    _gate: Gate,
}

/// Who holds the device: the tests that share it (a count), or one test
/// alone. A test that measures the device's timing between its own
/// streams runs alone ([`setup_alone`]): other tests' streams share the
/// device's hardware queues with its streams and can order one behind
/// another's kernels.
static GATE: (Mutex<(usize, bool)>, Condvar) = (Mutex::new((0, false)), Condvar::new());

/// A test's hold on the device, given up when its `Ctx` drops.
struct Gate {
    alone: bool,
}

impl Gate {
    fn enter(alone: bool) -> Gate {
        let (lock, cv) = &GATE;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        // Shared: while nobody is alone. Alone: also while nobody shares.
        while st.1 || (alone && st.0 > 0) {
            st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        match alone {
            true => st.1 = true,
            false => st.0 += 1,
        }
        Gate { alone }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let (lock, cv) = &GATE;
        let mut st = lock.lock().unwrap_or_else(|p| p.into_inner());
        match self.alone {
            true => st.1 = false,
            false => st.0 -= 1,
        }
        cv.notify_all();
    }
}

/// Prints one line that bypasses the test harness's output capture, so skips
/// show in every log.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// The device, or `None` after printing one skip line when there is none.
pub fn device(test: &str) -> Option<Device> {
    match Device::get(0) {
        Ok(dev) => Some(dev),
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            say(&format!("SKIP {test}: no GPU ({e})"));
            None
        }
        Err(e) => panic!("{test}: unexpected error opening device 0: {e}"),
    }
}

pub fn setup(test: &str) -> Option<Ctx> {
    setup_with(test, PoolProperties::default())
}

/// [`setup`] for a test that must have the device to itself: it waits for
/// the tests that use it to finish, and the others wait for it.
pub fn setup_alone(test: &str) -> Option<Ctx> {
    setup_gated(test, PoolProperties::default(), true)
}

pub fn setup_with(test: &str, props: PoolProperties) -> Option<Ctx> {
    setup_gated(test, props, false)
}

fn setup_gated(test: &str, props: PoolProperties, alone: bool) -> Option<Ctx> {
    let dev = device(test)?;
    let gate = Gate::enter(alone);
    let k = TestKernels::load(&dev).expect("load test kernels");
    let pool = match MemPool::create(&dev, props) {
        Ok(p) => p,
        // A named vendor difference: HIP before ROCm 6.2 has no maximum
        // pool size, and says so with Unsupported instead of ignoring it.
        Err(e @ Error::Unsupported { .. })
            if Device::backend() == Vendor::Rocm && props.max_size.is_some() =>
        {
            say(&format!("SKIP {test}: not supported by this runtime ({e})"));
            return None;
        }
        Err(e) => panic!("{test}: create pool: {e}"),
    };
    pool.set_release_threshold(usize::MAX).expect("set threshold");
    let stream = Stream::new(&dev).expect("create stream");
    let used_at_start = pool.stats().expect("stats").used_current;
    Some(Ctx {
        dev,
        k,
        pool,
        stream,
        used_at_start,
        _gate: gate,
    })
}

impl Ctx {
    pub fn new_stream(&self) -> Stream {
        Stream::new(&self.dev).expect("create stream")
    }

    /// Waits for `streams` (and the context's stream) and asserts the pool's
    /// used bytes are back where they began.
    pub fn finish(&self, streams: &[&Stream]) {
        self.stream.synchronize().expect("sync");
        for s in streams {
            s.synchronize().expect("sync");
        }
        let used = self.pool.stats().expect("stats").used_current;
        assert_eq!(
            used, self.used_at_start,
            "pool used bytes did not return to their start"
        );
        assert_eq!(
            somalloc::drop_errors().last.map(|e| e.to_string()),
            None,
            "an error was recorded in Drop"
        );
    }
}

/// About `ms` milliseconds of spinning on a GPU clocked near 2 GHz (the exact
/// time does not matter: it only has to be long compared to host calls).
pub fn spin_cycles(ms: u64) -> u64 {
    ms * 2_000_000
}

/// Tests that allocate from, or change, the device's current pool hold this
/// lock, so no other test's allocation lands in a pool that is briefly current.
pub fn current_pool_lock() -> MutexGuard<'static, ()> {
    static CURRENT_POOL: Mutex<()> = Mutex::new(());
    CURRENT_POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// One test thread's allocator: bytes → a buffer on that thread's stream.
pub type ThreadAlloc = Box<dyn Fn(usize) -> DeviceBuffer<u8>>;

/// Threads in [`eight_threads_never_overlap`], rounds, and buffers per round.
pub const THREADS: usize = 8;
pub const ROUNDS: usize = 4;
pub const PER_THREAD: usize = 6;

/// 8 threads, each with its own stream and the allocator `make` gives for
/// it, allocate, fill, verify and free in rounds of the same sizes; at a
/// barrier all live buffers are checked for overlap on the host (address
/// ranges) and on the device (every buffer still holds its own pattern after
/// all the others were filled). Returns the threads' streams, synchronized.
pub fn eight_threads_never_overlap(
    ctx: &Arc<Ctx>,
    make: impl Fn(&Stream) -> ThreadAlloc + Send + Sync + 'static,
) -> Vec<Stream> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let live: Arc<Mutex<Vec<(usize, usize, usize)>>> = Arc::new(Mutex::new(Vec::new()));
    let make = Arc::new(make);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (barrier, live, ctx, make) = (barrier.clone(), live.clone(), ctx.clone(), make.clone());
            std::thread::spawn(move || -> Stream {
                let stream = Stream::new(&ctx.dev).unwrap();
                let alloc = make(&stream);
                for round in 0..ROUNDS {
                    let mut rng = 0x9E37_79B9u32 ^ (t as u32 * 7919); // same sizes each round
                    let mut bufs = Vec::new();
                    for j in 0..PER_THREAD {
                        rng ^= rng << 13;
                        rng ^= rng >> 17;
                        rng ^= rng << 5;
                        let bytes = 256 + (rng as usize % (2 << 20));
                        let seed = ((t * ROUNDS + round) * PER_THREAD + j) as u32;
                        let mut b = alloc(bytes);
                        ctx.k.fill(&mut b, seed, &stream).unwrap();
                        live.lock().unwrap().push((b.as_raw() as usize, bytes, t));
                        bufs.push((b, seed));
                    }
                    stream.synchronize().unwrap();
                    barrier.wait(); // every thread's buffers are live and filled
                    if t == 0 {
                        let mut all = live.lock().unwrap().clone();
                        all.sort();
                        for w in all.windows(2) {
                            assert!(
                                w[0].0 + w[0].1 <= w[1].0,
                                "live buffers overlap: {:?} and {:?}",
                                w[0],
                                w[1]
                            );
                        }
                        assert_eq!(all.len(), THREADS * PER_THREAD);
                    }
                    for (b, seed) in &bufs {
                        assert_eq!(
                            ctx.k.verify(b, *seed, &stream).unwrap(),
                            0,
                            "thread {t} round {round}"
                        );
                    }
                    barrier.wait(); // checks done before anyone frees
                    if t == 0 {
                        live.lock().unwrap().clear();
                    }
                    drop(bufs);
                    barrier.wait();
                }
                stream.synchronize().unwrap();
                stream
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
