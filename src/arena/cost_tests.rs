//! The arena's own cost on the host, on the fake device: the pair of one
//! size and the churn of the benchmark (`examples/bench`), timed. A
//! measurement to read (the GPU benchmark gives the figures that count).

use std::time::Instant;

use super::core::Arena;
use super::fake::FakePhys;
use super::ArenaOptions;
use crate::stream::Stream;

fn arena() -> (Arena<FakePhys>, Stream) {
    let f = FakePhys::new(usize::MAX / 4);
    let a = Arena::new(f, 2 << 20, ArenaOptions::default(), 1 << 40).unwrap();
    (a, Stream::fake(0x5a_0000, 0))
}

fn pair(bytes: usize) -> f64 {
    let (a, s) = arena();
    let n = 400_000;
    for _ in 0..1000 {
        let x = a.allocate(bytes, &s).unwrap();
        a.deallocate(x, bytes, &s).unwrap();
    }
    let t = Instant::now();
    for _ in 0..n {
        let x = a.allocate(bytes, &s).unwrap();
        a.deallocate(x, bytes, &s).unwrap();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn churn() -> f64 {
    let mut rng = fastrand::Rng::with_seed(7);
    let (a, s) = arena();
    let mut live: Vec<(usize, usize)> = Vec::new();
    let mut ops = Vec::new();
    let mut n_live = 0usize;
    for _ in 0..400_000 {
        let alloc = match n_live {
            0 => true,
            n if n >= 1000 => false,
            _ => rng.bool(),
        };
        if alloc {
            ops.push((true, (8.0 + 14.0 * rng.f64()).exp2() as usize));
            n_live += 1;
        } else {
            ops.push((false, rng.usize(..n_live)));
            n_live -= 1;
        }
    }
    let t = Instant::now();
    for &(alloc, x) in &ops {
        if alloc {
            live.push((a.allocate(x, &s).unwrap(), x));
        } else {
            let (p, b) = live.swap_remove(x);
            a.deallocate(p, b, &s).unwrap();
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / ops.len() as f64;
    println!("  {:?}", a.stats());
    ns
}

#[test]
#[ignore = "a measurement to read, not a check: prints the host cost of pair and churn"]
fn host_cost() {
    for bytes in [256, 1 << 20, 64 << 20] {
        println!("pair {bytes}: {:.1} ns", pair(bytes));
    }
    println!("churn: {:.1} ns an operation", churn());
}
