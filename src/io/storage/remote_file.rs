//! Reading an object as a file: [`RemoteFile`] (seekable, reading ahead in ranged
//! requests, and a Parquet `ChunkReader`); [`super::InputFile`] puts it and a local file
//! behind the same `Read + Seek`.
//!
//! Invariants: a `RemoteFile` requests only byte ranges inside the object (its length
//! is asked of the store when opened), and holds at most one such range; a reader's
//! first request is [`FIRST_READ`] bytes and each next one doubles, up to
//! [`READ_AHEAD`] (a Parquet page header costs a small request, a sequential scan soon
//! reads 8 MiB at a time); reads past the end return 0 bytes, as a file's do; a ranged
//! read (`get_bytes`) that the object cannot fill is an error naming the URL.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};

use super::listing::remote_len;
use super::store::{block_on, storage_error};
use super::ObjectUrl;
use crate::error::Result;

/// Most bytes fetched per request when reading sequentially.
pub const READ_AHEAD: u64 = 8 << 20;
/// Bytes of a reader's first request.
pub const FIRST_READ: u64 = 64 << 10;

/// An object opened for reading.
#[derive(Clone)]
pub struct RemoteFile {
    url: ObjectUrl,
    store: Arc<dyn ObjectStore>,
    len: u64,
    pos: u64,
    /// `buf` holds the object's bytes from `buf_at`.
    buf: Bytes,
    buf_at: u64,
    /// Bytes the next request asks for.
    ahead: u64,
}

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteFile({}, {} bytes)", self.url, self.len)
    }
}

impl RemoteFile {
    /// Opens `url` (asking the store for its length).
    pub fn open(url: &ObjectUrl) -> Result<Self> {
        let len = remote_len(url)?;
        Ok(RemoteFile {
            url: url.clone(),
            store: url.store()?,
            len,
            pos: 0,
            buf: Bytes::new(),
            buf_at: 0,
            ahead: FIRST_READ,
        })
    }

    pub fn url(&self) -> &ObjectUrl {
        &self.url
    }

    /// The object's length in bytes (as the store said when it was opened).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the object is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes `[start, start + len)` of the object (clipped to its end).
    pub fn range(&self, start: u64, len: u64) -> Result<Bytes> {
        let end = start.saturating_add(len).min(self.len);
        if start >= end {
            return Ok(Bytes::new());
        }
        let (store, location) = (self.store.clone(), self.url.location()?);
        block_on(async move { store.get_range(&location, start..end).await })
            .map_err(|e| storage_error(&self.url, e))
    }
}

impl Read for RemoteFile {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || out.is_empty() {
            return Ok(0);
        }
        let in_buf = self.pos >= self.buf_at && self.pos < self.buf_at + self.buf.len() as u64;
        if !in_buf {
            let want = self.ahead.max(out.len() as u64);
            self.ahead = (self.ahead * 2).min(READ_AHEAD);
            self.buf = self
                .range(self.pos, want)
                .map_err(|e| io::Error::other(e.to_string()))?;
            self.buf_at = self.pos;
            if self.buf.is_empty() {
                return Ok(0);
            }
        }
        let from = (self.pos - self.buf_at) as usize;
        let n = out.len().min(self.buf.len() - from);
        out[..n].copy_from_slice(&self.buf[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RemoteFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the start of the object",
            )
        })?;
        Ok(self.pos)
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::Length for RemoteFile {
    fn len(&self) -> u64 {
        self.len
    }
}

#[cfg(feature = "parquet")]
impl parquet::file::reader::ChunkReader for RemoteFile {
    type T = RemoteFile;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RemoteFile> {
        let mut r = self.clone();
        r.pos = start;
        r.buf = Bytes::new();
        r.ahead = FIRST_READ;
        Ok(r)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let bytes = self
            .range(start, length as u64)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))?;
        if bytes.len() != length {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "{}: {length} bytes wanted at offset {start}, the object has {} there",
                self.url,
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}
