//! Finding the repeated step of a recorded program, and cutting a long
//! recording to the part a plan places: its prologue and two instances of
//! its step.

use super::{Op, StreamOp, MAX_BLOCKS};

/// The shortest step [`find_step`] looks for, in allocations.
pub const MIN_STEP: usize = 4;
/// [`find_step`] looks at sequences of at most this many allocations (its
/// time grows with the square of their number). A longer recording is
/// searched for its step in its first this many allocations, and planned
/// from its prologue and two instances of that step ([`cut`]).
pub const MAX_SEARCHED: usize = MAX_BLOCKS;
// The part of a long recording planned lies in the part searched: it
// must fit in a plan.
const _: () = assert!(MAX_SEARCHED <= MAX_BLOCKS);

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

impl Step {
    /// Where the run of the step starts: its first instance is
    /// `[start, start + len)`.
    pub fn start(&self) -> usize {
        self.end.saturating_sub(self.covered)
    }
}

/// The step of a sequence of allocation sizes: the period that the
/// longest run of the sequence follows, at least two periods long (the
/// shortest such period; the latest such run). What comes after the run
/// (a program's evaluation or saving after its loop) is left out of it.
/// `None` when no period of at least [`MIN_STEP`] repeats, or the
/// sequence is longer than [`MAX_SEARCHED`].
///
/// ```
/// use somalloc::plan::{find_step, Step};
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
                // A run shorter than a period is no step: not considered.
                if run >= len {
                    consider(run, i);
                }
                run = 0;
            }
        }
        consider(run, n);
    }
    best
}

/// The key an allocation is matched on when a device's step is looked
/// for: its size, with its stream in the top byte (a step repeats sizes
/// and streams both).
pub(super) fn key(size: u64, stream: u32) -> u64 {
    size ^ (u64::from(stream) << 56)
}

/// The keys of the first `window` allocations of `ops`, and whether more
/// allocations follow them.
fn window_keys(ops: &[StreamOp], window: usize) -> (Vec<u64>, bool) {
    let mut keys = Vec::new();
    for op in ops {
        if let Op::Alloc(size) = op.op {
            if keys.len() == window {
                return (keys, true);
            }
            keys.push(key(size, op.stream));
        }
    }
    (keys, false)
}

/// Cuts a recorded program to the part a plan of it places, whatever the
/// recording's length: its prologue (the allocations before the first
/// instance of `step`), two instances of the step, and of the instance
/// after them only the frees of blocks allocated before it (so that the
/// blocks of the second instance are freed, as they are in every step).
/// Later allocations and their frees are left out; a block that the
/// recording frees after that third instance counts as never freed.
///
/// `step` is a step of the allocations of `ops` as [`find_step`] gives it
/// (of their keys: sizes, and streams for a program of several), found
/// on the whole recording or on its first allocations only. Allocations
/// keep their numbers, so frees name the same blocks. Returns the cut
/// program and its step: the two instances kept, ending with the cut
/// program's allocations. [`Plan::for_streams_sharing`](super::Plan::for_streams_sharing)
/// plans a recording longer than [`MAX_SEARCHED`] allocations from its
/// cut, and a cut program the same as the recording it was cut from.
///
/// An error when `step` does not fit `ops`: shorter than two instances,
/// or ending after the program's allocations.
///
/// ```
/// use somalloc::plan::{cut, find_step, Op, Step, StreamOp};
/// # fn main() -> Result<(), String> {
/// // A weight (never freed), then ten steps of 1, 2, 3 and 4 MiB: the
/// // 2 MiB block lives into the next step, the others die in their own.
/// let mib = 1u64 << 20;
/// let mut ops = vec![StreamOp::new(0, Op::Alloc(64 * mib), 0)];
/// for step in 0..10 {
///     let k = 1 + 4 * step; // the step's first allocation
///     ops.push(StreamOp::new(0, Op::Alloc(mib), 0));
///     ops.push(StreamOp::new(0, Op::Free(k), 0));
///     ops.push(StreamOp::new(0, Op::Alloc(2 * mib), 0));
///     if step > 0 {
///         ops.push(StreamOp::new(0, Op::Free(k - 3), 0)); // the last step's 2 MiB
///     }
///     ops.push(StreamOp::new(0, Op::Alloc(3 * mib), 0));
///     ops.push(StreamOp::new(0, Op::Alloc(4 * mib), 0));
///     ops.push(StreamOp::new(0, Op::Free(k + 3), 0));
///     ops.push(StreamOp::new(0, Op::Free(k + 2), 0));
/// }
/// let sizes: Vec<u64> = ops.iter().filter_map(|o| match o.op {
///     Op::Alloc(s) => Some(s),
///     Op::Free(_) => None,
/// }).collect();
/// let step = find_step(&sizes).ok_or("no step")?;
/// assert_eq!((step.len, step.start()), (4, 1));
/// let (kept, two) = cut(&ops, step)?;
/// // The weight and two steps; the third step's free of the second
/// // step's 2 MiB block (allocation 6) ends the cut program.
/// assert_eq!(two, Step { len: 4, covered: 8, end: 9 });
/// assert_eq!(kept.iter().filter(|o| matches!(o.op, Op::Alloc(_))).count(), 9);
/// assert_eq!(kept.last().map(|o| o.op), Some(Op::Free(6)));
/// # Ok(())
/// # }
/// ```
pub fn cut(ops: &[StreamOp], step: Step) -> Result<(Vec<StreamOp>, Step), String> {
    let p = step.len;
    // The run's start, and the end of its second instance.
    let keep = p
        .checked_mul(2)
        .filter(|&two| p > 0 && two <= step.covered)
        .and_then(|two| step.end.checked_sub(step.covered)?.checked_add(two));
    let Some(keep) = keep else {
        return Err(format!(
            "a step of {p} allocations covering {} up to {} is not two instances of it",
            step.covered, step.end
        ));
    };
    // The third instance's frees come before its end's next allocation.
    let third_end = keep.saturating_add(p);
    let mut out = Vec::new();
    let mut made = 0usize;
    for op in ops {
        match op.op {
            Op::Alloc(_) => {
                if made == third_end {
                    break;
                }
                if made < keep {
                    out.push(*op);
                }
                made += 1;
            }
            Op::Free(k) => {
                if k < keep {
                    out.push(*op);
                }
            }
        }
    }
    if made < keep {
        return Err(format!(
            "a step of {p} allocations whose second instance ends at allocation {keep}, in a program of {made}"
        ));
    }
    let two = Step {
        len: p,
        covered: 2 * p,
        end: keep,
    };
    Ok((out, two))
}

/// The part of a recorded program that a plan places.
pub(super) enum Part {
    /// All of it (it fits the window), with its step if it has one.
    Whole(Option<Step>),
    /// Its cut ([`cut`]) and the cut's step.
    Cut(Vec<StreamOp>, Step),
}

/// The part of `ops` a plan places: the whole program when its
/// allocations fit in `window` (its step found on all of them), else its
/// cut to the step found in its first `window` allocations. An error that
/// says what is too long when a longer program repeats no step there.
pub(super) fn part(ops: &[StreamOp], window: usize) -> Result<Part, String> {
    let (keys, longer) = window_keys(ops, window);
    let found = find_step(&keys);
    if !longer {
        return Ok(Part::Whole(found));
    }
    match found {
        Some(step) => {
            let (cut, two) = cut(ops, step)?;
            Ok(Part::Cut(cut, two))
        }
        None => Err(too_long(ops, window)),
    }
}

/// Why a program longer than `window` allocations cannot be planned: no
/// step repeats in its first `window` allocations. When one repeats in its
/// last ones, the prologue before it is too long; when none does either,
/// the step is (or there is none).
fn too_long(ops: &[StreamOp], window: usize) -> String {
    let all: Vec<u64> = ops
        .iter()
        .filter_map(|o| match o.op {
            Op::Alloc(size) => Some(key(size, o.stream)),
            Op::Free(_) => None,
        })
        .collect();
    let n = all.len();
    match find_step(&all[n.saturating_sub(window)..]) {
        Some(s) => format!(
            "a recording of {n} allocations whose prologue is too long: a step of {} allocations repeats at its \
             end, but not twice within its first {window}, which must hold the allocations before the loop \
             and two steps",
            s.len
        ),
        None => format!(
            "a recording of {n} allocations whose step is too long, or that has none: no step repeats twice \
             within its first {window} allocations, nor within its last {window} (a plan places the \
             allocations before the loop and two steps, at most {window})"
        ),
    }
}

#[cfg(test)]
#[path = "step_tests.rs"]
mod tests;
