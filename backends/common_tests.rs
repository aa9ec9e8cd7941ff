use std::ffi::c_long;

use super::*;

struct FakeCodes;

impl Codes for FakeCodes {
    const BACKEND: crate::Vendor = crate::Vendor::Cuda;
    fn version_text(version: i32) -> String {
        format!("Fake {version}")
    }
    fn texts(_code: i32) -> (String, String) {
        (String::new(), String::new())
    }
}

extern "C" fn seven() -> c_int {
    7
}

#[test]
fn a_missing_optional_call_is_unsupported_naming_both_runtimes() {
    let missing: Optional<extern "C" fn() -> c_int> = Optional::new(None, "fakeCall\0", "Fake 5", 4);
    match missing.get::<FakeCodes>() {
        Err(Error::Unsupported { backend, what }) => {
            assert_eq!(backend, crate::Vendor::Cuda);
            assert_eq!(what, "fakeCall needs Fake 5 or later; this runtime is Fake 4");
        }
        other => panic!("unexpected {:?}", other.map(|_| ())),
    }
    let present = Optional::new(Some(seven as extern "C" fn() -> c_int), "fakeCall\0", "Fake 5", 6);
    assert_eq!(present.get::<FakeCodes>().map(|f| f()).ok(), Some(7));
}

// The C library stands in for a runtime: `runtime_api!` loads what it
// has, leaves out what it lacks or what the version rules out, and fails
// the load for a missing required symbol.
mod libc_api {
    use super::*;

    runtime_api! {
        version: version;
        fn abs = "abs\0"; (c_int) -> c_int;
        fn length = if version >= 2 { "strlen\0" } else { "no_such_symbol_in_libc\0" }; (*const c_char) -> usize;
        optional(since "Fake 3", if version >= 3) fn labs = "labs\0"; (c_long) -> c_long;
        optional(since "Fake 9") fn missing = "no_such_symbol_in_libc\0"; () -> c_int;
    }

    fn libc() -> libloading::Library {
        // SAFETY: the C library's initialisers have no preconditions.
        unsafe { libloading::Library::new("libc.so.6") }.expect("libc.so.6 loads")
    }

    #[test]
    fn symbols_are_picked_and_made_optional_by_version() {
        // SAFETY: `abs`, `strlen` and `labs` have these C signatures.
        let old = unsafe { Api::load(libc(), 1) };
        match old {
            Err(e) => assert!(e.contains("no_such_symbol_in_libc is missing"), "{e}"),
            Ok(_) => panic!("a missing required symbol must fail the load"),
        }
        // SAFETY: as above.
        let two = unsafe { Api::load(libc(), 2) }.expect("version 2 loads");
        assert_eq!(two.version, 2);
        // SAFETY: plain values and a NUL-terminated string.
        unsafe {
            assert_eq!((two.abs)(-5), 5);
            assert_eq!((two.length)(c"four".as_ptr()), 4);
        }
        let labs = two.labs.get::<FakeCodes>().map(|_| ());
        assert!(matches!(labs, Err(Error::Unsupported { what, .. })
            if what == "labs needs Fake 3 or later; this runtime is Fake 2"));
        // SAFETY: as above.
        let three = unsafe { Api::load(libc(), 3) }.expect("version 3 loads");
        let labs = three
            .labs
            .get::<FakeCodes>()
            .expect("labs is loaded from version 3");
        // SAFETY: a plain value.
        assert_eq!(unsafe { labs(-9) }, 9);
        let missing = three.missing.get::<FakeCodes>().map(|_| ());
        assert!(matches!(missing, Err(Error::Unsupported { what, .. })
            if what == "no_such_symbol_in_libc needs Fake 9 or later; this runtime is Fake 3"));
    }
}

// A fake runtime: one current device per thread, every call counted.
struct FakeDevice;

thread_local! {
    static CURRENT: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
    static SETS: std::cell::RefCell<Vec<c_int>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl CurrentDevice for FakeDevice {
    fn current() -> Result<c_int> {
        Ok(CURRENT.get())
    }
    fn make_current(device: c_int) -> Result<()> {
        if device >= 4 {
            return Err(Error::invalid("no such device"));
        }
        SETS.with_borrow_mut(|s| s.push(device));
        CURRENT.set(device);
        Ok(())
    }
}

fn sets() -> Vec<c_int> {
    SETS.with_borrow_mut(std::mem::take)
}

#[test]
fn the_device_guard_restores_the_current_device() {
    CURRENT.set(1);
    sets();
    {
        let _g = DeviceGuard::<FakeDevice>::set(3).unwrap();
        assert_eq!(CURRENT.get(), 3);
        {
            // Nested, already current: no call at all.
            let _same = DeviceGuard::<FakeDevice>::set(3).unwrap();
            assert_eq!(sets(), [3]);
        }
        assert_eq!(CURRENT.get(), 3);
    }
    assert_eq!(CURRENT.get(), 1);
    assert_eq!(sets(), [1]);
    {
        let _g = DeviceGuard::<FakeDevice>::set(1).unwrap();
    }
    assert_eq!(
        sets(),
        [] as [c_int; 0],
        "the current device is neither set nor restored"
    );
    // A refused set leaves the thread as it was and restores nothing.
    assert!(DeviceGuard::<FakeDevice>::set(7).is_err());
    assert_eq!((CURRENT.get(), sets()), (1, vec![]));
    // So does an ordinal that is no C int.
    assert!(DeviceGuard::<FakeDevice>::set(usize::MAX).is_err());
    assert_eq!(sets(), [] as [c_int; 0]);
}

#[test]
fn capture_values_map_both_ways() {
    assert_eq!(
        capture_status::<FakeCodes>("x", 0).ok(),
        Some(CaptureStatus::None)
    );
    assert_eq!(
        capture_status::<FakeCodes>("x", 1).ok(),
        Some(CaptureStatus::Active)
    );
    assert_eq!(
        capture_status::<FakeCodes>("x", 2).ok(),
        Some(CaptureStatus::Invalidated)
    );
    assert!(matches!(
        capture_status::<FakeCodes>("fakeIsCapturing", 3),
        Err(Error::Unsupported { what, .. }) if what.contains("fakeIsCapturing reported capture status 3")
    ));
    assert_eq!(capture_mode(RawCaptureMode::Relaxed), 2);
    assert_eq!(graph_mem_attr(GraphMemAttr::ReservedMemHigh), 3);
    let mut g = 0u8;
    let graph: *mut u8 = &mut g;
    let active = capture_info(CaptureStatus::Active, 42, graph, |p| p as usize);
    assert_eq!((active.id, active.graph), (42, Some(graph as usize)));
    // Outside a capture the runtimes leave id and graph unwritten.
    let none = capture_info(CaptureStatus::None, 42, graph, |p| p as usize);
    assert_eq!((none.id, none.graph), (0, None));
    let invalidated = capture_info(CaptureStatus::Invalidated, 42, graph, |p| p as usize);
    assert_eq!((invalidated.id, invalidated.graph), (42, None));
}

#[test]
fn pool_locations_follow_the_cuda_release_table() {
    use crate::backend::{RawAlloc, RawLocation};
    let refused = |v, loc, alloc| cuda_pool_refusal(v, loc, alloc, "CUDA x.y");
    let (pinned, managed) = (RawAlloc::Pinned, RawAlloc::Managed);
    // Device pools: every CUDA 12 and 13 runtime.
    for v in [12_000, 12_080, 13_000] {
        assert_eq!(refused(v, RawLocation::Device(0), pinned), None);
    }
    // Host NUMA pools from 12.6, host pools from 13.0, managed from 13.0.
    assert!(refused(12_050, RawLocation::HostNuma(0), pinned).is_some_and(|w| w.contains("CUDA 12.6")));
    assert_eq!(refused(12_060, RawLocation::HostNuma(1), pinned), None);
    let host = refused(12_090, RawLocation::Host, pinned).expect("no plain host pools before 13.0");
    assert!(host.contains("CUDA 13.0") && host.contains("HostNuma") && host.contains("CUDA x.y"));
    assert_eq!(refused(13_000, RawLocation::Host, pinned), None);
    for loc in [
        RawLocation::Device(0),
        RawLocation::Host,
        RawLocation::Unspecified,
    ] {
        assert!(refused(12_090, loc, managed).is_some_and(|w| w.contains("managed")));
        assert_eq!(refused(13_010, loc, managed), None);
    }
    // The numbers both vendors use.
    assert_eq!(location_parts(RawLocation::Device(3)), (1, 3));
    assert_eq!(location_parts(RawLocation::Host), (2, 0));
    assert_eq!(location_parts(RawLocation::HostNuma(5)), (3, 5));
    assert_eq!(location_parts(RawLocation::Unspecified), (0, 0));
    assert_eq!((alloc_type(pinned), alloc_type(managed)), (1, 2));
}

/// The loader's own error is the `source()` of `RuntimeNotFound`, for a
/// library that is not there and for one that opens but is not a runtime.
#[test]
fn a_runtime_that_cannot_be_loaded_keeps_the_cause() {
    use std::error::Error as _;
    /// Never called: neither candidate gets that far.
    unsafe fn load(_: libloading::Library, _: i32) -> std::result::Result<(), String> {
        Ok(())
    }
    let missing = vec!["libsomalloc-no-such-runtime.so".to_string()];
    // SAFETY: the candidate does not exist, so nothing is called.
    let err = unsafe { load_runtime("libnothing", missing, "fakeRuntimeGetVersion\0", |_| None, load) };
    match &err {
        Err(
            e @ Error::RuntimeNotFound {
                cause: Some(cause), ..
            },
        ) => {
            assert!(
                cause.to_string().contains("libsomalloc-no-such-runtime.so"),
                "{cause}"
            );
            assert!(e.source().is_some());
        }
        other => panic!(
            "expected RuntimeNotFound with a cause, got {:?}",
            other.as_ref().map(|_| ())
        ),
    }
    // The C library opens, but has no version symbol: the symbol lookup's
    // error is the cause.
    let libc = vec!["libc.so.6".to_string()];
    // SAFETY: the version symbol does not exist in libc, so nothing of it
    // is called.
    let err = unsafe { load_runtime("libc", libc, "fakeRuntimeGetVersion\0", |_| None, load) };
    match err {
        Err(e @ Error::RuntimeNotFound { .. }) => {
            let cause = e.source().expect("a cause").to_string();
            assert!(cause.contains("fakeRuntimeGetVersion"), "{cause}");
        }
        other => panic!("expected RuntimeNotFound, got {:?}", other.map(|_| ())),
    }
}
