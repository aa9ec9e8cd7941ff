//! Buffers shared with other processes (IPC): export, import, and the wire
//! form of an exported buffer.

use std::mem::size_of;

use bytemuck::Pod;

use super::origin::Origin;
use super::DeviceBuffer;
use crate::backend::{Backend, DevicePtr};
use crate::error::{Error, InvalidReason, Result};
use crate::pool::MemPool;
use crate::stream::Stream;
use crate::Active;

impl<T: Pod> DeviceBuffer<T> {
    /// Names this allocation for another process (IPC). The buffer must come
    /// from a pool created with [`ExportHandle::PosixFd`](crate::ExportHandle)
    /// and the other process imports it from that pool ([`MemPool::export_fd`],
    /// [`MemPool::import_fd`], [`DeviceBuffer::import`]).
    pub fn export(&self) -> Result<ExportedBuffer> {
        if self.ptr == DevicePtr::NULL {
            return Err(InvalidReason::ZeroBytes.error("a 0-byte buffer cannot be exported"));
        }
        Ok(ExportedBuffer {
            data: Active::pool_export_pointer(self.ptr)?,
            bytes: self.size_in_bytes() as u64,
        })
    }

    /// Maps a buffer exported by another process, from the pool imported
    /// from that process, as a buffer on `stream`. Dropping it frees the
    /// mapping on `stream` (stream-ordered, like any buffer); synchronise
    /// the stream before telling the exporter it may free.
    ///
    /// # Safety
    /// `exported` comes from [`DeviceBuffer::export`] on an allocation of
    /// `pool`'s exporter, whose allocation has completed on the exporter's
    /// stream and stays allocated until this buffer is dropped and its free
    /// has completed (the importer frees first).
    ///
    /// The size in `exported` is trusted: the runtime maps the allocation
    /// without telling the importer its extent, so every safe method of the
    /// returned buffer relies on `exported.size_in_bytes()` being at most the
    /// size of the exported allocation. Take it only from the exporter's
    /// `export`, over a channel that delivers the wire form unchanged.
    pub unsafe fn import(pool: &MemPool, exported: &ExportedBuffer, stream: &Stream) -> Result<Self> {
        let bytes = usize::try_from(exported.bytes)
            .map_err(|_| InvalidReason::SizeOverflow.error("exported size too large"))?;
        let size = size_of::<T>();
        if size == 0 || bytes % size != 0 {
            return Err(Error::invalid(format!(
                "{bytes} exported bytes are not a whole number of {size}-byte elements"
            )));
        }
        if pool.device() != stream.device() {
            return Err(
                InvalidReason::WrongDevice.error("import the buffer on a stream of the pool's device")
            );
        }
        let ptr = Active::pool_import_pointer(pool.raw(), &exported.data)?;
        let origin = Origin {
            pool: Some(pool.clone()),
            ..Origin::CURRENT_POOL
        };
        Ok(Self::wrap(ptr, bytes / size, stream, origin))
    }
}

/// What names a buffer for another process: the runtime's 64 opaque bytes
/// and the size. Send [`ExportedBuffer::to_bytes`] over any channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportedBuffer {
    data: [u8; 64],
    bytes: u64,
}

impl ExportedBuffer {
    /// Size of the wire form.
    pub const WIRE_SIZE: usize = 72;

    /// The wire form: the 64 runtime bytes, then the size (little-endian).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_SIZE] {
        let mut out = [0u8; Self::WIRE_SIZE];
        out[..64].copy_from_slice(&self.data);
        out[64..].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    /// Reads the wire form back.
    pub fn from_bytes(wire: &[u8; Self::WIRE_SIZE]) -> ExportedBuffer {
        let mut data = [0u8; 64];
        data.copy_from_slice(&wire[..64]);
        let mut size = [0u8; 8];
        size.copy_from_slice(&wire[64..]);
        ExportedBuffer {
            data,
            bytes: u64::from_le_bytes(size),
        }
    }

    /// Size of the exported allocation in bytes.
    pub fn size_in_bytes(&self) -> u64 {
        self.bytes
    }
}
