//! A synthetic trace: made-up but plausible (threads with streams of their
//! own, log-uniform sizes, a bump-and-reuse address space per device, now
//! and then a flush), for testing the tool and the page on a trace of any
//! size without a GPU.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::format::{Action, Event, TraceWriter};

/// xorshift64*: small, seeded, repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A pool-like address space: freed blocks wait in lists by size class
/// (8 per power of two) and are handed out again for their class; the
/// space grows only when a class has none.
struct Space {
    free: HashMap<u64, Vec<u64>>,
    top: u64,
}

impl Space {
    fn class(bytes: u64) -> u64 {
        let b = bytes.max(512);
        let step = (1u64 << (63 - b.leading_zeros())) / 8;
        b.div_ceil(step) * step
    }
    fn alloc(&mut self, bytes: u64) -> u64 {
        let size = Space::class(bytes);
        match self.free.get_mut(&size).and_then(Vec::pop) {
            Some(addr) => addr,
            None => {
                let addr = self.top;
                self.top += size;
                addr
            }
        }
    }
    fn free(&mut self, addr: u64, bytes: u64) {
        self.free.entry(Space::class(bytes)).or_default().push(addr);
    }
}

/// Writes `events` events of `threads` threads (two streams each) into
/// `out`; returns how many were written.
pub fn synthesize<W: Write>(out: W, events: u64, threads: u32, seed: u64) -> io::Result<u64> {
    let threads = threads.max(1);
    let mut w = TraceWriter::new(out)?;
    w.meta("program", "somalloc-trace synth")?;
    w.meta("seed", &seed.to_string())?;
    let mut rng = Rng(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for t in 0..threads {
        w.thread(t, &format!("worker-{t}"))?;
        for s in 0..2 {
            w.stream(2 * t + s, 0, 0x5000_0000 + u64::from(2 * t + s) * 0x1000)?;
        }
    }
    w.backtrace(0, "   0: model::layer::forward\n             at src/layer.rs:42:9\n   1: model::step\n             at src/main.rs:88:5")?;
    w.backtrace(1, "   0: model::optimizer::update\n             at src/optim.rs:17:13\n   1: model::step\n             at src/main.rs:91:5")?;
    let mut space = Space {
        free: HashMap::new(),
        top: 0x7f00_0000_0000,
    };
    // Live blocks per thread: (addr, bytes, stream).
    let mut live: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); threads as usize];
    let mut t_ns = 0u64;
    let mut written = 0u64;
    while written < events {
        t_ns += 50 + rng.below(2_000);
        let th = rng.below(u64::from(threads)) as u32;
        let mine = &mut live[th as usize];
        // A slow wave: the live set grows and shrinks over the trace.
        let phase = (written as f64 / events.max(1) as f64 * std::f64::consts::TAU * 3.0).sin();
        let cap = (200.0 + 150.0 * phase) as usize;
        let free = !mine.is_empty() && (mine.len() >= cap || rng.below(2) == 0);
        if written % 50_000 == 49_999 {
            w.event(&Event::new(t_ns, Action::Flush, th, 0))?;
        } else if free {
            let i = rng.below(mine.len() as u64) as usize;
            let (addr, bytes, stream) = mine.swap_remove(i);
            space.free(addr, bytes);
            w.event(&Event::new(t_ns, Action::Free, th, 0).on(stream).at(bytes, addr))?;
        } else {
            let bytes = (8.0 + 18.0 * rng.unit()).exp2() as u64;
            let stream = 2 * th + rng.below(2) as u32;
            let addr = space.alloc(bytes);
            mine.push((addr, bytes, stream));
            let mut e = Event::new(t_ns, Action::Allocate, th, 0)
                .on(stream)
                .at(bytes, addr);
            if rng.below(4) == 0 {
                e = e.with_backtrace(rng.below(2) as u32);
            }
            w.event(&e)?;
        }
        written += 1;
    }
    w.finish(0)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use crate::format::Trace;

    #[test]
    fn a_synthetic_trace_adds_up() {
        let mut bytes = Vec::new();
        assert_eq!(synthesize(&mut bytes, 20_000, 3, 7).unwrap(), 20_000);
        let t = Trace::parse(&bytes).unwrap();
        assert!(t.complete);
        assert_eq!(t.events.len(), 20_000);
        assert_eq!(t.threads.len(), 3);
        let a = Analysis::of(&t);
        // Addresses never overlap while live, and every free matches.
        assert_eq!((a.unknown_frees, a.size_mismatches, a.reused_live), (0, 0, 0));
        assert!(a.total.peak.bytes > 0);
        // Repeatable.
        let mut again = Vec::new();
        synthesize(&mut again, 20_000, 3, 7).unwrap();
        assert_eq!(bytes, again);
    }
}
