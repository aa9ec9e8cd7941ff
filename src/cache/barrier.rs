//! A process-wide memory barrier (Linux `membarrier`, private expedited):
//! when it returns, every thread of the process that was running has
//! executed a full memory barrier, and threads that were not running will
//! pass one (a context switch) before they run again. It lets the stream
//! lock (`lock.rs`) take the full barrier off its owner's hot path: the
//! owner orders its accesses with compiler fences only, and the rare thread
//! that takes the lock away from it pays for both sides with this call
//! (a few microseconds: an interrupt to each CPU running this process).
//!
//! Where there is no such call (another OS, an architecture without the
//! number below, an old kernel, a sandbox that forbids it), [`available`]
//! is `false` and the stream lock never hands out ownership: every access
//! takes the lock.

#![cfg_attr(all(loom, test), allow(dead_code, unused_imports))]

use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether [`heavy`] works in this process (registers for it on the first
/// call; the answer then never changes).
#[cfg(not(all(loom, test)))]
pub(super) fn available() -> bool {
    match STATE.load(Ordering::Acquire) {
        YES => true,
        NO => false,
        _ => {
            let ok = sys::register();
            // Racing first callers register twice, which is harmless, and
            // all reach the same answer.
            STATE.store(if ok { YES } else { NO }, Ordering::Release);
            ok
        }
    }
}

/// The process-wide barrier. Only called after [`available`] said `true`;
/// `false` if the kernel refused it even after registering again (a child
/// made by `fork` starts unregistered, so the first refusal registers).
#[cfg(not(all(loom, test)))]
#[must_use]
pub(super) fn heavy() -> bool {
    sys::barrier() || (sys::register() && sys::barrier())
}

/// The model (`--cfg loom`): the barrier is there.
#[cfg(all(loom, test))]
pub(super) fn available() -> bool {
    true
}

/// The model (`--cfg loom`) of the process-wide barrier: what it guarantees
/// is that every other thread of the process executes a full memory
/// barrier at some point between the call's start and its return (an
/// interrupt, or a context switch for a thread not running). So each point
/// P of another thread's program that is separated from its neighbours only
/// by a compiler fence (`sync::light_fence`) falls either before that
/// barrier, and then everything the thread did before P is visible to the
/// caller after the call, or after it, and then everything the caller did
/// before the call is visible to the thread after P. That is the ordering
/// two sequentially consistent fences give each other (one of the two comes
/// first in their single total order), so the model runs the call as a
/// `SeqCst` fence and the light fence as another. (Loom's `SeqCst` fences
/// also order everything before them, slightly more than the barrier
/// promises; the lock relies only on the pair above: the owner's flag store
/// and owner load against the revoker's owner store and flag load.)
#[cfg(all(loom, test))]
#[must_use]
pub(super) fn heavy() -> bool {
    crate::sync::fence_seq_cst();
    true
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64")
))]
mod sys {
    use std::ffi::{c_int, c_long, c_uint};

    extern "C" {
        // The C library's generic system call entry (glibc and musl).
        fn syscall(number: c_long, ...) -> c_long;
    }

    #[cfg(target_arch = "x86_64")]
    const SYS_MEMBARRIER: c_long = 324;
    #[cfg(any(target_arch = "aarch64", target_arch = "riscv64"))]
    const SYS_MEMBARRIER: c_long = 283;

    const CMD_QUERY: c_int = 0;
    const CMD_PRIVATE_EXPEDITED: c_int = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: c_int = 1 << 4;

    fn membarrier(cmd: c_int) -> c_long {
        // SAFETY: membarrier(cmd, flags = 0, cpu_id = 0) reads and writes no
        // memory of ours; an unknown command or an old kernel answers -1.
        unsafe { syscall(SYS_MEMBARRIER, cmd, 0 as c_uint, 0 as c_int) }
    }

    pub(super) fn register() -> bool {
        let supported = membarrier(CMD_QUERY);
        supported >= 0
            && supported & c_long::from(CMD_PRIVATE_EXPEDITED) != 0
            && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    }

    pub(super) fn barrier() -> bool {
        membarrier(CMD_PRIVATE_EXPEDITED) == 0
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64")
)))]
mod sys {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn barrier() -> bool {
        false
    }
}
