//! [`Launch`]: cudarc's launch builder, with somalloc buffers among the
//! arguments.

use std::sync::Arc;

use ::cudarc::driver::sys::CUevent_flags;
use ::cudarc::driver::{CudaEvent, CudaFunction, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg};
use bytemuck::Pod;

use super::driver_error;
use crate::buffer::{DeviceBuffer, DeviceView, DeviceViewMut};
use crate::error::{Error, InvalidReason, Result};
use crate::stream::Stream;

/// cudarc's kernel launch builder, for launches whose arguments include
/// somalloc buffers.
///
/// It takes every argument cudarc's `LaunchArgs` takes (through cudarc's
/// [`PushKernelArg`]: `.arg(&x)`), plus `&DeviceBuffer<T>`,
/// `&mut DeviceBuffer<T>` and views of buffers (`&DeviceView<T>`,
/// `&DeviceViewMut<T>`, `&mut DeviceViewMut<T>`), passed to the kernel as
/// the device address of the first element (a `T*` parameter). A buffer
/// (or view) that is not usable on the launch stream (its own stream, or
/// one given to [`DeviceBuffer::use_on`]) makes
/// [`Launch::launch`] return [`Error::InvalidArgument`] without launching.
/// The buffers stay borrowed until the `Launch` is dropped, so none can be
/// freed between `arg` and `launch`.
///
/// See the [module documentation](super) for an example.
#[derive(Debug)]
pub struct Launch<'a> {
    args: LaunchArgs<'a>,
    stream: Stream,
    /// The device addresses of buffer arguments, which `args` points to.
    /// Declared after `args`, so that it is dropped after it.
    addresses: Addresses,
    pushed: usize,
    refused: Option<Error>,
}

/// Heap cells for the device addresses of buffer arguments. Each is held
/// as the raw pointer that `Box::into_raw` returned, so its address never
/// changes when the list grows and no `Box` is moved while `LaunchArgs`
/// refers to its contents; they are freed on drop.
#[derive(Debug, Default)]
struct Addresses(Vec<*mut u64>);

// SAFETY: the cells are owned exclusively (as by `Box<u64>`) and hold plain
// integers; nothing else frees them.
unsafe impl Send for Addresses {}
// SAFETY: `&Addresses` allows no access to the cells.
unsafe impl Sync for Addresses {}

impl Addresses {
    /// A new cell holding `value`, alive until `self` is dropped.
    fn push(&mut self, value: u64) -> *const u64 {
        let cell = Box::into_raw(Box::new(value));
        self.0.push(cell);
        cell
    }
}

impl Drop for Addresses {
    fn drop(&mut self) {
        for &cell in &self.0 {
            // SAFETY: from `Box::into_raw` in `push`, freed only here, once.
            drop(unsafe { Box::from_raw(cell) });
        }
    }
}

impl<'a> Launch<'a> {
    /// A builder for `func` on `stream`; the stream is refused as by
    /// [`Stream::from_cudarc`].
    pub fn new(stream: &'a Arc<CudaStream>, func: &'a CudaFunction) -> Result<Launch<'a>> {
        Ok(Launch {
            stream: Stream::from_cudarc(stream)?,
            args: stream.launch_builder(func),
            addresses: Addresses::default(),
            pushed: 0,
            refused: None,
        })
    }

    /// The launch stream, as a somalloc [`Stream`].
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Makes [`Launch::launch`] also return events recorded just before and
    /// after the kernel (cudarc's `record_kernel_launch`).
    pub fn record_kernel_launch(&mut self, flags: CUevent_flags) -> &mut Self {
        self.args.record_kernel_launch(flags);
        self
    }

    fn push_buffer<T: Pod>(&mut self, buf: DeviceView<'_, T>) -> &mut Self {
        let position = self.pushed;
        self.pushed += 1;
        if self.refused.is_none() && !buf.is_usable_on(&self.stream) {
            self.refused = Some(InvalidReason::WrongStream.error(format!(
                "kernel argument {position}: the buffer is not usable on the launch stream (it is \
                 neither the buffer's stream nor one given to use_on); call \
                 buf.use_on(&Stream::from_cudarc(&stream)?) first"
            )));
        }
        let at = self.addresses.push(buf.as_raw() as u64);
        // SAFETY: `at` is a heap cell of `self.addresses`, freed only when
        // `self` is dropped (after `args`), never written again, and never
        // reached through a reference that could be invalidated (it is held
        // as a raw pointer from `Box::into_raw`, not as a `Box`). `LaunchArgs`
        // only keeps the reference and reads it during `launch`, which takes
        // `&mut self`, so every read happens while the cell is alive; the
        // longer lifetime is never used after that.
        let address: &'a u64 = unsafe { &*at };
        self.args.arg(address);
        self
    }

    /// Enqueues the kernel on the launch stream (cudarc's
    /// `LaunchArgs::launch`), or returns the refusal of a buffer argument
    /// without enqueuing anything.
    ///
    /// # Safety
    /// As for cudarc's `LaunchArgs::launch`: the arguments match the
    /// kernel's parameters in number, order and type, and the kernel stays
    /// within every buffer it is given and respects `&` (reads only).
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<Option<(CudaEvent, CudaEvent)>> {
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        // SAFETY: forwarded from the caller; buffer arguments are usable on
        // this stream (checked at `arg`) and borrowed for `'a`.
        unsafe { self.args.launch(cfg) }.map_err(|e| driver_error("cuLaunchKernel", e))
    }

    /// [`Launch::launch`] as a cooperative launch (cudarc's
    /// `LaunchArgs::launch_cooperative`).
    ///
    /// # Safety
    /// As for [`Launch::launch`].
    pub unsafe fn launch_cooperative(&mut self, cfg: LaunchConfig) -> Result<Option<(CudaEvent, CudaEvent)>> {
        if let Some(e) = &self.refused {
            return Err(e.clone());
        }
        // SAFETY: as in `launch`.
        unsafe { self.args.launch_cooperative(cfg) }.map_err(|e| driver_error("cuLaunchCooperativeKernel", e))
    }
}

// SAFETY: every argument cudarc's `LaunchArgs` takes goes to it unchanged,
// with cudarc's own contract.
unsafe impl<'a, A> PushKernelArg<A> for Launch<'a>
where
    LaunchArgs<'a>: PushKernelArg<A>,
{
    #[inline(always)]
    fn arg(&mut self, arg: A) -> &mut Self {
        self.pushed += 1;
        self.args.arg(arg);
        self
    }
}

// SAFETY: the kernel gets the buffer's device address (8 bytes, a `T*`
// parameter), stored where it stays valid until the launch (`push_buffer`).
// The buffer is borrowed for `'b: 'a`, so it outlives the launch call, and a
// buffer not usable on the launch stream stops the launch.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceBuffer<T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, buf: &'b DeviceBuffer<T>) -> &mut Self {
        self.push_buffer(buf.view())
    }
}

// SAFETY: as for `&DeviceBuffer<T>`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceBuffer<T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, buf: &'b mut DeviceBuffer<T>) -> &mut Self {
        self.push_buffer(buf.view())
    }
}

// SAFETY: as for `&DeviceBuffer<T>`: the address of the view's first
// element; the view borrows its buffer for `'b`, and the view itself is
// borrowed for `'b: 'a`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceView<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b DeviceView<'_, T>) -> &mut Self {
        self.push_buffer(*view)
    }
}

// SAFETY: as for `&DeviceView<T>`.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b DeviceViewMut<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b DeviceViewMut<'_, T>) -> &mut Self {
        self.push_buffer(view.as_view())
    }
}

// SAFETY: as for `&DeviceView<T>`; the exclusive borrow lets the kernel
// write the view's range.
unsafe impl<'a, 'b: 'a, T: Pod> PushKernelArg<&'b mut DeviceViewMut<'_, T>> for Launch<'a> {
    #[inline(always)]
    fn arg(&mut self, view: &'b mut DeviceViewMut<'_, T>) -> &mut Self {
        self.push_buffer(view.as_view())
    }
}
