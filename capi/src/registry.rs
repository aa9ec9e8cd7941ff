//! The live allocations: address -> (size, device, stream, path), so that a
//! free can be checked before anything reaches the allocator (an unknown
//! address, a second free, another size or another device is an error, not
//! a crash).
//!
//! Concurrency: the map is split into shards, each a `std::sync::Mutex`
//! around a `HashMap`, chosen by the address. Every operation on one
//! address takes exactly one shard's lock, once, and holds no other lock
//! meanwhile, so there is no lock order to get wrong and no deadlock; an
//! address is in at most one shard (the shard is a function of the
//! address), so "insert if absent" and "remove if it matches" are atomic
//! per address. A free racing with another free of the same address: one
//! of them takes the entry under the lock, the other finds none (reported
//! as an unknown address). The test `racing_frees_take_each_entry_once`
//! runs that race.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

/// A hasher for keys that are addresses or handles (`usize`): one
/// multiplication, no seed. The keys are chosen by the runtime, not by
/// whoever could want collisions, and this is on every allocation and free.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, key: usize) {
        // The product's high bits mix every bit of the key; the rotation
        // brings them down to the bits that pick the bucket.
        self.0 = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(26);
    }
}

/// A map keyed by addresses or handles.
pub type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

const SHARDS: usize = 64;

/// How an allocation was served, which decides how it is freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Through the cache tier of its device, on its stream's cache.
    Cache,
    /// Straight from the pool (cache tier off, or the per-thread default
    /// stream, which no cache serves).
    Pool,
    /// From the arena of its stream's plan (`plan:`), in this slot.
    Plan(u32),
}

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    pub size: usize,
    pub device: usize,
    /// The stream handle it was allocated on (0 for the legacy default
    /// stream, whichever of its two handles was passed).
    pub stream: usize,
    pub path: Path,
}

/// Why a free was refused. The entry stays (nothing was freed) except for
/// `Unknown`, where there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Unknown,
    WrongSize(Live),
    WrongDevice(Live),
}

pub struct Registry {
    shards: Box<[Mutex<AddrMap<Live>>]>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            shards: (0..SHARDS).map(|_| Mutex::new(AddrMap::default())).collect(),
        }
    }
}

impl Registry {
    fn shard(&self, addr: usize) -> MutexGuard<'_, AddrMap<Live>> {
        // Allocations are at least 256-byte aligned: skip the low bits.
        let i = (addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        lock(&self.shards[i % SHARDS])
    }

    /// Records a new allocation; `false` (and nothing changed) if the
    /// address is live already.
    pub fn insert(&self, addr: usize, live: Live) -> bool {
        let mut shard = self.shard(addr);
        if shard.contains_key(&addr) {
            return false;
        }
        shard.insert(addr, live);
        true
    }

    /// Takes the entry of `addr` if it was allocated with `size` bytes on
    /// `device`; otherwise leaves it and says why.
    pub fn take(&self, addr: usize, size: usize, device: usize) -> Result<Live, Refused> {
        let mut shard = self.shard(addr);
        let Some(live) = shard.get(&addr).copied() else {
            return Err(Refused::Unknown);
        };
        if live.size != size {
            return Err(Refused::WrongSize(live));
        }
        if live.device != device {
            return Err(Refused::WrongDevice(live));
        }
        shard.remove(&addr);
        Ok(live)
    }

    /// Puts back an entry taken by [`Registry::take`] (a free that failed
    /// before anything was freed).
    pub fn restore(&self, addr: usize, live: Live) {
        self.shard(addr).insert(addr, live);
    }

    /// Live allocations of `device`: (count, bytes).
    pub fn live_on(&self, device: usize) -> (u64, u64) {
        let mut count = 0u64;
        let mut bytes = 0u64;
        for shard in self.shards.iter() {
            for live in lock(shard).values().filter(|l| l.device == device) {
                count += 1;
                bytes += live.size as u64;
            }
        }
        (count, bytes)
    }

    /// Whether any allocation is live.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| lock(s).is_empty())
    }
}

/// A poisoned shard still holds consistent entries (every update is one
/// map operation): keep going.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn live(size: usize, device: usize) -> Live {
        Live {
            size,
            device,
            stream: 0,
            path: Path::Pool,
        }
    }

    #[test]
    fn bad_frees_are_refused_and_change_nothing() {
        let r = Registry::default();
        assert!(r.insert(0x1000, live(100, 0)));
        assert!(
            !r.insert(0x1000, live(5, 1)),
            "a live address is not handed out twice"
        );
        assert_eq!(r.take(0x2000, 100, 0), Err(Refused::Unknown));
        assert_eq!(r.take(0x1000, 99, 0), Err(Refused::WrongSize(live(100, 0))));
        assert_eq!(r.take(0x1000, 100, 1), Err(Refused::WrongDevice(live(100, 0))));
        assert_eq!(r.live_on(0), (1, 100));
        assert_eq!(r.take(0x1000, 100, 0), Ok(live(100, 0)));
        assert_eq!(r.take(0x1000, 100, 0), Err(Refused::Unknown), "a second free");
        assert!(r.is_empty());
        r.restore(0x1000, live(100, 0));
        assert_eq!(r.live_on(0), (1, 100));
    }

    /// Eight threads free the same 4096 addresses at once: each entry is
    /// taken exactly once, the other attempts see it gone.
    #[test]
    fn racing_frees_take_each_entry_once() {
        let r = Registry::default();
        const N: usize = 4096;
        for i in 0..N {
            assert!(r.insert(0x10_0000 + i * 256, live(256, 0)));
        }
        let taken = AtomicUsize::new(0);
        let unknown = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (r, taken, unknown) = (&r, &taken, &unknown);
                s.spawn(move || {
                    for k in 0..N {
                        let i = (k * 7 + t * 509) % N;
                        match r.take(0x10_0000 + i * 256, 256, 0) {
                            Ok(_) => taken.fetch_add(1, Ordering::Relaxed),
                            Err(Refused::Unknown) => unknown.fetch_add(1, Ordering::Relaxed),
                            Err(other) => panic!("{other:?}"),
                        };
                    }
                });
            }
        });
        assert_eq!(taken.load(Ordering::Relaxed), N);
        assert_eq!(unknown.load(Ordering::Relaxed), 7 * N);
        assert!(r.is_empty());
    }
}
