//! The size classes: 256 bytes, then 8 steps per power of two.

/// log2 of the smallest class.
const MIN_SHIFT: usize = 8;
/// log2 of the classes per power of two.
const SUB_BITS: usize = 3;
const SUBS: usize = 1 << SUB_BITS;
/// The smallest class: requests below it get blocks of this size.
pub(super) const MIN_BLOCK: usize = 1 << MIN_SHIFT;
/// The largest `max_block_bytes` accepted (keeps the class table small).
pub(super) const MAX_BLOCK_LIMIT: usize = 1 << 40;

/// The size-class index of a request of `bytes` (at least 1).
#[inline]
pub(super) fn class_index(bytes: usize) -> usize {
    if bytes <= MIN_BLOCK {
        return 0;
    }
    let n = bytes - 1;
    // floor(log2 n) >= MIN_SHIFT since n >= 256.
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let top = n >> (k - SUB_BITS); // in SUBS..2 * SUBS
    (k - MIN_SHIFT) * SUBS + (top - SUBS) + 1
}

/// The block size of size class `index`.
#[inline]
pub(super) fn class_size(index: usize) -> usize {
    if index == 0 {
        return MIN_BLOCK;
    }
    let j = index - 1;
    let k = MIN_SHIFT + j / SUBS;
    let top = SUBS + j % SUBS;
    (top + 1) << (k - SUB_BITS)
}
