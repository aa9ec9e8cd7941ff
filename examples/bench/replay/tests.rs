//! The plan's and the replay's unit tests.

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;

use super::*;

/// Thread 1 allocates a (stream 0x10) that thread 2 frees; thread 1
/// allocates and frees b twice (its slot reused); thread 2 allocates c
/// and never frees it; a free of an unknown address and a failed
/// allocation are left out; d's free was dropped and its address
/// allocated again.
const CSV: &str = "Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,100,0x10
1,00:00:00.000002,allocate,0x2000,50,0x10
1,00:00:00.000003,free,0x2000,50,0x10
1,00:00:00.000004,allocate,0x2000,60,0x10
2,00:00:00.000005,free,0x1000,100,0x20
1,00:00:00.000006,free,0x2000,60,0x10
2,00:00:00.000007,allocate,0x3000,300,0x20
2,00:00:00.000008,free,0x9999,1,0x20
2,00:00:00.000009,allocate failure,0x0,99999,0x20
1,00:00:00.000010,allocate,0x4000,40,0x10
1,00:00:00.000011,allocate,0x4000,40,0x10
1,00:00:00.000012,free,0x4000,40,0x10
";

fn plan() -> Plan {
    Plan::of("t.csv", &Trace::parse(CSV.as_bytes()).unwrap())
}

#[test]
fn a_plan_keeps_threads_streams_order_and_slots() {
    let p = plan();
    use Op::*;
    use Slot::*;
    assert_eq!(
        p.threads[0],
        [
            Alloc {
                bytes: 100,
                stream: 0,
                slot: Shared(0)
            },
            Alloc {
                bytes: 50,
                stream: 0,
                slot: Local(0)
            },
            Free { slot: Local(0) },
            Alloc {
                bytes: 60,
                stream: 0,
                slot: Local(0)
            },
            Free { slot: Local(0) },
            Alloc {
                bytes: 40,
                stream: 0,
                slot: Local(0)
            },
            Free { slot: Local(0) },
            Alloc {
                bytes: 40,
                stream: 0,
                slot: Local(0)
            },
            Free { slot: Local(0) },
        ]
    );
    assert_eq!(
        p.threads[1],
        [
            Free { slot: Shared(0) },
            Alloc {
                bytes: 300,
                stream: 1,
                slot: Local(0)
            },
            Free { slot: Local(0) },
        ]
    );
    assert_eq!((p.shared, p.locals.clone(), p.streams), (1, vec![1, 1], 2));
    assert_eq!((p.ops, p.left_out, p.live_peak, p.devices), (12, 2, 340, 1));
    assert!(p.param().starts_with("t.csv (12 ops, 2 thr, 2 str)"));
}

/// A host allocator that checks every free: made-up addresses, a set of
/// the live ones.
struct Checked {
    next: AtomicUsize,
    live: Mutex<HashSet<usize>>,
    errors: Mutex<Vec<String>>,
    fail_above: usize,
}

impl Replayer for Checked {
    type Block = (usize, usize);
    fn alloc(&self, _: u32, bytes: usize) -> somalloc::Result<(usize, usize)> {
        if bytes > self.fail_above {
            return Err(Error::OutOfMemory {
                requested: bytes,
                stats: None,
                arena: None,
            });
        }
        let a = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.live).insert(a);
        Ok((a, bytes))
    }
    fn free(&self, b: (usize, usize)) -> somalloc::Result<()> {
        if !lock(&self.live).remove(&b.0) {
            lock(&self.errors).push(format!("free of {} not live", b.0));
        }
        Ok(())
    }
    fn streams(&self) -> Vec<&Stream> {
        Vec::new()
    }
}

#[test]
fn a_replay_frees_every_block_once_across_threads() {
    // Many cross-thread frees: thread t allocates, thread t+1 frees.
    let mut csv = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    let mut t = 0u64;
    for i in 0..2000u64 {
        let (a, f) = (i % 4, (i + 1) % 4);
        t += 1;
        csv += &format!(
            "{a},00:00:{:02}.{:06},allocate,{:#x},{},0x{a}\n",
            t / 1_000_000,
            t % 1_000_000,
            0x1000 + i * 0x100,
            256 + i
        );
        t += 1;
        csv += &format!(
            "{f},00:00:{:02}.{:06},free,{:#x},{},0x{a}\n",
            t / 1_000_000,
            t % 1_000_000,
            0x1000 + i * 0x100,
            256 + i
        );
    }
    let p = Plan::of("x", &Trace::parse(csv.as_bytes()).unwrap());
    assert_eq!((p.threads.len(), p.shared), (4, 2000));
    let r = Checked {
        next: AtomicUsize::new(1),
        live: Mutex::new(HashSet::new()),
        errors: Mutex::new(Vec::new()),
        fail_above: usize::MAX,
    };
    let done = replay(&p, &r, &|| Ok(())).unwrap();
    assert_eq!(done.failed, 0);
    assert!(lock(&r.live).is_empty(), "every block freed");
    assert!(lock(&r.errors).is_empty(), "{:?}", lock(&r.errors));
    assert_eq!(r.next.load(Ordering::Relaxed), 2001);
    // Out of memory: counted, its free skipped, also across threads.
    let r = Checked {
        next: AtomicUsize::new(1),
        live: Mutex::new(HashSet::new()),
        errors: Mutex::new(Vec::new()),
        fail_above: 1000,
    };
    let done = replay(&p, &r, &|| Ok(())).unwrap();
    assert_eq!(done.failed, 1255); // sizes 256 + i above 1000: i from 745
    assert!(lock(&r.live).is_empty() && lock(&r.errors).is_empty());
    // A thread that cannot start stops the others (none waits forever).
    let err = replay(&plan(), &r, &|| {
        Err(Error::OutOfMemory {
            requested: 7,
            stats: None,
            arena: None,
        })
    });
    assert!(matches!(err, Err(Error::OutOfMemory { requested: 7, .. })));
}
