//! Where growth maps and where a block goes in a free range (`growth.rs`),
//! on the fake device: the chunks a large block touches.

use super::core::Arena;
use super::fake::FakePhys;
use super::tests::{alloc, arena as arena_of, clean, free, stream};
use super::ArenaOptions;
use crate::stream::Stream;

const MIB: usize = 1 << 20;

fn arena() -> (Arena<FakePhys>, FakePhys, Stream) {
    let (a, f) = arena_of(1 << 30, ArenaOptions::default());
    (a, f, stream(40))
}

#[test]
fn a_large_block_gets_chunks_of_its_own_where_extending_would_map_as_much() {
    let (a, f, s) = arena();
    // 19.5 MiB in a chunk of 20: half a MiB free at the end of the mapped
    // memory. Extending it for 32 MiB maps 32 MiB, as much as a window of
    // the block's own.
    let x = alloc(&a, &f, 19 * MIB + MIB / 2, &s);
    let y = alloc(&a, &f, 32 * MIB, &s);
    assert_eq!(y, x + 20 * MIB, "the block starts at its own chunks");
    assert_eq!(a.lock().book.holding(&[(y, 32 * MIB)]), 32 * MIB);
    assert_eq!(a.stats().mapped_bytes, 52 * MIB);
    // The first block freed, its chunk goes back: the second holds only
    // its own.
    free(&a, &f, x, 19 * MIB + MIB / 2, &s);
    a.trim(0);
    assert_eq!(a.stats().mapped_bytes, 32 * MIB);
    free(&a, &f, y, 32 * MIB, &s);
    clean(&a, &f);

    // Where extending saves a granule or more, the block extends: 4 MiB
    // free at the end, 28 MiB mapped for 32.
    let (a, f, s) = arena();
    let x = alloc(&a, &f, 16 * MIB, &s);
    let t = alloc(&a, &f, 4 * MIB, &s);
    free(&a, &f, t, 4 * MIB, &s);
    let before = a.stats().mapped_bytes;
    let y = alloc(&a, &f, 32 * MIB, &s);
    assert_eq!(y, x + 16 * MIB, "the block extends the free range");
    assert_eq!(a.stats().mapped_bytes - before, 28 * MIB);
    free(&a, &f, x, 16 * MIB, &s);
    free(&a, &f, y, 32 * MIB, &s);
    clean(&a, &f);
}

#[test]
fn a_block_of_a_few_chunks_goes_where_it_touches_the_fewest() {
    let (a, f, s) = arena();
    // Three chunks of 20 MiB, freed, and a block in the chunk after them
    // (so that the free range does not end where the arena can grow).
    let base = alloc(&a, &f, 60 * MIB, &s);
    let cap = alloc(&a, &f, 4 * MIB, &s);
    assert_eq!(cap, base + 60 * MIB);
    free(&a, &f, base, 60 * MIB, &s);
    // [10, 60) free: 32 MiB from the start would touch all three chunks,
    // at the end two.
    let x = alloc(&a, &f, 10 * MIB, &s);
    assert_eq!(x, base);
    let y = alloc(&a, &f, 32 * MIB, &s);
    assert_eq!(y, base + 28 * MIB, "at the range's end");
    assert_eq!(a.lock().book.holding(&[(y, 32 * MIB)]), 40 * MIB);
    // What is left before it stays one free range for the next block.
    let z = alloc(&a, &f, 18 * MIB, &s);
    assert_eq!(z, base + 10 * MIB);
    for (p, n) in [(x, 10 * MIB), (y, 32 * MIB), (z, 18 * MIB)] {
        free(&a, &f, p, n, &s);
    }

    // [19.5, 60) free: a chunk boundary half a MiB in; it and the end touch
    // two chunks each, and the boundary comes first.
    let x = alloc(&a, &f, 19 * MIB + MIB / 2, &s);
    assert_eq!(x, base);
    let y = alloc(&a, &f, 32 * MIB, &s);
    assert_eq!(y, base + 20 * MIB, "at the chunk boundary");
    // Blocks outside the sizes of the rule start where best fit puts them.
    let z = alloc(&a, &f, 8 * MIB, &s);
    assert_eq!(z, base + 52 * MIB);
    for (p, n) in [(x, 19 * MIB + MIB / 2), (y, 32 * MIB), (z, 8 * MIB)] {
        free(&a, &f, p, n, &s);
    }

    // [10, 64) free and ending where the arena grows: the end would touch
    // fewer chunks, but a block there would keep the range from growing.
    free(&a, &f, cap, 4 * MIB, &s);
    let x = alloc(&a, &f, 10 * MIB, &s);
    let y = alloc(&a, &f, 32 * MIB, &s);
    assert_eq!(
        (x, y),
        (base, base + 10 * MIB),
        "at the start of a range that can grow"
    );
    free(&a, &f, x, 10 * MIB, &s);
    free(&a, &f, y, 32 * MIB, &s);
    clean(&a, &f);

    // Past the rule's sizes: 65 MiB from [10, 130) starts at 10 (80 MiB of
    // chunks) though at the end it would touch 70.
    let (a, f, s) = arena();
    let base = alloc(&a, &f, 130 * MIB, &s);
    let cap = alloc(&a, &f, 4 * MIB, &s);
    free(&a, &f, base, 130 * MIB, &s);
    let w = alloc(&a, &f, 10 * MIB, &s);
    let v = alloc(&a, &f, 65 * MIB, &s);
    assert_eq!((w, v), (base, base + 10 * MIB));
    for (p, n) in [(w, 10 * MIB), (v, 65 * MIB), (cap, 4 * MIB)] {
        free(&a, &f, p, n, &s);
    }
    clean(&a, &f);
}
