//! [`InputFile`]: a file to read, on the local file system or (with the `s3` feature)
//! an object in object storage, behind the same `Read + Seek`.
//!
//! Invariant: errors name the path or URL; without the `s3` feature an `s3://` path is
//! an error saying so ([`super::s3_disabled`]), never a local file of that name.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::is_remote;
#[cfg(feature = "s3")]
use super::{listed_len, ObjectUrl, RemoteFile};
use crate::error::{EmberError, Result};

/// A file to read: on the local file system or in object storage.
#[derive(Debug)]
pub enum InputFile {
    Local(File),
    #[cfg(feature = "s3")]
    Remote(RemoteFile),
}

impl InputFile {
    /// Opens `path` (a local path or an `s3://` URL); errors name it.
    pub fn open(path: &Path) -> Result<Self> {
        if is_remote(path) {
            #[cfg(feature = "s3")]
            return Ok(InputFile::Remote(RemoteFile::open(&ObjectUrl::parse(
                path,
            )?)?));
            #[cfg(not(feature = "s3"))]
            return Err(super::s3_disabled(path));
        } else {
            File::open(path)
                .map(InputFile::Local)
                .map_err(|e| EmberError::io(path, e))
        }
    }

    /// The length of `path` in bytes (for an object, as the listing that found it saw
    /// it: for planning).
    pub fn len_of(path: &Path) -> Result<u64> {
        if is_remote(path) {
            #[cfg(feature = "s3")]
            return listed_len(&ObjectUrl::parse(path)?);
            #[cfg(not(feature = "s3"))]
            return Err(super::s3_disabled(path));
        } else {
            std::fs::metadata(path)
                .map(|m| m.len())
                .map_err(|e| EmberError::io(path, e))
        }
    }
}

impl Read for InputFile {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            InputFile::Local(f) => f.read(out),
            #[cfg(feature = "s3")]
            InputFile::Remote(r) => r.read(out),
        }
    }
}

impl Seek for InputFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        match self {
            InputFile::Local(f) => f.seek(to),
            #[cfg(feature = "s3")]
            InputFile::Remote(r) => r.seek(to),
        }
    }
}
