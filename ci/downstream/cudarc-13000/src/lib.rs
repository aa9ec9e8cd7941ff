//! A library on cudarc (CUDA 13.0 bindings, dynamic linking) that launches
//! its kernels on somalloc buffers. CI builds it; nothing here runs there.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use somalloc::interop::cudarc::Launch;
use somalloc::{DeviceBuffer, Stream};

/// Scales `data` in place on `stream` with `scale(float*, unsigned, float)`,
/// in a buffer of somalloc's current pool, and returns the buffer.
pub fn scaled(
    stream: &Arc<CudaStream>,
    scale: &CudaFunction,
    data: &[f32],
    factor: f32,
) -> somalloc::Result<DeviceBuffer<f32>> {
    let mut buf = DeviceBuffer::from_slice(data, &Stream::from_cudarc(stream)?)?;
    let n = u32::try_from(data.len()).map_err(|_| somalloc::Error::InvalidArgument {
        reason: somalloc::InvalidReason::Other,
        why: "too many elements".into(),
    })?;
    let mut launch = Launch::new(stream, scale)?;
    launch.arg(&mut buf).arg(&n).arg(&factor);
    // SAFETY: the kernel takes (float*, unsigned, float) and stays in bounds.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
    drop(launch);
    Ok(buf)
}
