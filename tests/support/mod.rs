//! What the GPU test binaries outside the conformance suite share: the skip
//! line, device 0 or a skip, and a lock for tests that must have the device
//! to themselves. Each test binary compiles its own copy (`mod support;`),
//! so each has its own lock.

#![allow(dead_code)] // not every binary uses every helper

use std::io::Write;
use std::sync::{Mutex, MutexGuard};

use somalloc::{Device, Error};

/// Prints one line that bypasses the test harness's output capture, so skips
/// show in every log.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Takes this binary's lock: its tests run one at a time while they hold it
/// (a panicking test does not poison it for the others).
pub fn exclusive() -> MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Device 0, or `None` after one `SKIP` line when there is no runtime or no
/// device. Any other error is a test failure.
pub fn device_or_skip(test: &str) -> Option<Device> {
    match Device::get(0) {
        Ok(dev) => Some(dev),
        Err(e @ (Error::RuntimeNotFound { .. } | Error::NoDevice { .. })) => {
            say(&format!("SKIP {test}: no GPU ({e})"));
            None
        }
        Err(e) => panic!("{test}: device 0: {e}"),
    }
}
