//! A pool's reuse policy, peer-access modes and export handle types.

use super::*;

/// The three reuse-policy switches of a pool. All are on by default on both
/// vendors.
///
/// What the runtimes promise when a block freed on stream A is wanted by an
/// allocation on stream B:
///
/// | flag | on: the pool may hand the block to B … | off |
/// |---|---|---|
/// | `follow_event_dependencies` | … when B already waits (through events) on the work that preceded the free on A | no reuse through event edges |
/// | `allow_opportunistic` | … when the free has already completed on the device at the time of the allocation | no reuse based on observed completion |
/// | `allow_internal_dependencies` | … after inserting a wait on A into B, so B's later work is ordered after A's free | B is never made to wait on A |
///
/// With all three off, a block freed on A is reused only by later allocations
/// on A itself (or after it has been released and re-reserved). Both CUDA
/// and HIP document the same three attributes with the same numbering; the
/// conformance suite checks the "all off" guarantee on each.
///
/// Start from [`ReusePolicy::ALL`] or [`ReusePolicy::NONE`] and change
/// single flags with the builder methods, named after the fields (flags
/// may be added, so the struct cannot be written out in full):
///
/// ```
/// use somalloc::ReusePolicy;
/// let p = ReusePolicy::NONE.follow_event_dependencies(true);
/// assert!(p.follow_event_dependencies && !p.allow_opportunistic);
/// assert_eq!(ReusePolicy::default(), ReusePolicy::ALL);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReusePolicy {
    /// `cudaMemPoolReuseFollowEventDependencies` / `hipMemPoolReuseFollowEventDependencies`.
    pub follow_event_dependencies: bool,
    /// `cudaMemPoolReuseAllowOpportunistic` / `hipMemPoolReuseAllowOpportunistic`.
    pub allow_opportunistic: bool,
    /// `cudaMemPoolReuseAllowInternalDependencies` / `hipMemPoolReuseAllowInternalDependencies`.
    pub allow_internal_dependencies: bool,
}

impl ReusePolicy {
    /// All three on (the runtimes' default).
    pub const ALL: ReusePolicy = ReusePolicy {
        follow_event_dependencies: true,
        allow_opportunistic: true,
        allow_internal_dependencies: true,
    };
    /// All three off: a freed block is reused only on its own stream.
    pub const NONE: ReusePolicy = ReusePolicy {
        follow_event_dependencies: false,
        allow_opportunistic: false,
        allow_internal_dependencies: false,
    };

    /// Sets [`follow_event_dependencies`](ReusePolicy::follow_event_dependencies).
    pub const fn follow_event_dependencies(mut self, on: bool) -> ReusePolicy {
        self.follow_event_dependencies = on;
        self
    }

    /// Sets [`allow_opportunistic`](ReusePolicy::allow_opportunistic).
    pub const fn allow_opportunistic(mut self, on: bool) -> ReusePolicy {
        self.allow_opportunistic = on;
        self
    }

    /// Sets [`allow_internal_dependencies`](ReusePolicy::allow_internal_dependencies).
    pub const fn allow_internal_dependencies(mut self, on: bool) -> ReusePolicy {
        self.allow_internal_dependencies = on;
        self
    }
}

/// [`ReusePolicy::ALL`], the runtimes' default.
impl Default for ReusePolicy {
    fn default() -> ReusePolicy {
        ReusePolicy::ALL
    }
}

/// How another device may access a pool's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAccess {
    /// No access (the default for created pools on other devices).
    None,
    /// Reads only.
    Read,
    /// Reads and writes.
    ReadWrite,
}

impl PeerAccess {
    pub(super) fn flags(self) -> u32 {
        match self {
            PeerAccess::None => 0,
            PeerAccess::Read => 1,
            PeerAccess::ReadWrite => 3,
        }
    }

    pub(super) fn from_flags(flags: u32) -> Result<PeerAccess> {
        match flags {
            0 => Ok(PeerAccess::None),
            1 => Ok(PeerAccess::Read),
            3 => Ok(PeerAccess::ReadWrite),
            other => Err(Error::Unsupported {
                backend: crate::VENDOR,
                what: format!("access flags {other:#x} reported by the runtime"),
            }),
        }
    }
}

/// Export handle types a created pool supports (for IPC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportHandle {
    /// Not exportable.
    #[default]
    None,
    /// A POSIX file descriptor (Linux).
    PosixFd,
}

impl ExportHandle {
    pub(super) fn mask(self) -> u32 {
        match self {
            ExportHandle::None => 0,
            ExportHandle::PosixFd => 1,
        }
    }
}
