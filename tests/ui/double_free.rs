use somalloc::{Device, DeviceBuffer, Stream};

fn main() -> somalloc::Result<()> {
    let dev = Device::get(0)?;
    let stream = Stream::new(&dev)?;
    let buf = DeviceBuffer::<u32>::new(16, &stream)?;
    buf.release()?;
    buf.release()?; // double free: rejected
    Ok(())
}
