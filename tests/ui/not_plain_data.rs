use somalloc::{Device, DeviceBuffer, Stream};

fn main() -> somalloc::Result<()> {
    let dev = Device::get(0)?;
    let stream = Stream::new(&dev)?;
    // Device memory can only hold plain data: String owns host memory.
    let _buf = DeviceBuffer::<String>::new(16, &stream)?;
    Ok(())
}
