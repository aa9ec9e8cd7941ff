//! Tests of the host-memory types (no GPU needed).

use super::*;
use crate::pool::{AllocationType, Location};

#[test]
fn placements_decide_which_buffer_holds_them() {
    let host = Placement::new(Location::Host, AllocationType::Pinned);
    let numa = Placement::new(Location::HostNuma(1), AllocationType::Pinned);
    let managed = Placement::new(Location::Device(0), AllocationType::Managed);
    let anywhere = Placement::new(Location::Unspecified, AllocationType::Managed);
    for p in [host, numa, managed, anywhere] {
        assert!(refuse_device_memory(p, "pool").is_ok(), "{p:?}");
    }
    assert!(matches!(
        refuse_device_memory(Placement::device(0), "pool"),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(host.is_pinned_host() && numa.is_pinned_host());
    assert!(!managed.is_pinned_host() && !managed.is_device_memory());
    assert!(Placement::device(3).is_device_memory());
}

#[test]
fn null_is_not_asked_about() {
    assert!(matches!(
        pointer_info(std::ptr::null()),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn lengths_must_match() {
    assert!(check_len(4, 4).is_ok());
    assert!(matches!(check_len(4, 5), Err(Error::InvalidArgument { .. })));
}
