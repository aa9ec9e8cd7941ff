//! Streams the program brings, as a user of somalloc brings them: with the
//! `cudarc` feature, cudarc streams (`ctx.new_stream()` in the device's
//! primary context) wrapped by `Stream::from_cudarc`; without it (the rocm
//! backend, a cuda build without the feature), streams somalloc made,
//! wrapped again by `Stream::from_raw`. The lent streams live until the
//! process ends, so that no tier or buffer can outlive one; each
//! measurement wraps one anew, so that each starts with a stream somalloc
//! knows nothing about (and a promise made for one measurement does not
//! carry over).

use std::sync::Mutex;

use somalloc::{Device, Stream};

#[cfg(feature = "cudarc")]
type Lender = std::sync::Arc<cudarc::driver::CudaStream>;
#[cfg(not(feature = "cudarc"))]
type Lender = Stream;

#[cfg(feature = "cudarc")]
pub const HOW: &str = "a cudarc stream (ctx.new_stream()) wrapped by Stream::from_cudarc";
#[cfg(not(feature = "cudarc"))]
pub const HOW: &str = "a stream made by Stream::new, wrapped again by unsafe Stream::from_raw";

/// (device ordinal, slot) -> the stream lent there.
static LENDERS: Mutex<Vec<((usize, usize), Lender)>> = Mutex::new(Vec::new());

#[cfg(feature = "cudarc")]
fn make(dev: &Device) -> somalloc::Result<Lender> {
    crate::alloc::cudarc_alloc::context(dev.ordinal(), true)?
        .new_stream()
        .map_err(crate::alloc::cudarc_alloc::error("cuStreamCreate"))
}

#[cfg(not(feature = "cudarc"))]
fn make(dev: &Device) -> somalloc::Result<Lender> {
    Stream::new(dev)
}

#[cfg(feature = "cudarc")]
fn wrap(_: &Device, lender: &Lender) -> somalloc::Result<Stream> {
    Stream::from_cudarc(lender)
}

#[cfg(not(feature = "cudarc"))]
fn wrap(dev: &Device, lender: &Lender) -> somalloc::Result<Stream> {
    // SAFETY: a live stream of `dev`, kept in `LENDERS` until the
    // process ends.
    unsafe { Stream::from_raw(dev, lender.as_raw()) }
}

/// A new borrowed `Stream` of the stream lent at `slot` on `dev`
/// (made on first use).
pub fn borrow(dev: &Device, slot: usize) -> somalloc::Result<Stream> {
    let mut lenders = LENDERS.lock().unwrap_or_else(|p| p.into_inner());
    let key = (dev.ordinal(), slot);
    if let Some((_, l)) = lenders.iter().find(|(k, _)| *k == key) {
        return wrap(dev, l);
    }
    let l = make(dev)?;
    let s = wrap(dev, &l)?;
    lenders.push((key, l));
    Ok(s)
}
