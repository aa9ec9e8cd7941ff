//! Finding the repeated step of a recorded program.

use super::MAX_BLOCKS;

/// The shortest step [`find_step`] looks for, in allocations.
pub const MIN_STEP: usize = 4;
/// [`find_step`] looks at sequences of at most this many allocations (its
/// time grows with the square of their number).
pub const MAX_SEARCHED: usize = MAX_BLOCKS;

/// A step found by [`find_step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The step's length in allocations.
    pub len: usize,
    /// How many allocations in a row follow it (at least two steps).
    pub covered: usize,
    /// Where they end (exclusive): the last step is `[end - len, end)`.
    pub end: usize,
}

/// The step of a sequence of allocation sizes: the period that the
/// longest run of the sequence follows, at least two periods long (the
/// shortest such period; the latest such run). What comes after the run
/// (a program's evaluation or saving after its loop) is left out of it.
/// `None` when no period of at least [`MIN_STEP`] repeats, or the
/// sequence is longer than [`MAX_SEARCHED`].
///
/// ```
/// use somalloc::trace::plan::{find_step, Step};
/// let mut sizes = vec![1, 2, 3]; // a prologue
/// for _ in 0..3 {
///     sizes.extend([7, 8, 9, 4, 4]); // three steps of five
/// }
/// sizes.extend([5, 6]); // a tail
/// assert_eq!(find_step(&sizes), Some(Step { len: 5, covered: 15, end: 18 }));
/// assert_eq!(find_step(&[1, 2, 3, 4, 5]), None);
/// ```
pub fn find_step(sizes: &[u64]) -> Option<Step> {
    let n = sizes.len();
    if n > MAX_SEARCHED {
        return None;
    }
    let mut best: Option<Step> = None;
    for len in MIN_STEP..=n / 2 {
        // `run` allocations in a row equal the one `len` before, up to
        // `end`: the run covers `run + len` allocations.
        let mut consider = |run: usize, end: usize| {
            let covered = run + len;
            if run >= len
                && best.is_none_or(|b| covered > b.covered || (covered == b.covered && len == b.len))
            {
                best = Some(Step { len, covered, end });
            }
        };
        let mut run = 0;
        for i in len..n {
            if sizes[i] == sizes[i - len] {
                run += 1;
            } else {
                consider(run, i);
                run = 0;
            }
        }
        consider(run, n);
    }
    best
}
