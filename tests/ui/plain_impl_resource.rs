// A memory resource promises what DeviceBuffer's safe methods rely on, so
// implementing the trait takes `unsafe impl`.
use std::ffi::c_void;

use somalloc::{Device, MemoryResource, Stream};

struct Mine;

impl MemoryResource for Mine {
    fn allocate(&self, _bytes: usize, _stream: &Stream) -> somalloc::Result<*mut c_void> {
        Ok(std::ptr::null_mut())
    }
    unsafe fn deallocate(&self, _ptr: *mut c_void, _bytes: usize, _stream: &Stream) -> somalloc::Result<()> {
        Ok(())
    }
    fn device(&self) -> Device {
        unreachable!("never called: this file must not compile")
    }
}

fn main() {}
