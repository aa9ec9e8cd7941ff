//! Whether a device's arena can serve it when the program configured
//! nothing (`pool:auto`, and [`VmmArena::as_default`](super::VmmArena::as_default)):
//! a function of what the device and the loaded runtime offer and of their
//! known faults. An explicit arena (`pool:vmm`, [`VmmArena::new`](super::VmmArena::new))
//! works around the faults instead (it keeps its chunks); a default that
//! could never give memory back would be worse than the pool it replaces.

use crate::backend::{VmmQuirks, VmmSupport};

/// Why the arena should not serve a device by default, if it should not:
/// the device or the runtime has no virtual-memory management, or the
/// runtime's release does not give memory back (a ROCm fault). The chunk
/// size and file-descriptor faults keep the arena, with their limits.
pub(crate) fn refusal(support: &VmmSupport, quirks: &VmmQuirks) -> Option<String> {
    if !support.supported {
        return Some(format!(
            "no virtual-memory management ({})",
            support.why_not.unwrap_or("not supported")
        ));
    }
    if quirks.release_leaks {
        return Some(
            "this runtime's hipMemRelease does not free the memory, so the arena could not give it back"
                .into(),
        );
    }
    if quirks.reservation_holds_memory {
        return Some(
            "this runtime frees released memory only with its whole address reservation, so the arena could \
             not give it back"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supported() -> VmmSupport {
        VmmSupport {
            supported: true,
            posix_fd: true,
            rdma: false,
            granularity: 2 << 20,
            recommended: 2 << 20,
            why_not: None,
        }
    }

    #[test]
    fn the_arena_serves_where_the_device_supports_it_and_nothing_leaks() {
        assert_eq!(refusal(&supported(), &VmmQuirks::NONE), None);
        // The chunk-size and descriptor faults keep the arena.
        let limits = VmmQuirks {
            fd_per_create: true,
            max_chunk: Some(256 << 20),
            ..VmmQuirks::NONE
        };
        assert_eq!(refusal(&supported(), &limits), None);
    }

    #[test]
    fn it_steps_aside_without_support_or_where_memory_cannot_go_back() {
        let why = refusal(
            &VmmSupport::unsupported("the device does not support virtual memory management"),
            &VmmQuirks::NONE,
        )
        .unwrap();
        assert!(
            why.contains("does not support virtual memory management"),
            "{why}"
        );
        let leaks = VmmQuirks {
            release_leaks: true,
            ..VmmQuirks::NONE
        };
        assert!(refusal(&supported(), &leaks).unwrap().contains("hipMemRelease"));
        let held = VmmQuirks {
            reservation_holds_memory: true,
            ..VmmQuirks::NONE
        };
        assert!(refusal(&supported(), &held).unwrap().contains("reservation"));
    }
}
