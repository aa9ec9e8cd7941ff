//! A cudarc program on the CUDA 12.8 bindings with cudarc's default
//! features, using somalloc through its cudarc interop. CI only builds it;
//! on a GPU it stages data through a somalloc buffer and checks it.

use cudarc::driver::CudaContext;
use somalloc::{Device, DeviceBuffer, Stream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Err(e) = Device::get(0) {
        println!("no GPU: {e}");
        return Ok(());
    }
    let ctx = CudaContext::new(0)?;
    let cs = ctx.new_stream()?;
    let stream = Stream::from_cudarc(&cs)?;
    let input = cs.clone_htod(&[1u32, 2, 3, 4])?;
    let mut staged = DeviceBuffer::<u32>::new(4, &stream)?;
    staged.copy_from_cudarc(&input)?;
    let mut output = cs.alloc_zeros::<u32>(4)?;
    staged.copy_to_cudarc(&mut output)?;
    let back = cs.clone_dtoh(&output)?;
    assert_eq!(back, [1, 2, 3, 4]);
    println!("staged {back:?} through somalloc on CUDA {}", Device::runtime_version()?);
    Ok(())
}
