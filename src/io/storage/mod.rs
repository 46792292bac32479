//! Object storage (`s3://bucket/key` paths) for every file source and sink, through
//! the arrow project's `object_store` crate (the `s3` feature); local paths go to the
//! file system as before. Without the `s3` feature an `s3://` path is an error naming
//! the feature ([`s3_disabled`]), from the same functions.
//!
//! An `s3://` path travels through the plan as a `PathBuf` holding the URL text, so
//! the sources and sinks that take paths take it unchanged; [`is_remote`] tells the two
//! apart. Stores are configured by the usual AWS environment variables of the process
//! that reads or writes (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`): in a cluster, the
//! executors' as well as the client's.
//!
//! Invariants: every request runs on one I/O runtime of the process (`store::block_on`),
//! callable from any thread; every error names the `s3://` URL it concerns; keys are
//! used as they are (never percent-encoded), so what a listing returns opens.

mod input_file;
#[cfg(feature = "s3")]
mod listing;
mod part_output;
#[cfg(feature = "s3")]
mod remote_file;
#[cfg(feature = "s3")]
mod store;
#[cfg(feature = "s3")]
mod upload;
#[cfg(not(feature = "s3"))]
mod without_s3;

use std::path::Path;

use crate::error::{EmberError, Result};

pub use input_file::InputFile;
#[cfg(feature = "s3")]
pub use listing::{list_remote, listed_len, remote_len};
pub use part_output::PartOutput;
#[cfg(feature = "s3")]
pub use remote_file::RemoteFile;
#[cfg(feature = "s3")]
pub use store::block_on;
#[cfg(feature = "s3")]
pub use upload::{copy_object, delete_prefix, prefix_is_empty, put_bytes, upload_file};
#[cfg(not(feature = "s3"))]
pub use without_s3::{
    copy_object, delete_prefix, list_remote, prefix_is_empty, put_bytes, upload_file,
};

/// The scheme of the paths this module reads and writes.
pub const S3: &str = "s3://";

/// Whether `path` names an object in object storage (`s3://...`).
pub fn is_remote(path: impl AsRef<Path>) -> bool {
    path.as_ref().to_str().is_some_and(|p| p.starts_with(S3))
}

/// An object (or a prefix of objects): `s3://bucket/key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectUrl {
    pub bucket: String,
    /// Without a leading `/`; may be empty (the whole bucket).
    pub key: String,
}

impl ObjectUrl {
    /// Parses `s3://bucket/key`.
    pub fn parse(url: impl AsRef<Path>) -> Result<Self> {
        let text = url.as_ref().to_string_lossy();
        let rest = text.strip_prefix(S3).ok_or_else(|| {
            EmberError::Config(format!("not an s3:// URL: {}", crate::io::excerpt(&text)))
        })?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(EmberError::Config(format!(
                "no bucket in {}",
                crate::io::excerpt(&text)
            )));
        }
        Ok(ObjectUrl {
            bucket: bucket.to_string(),
            key: key.trim_matches('/').to_string(),
        })
    }

    /// `s3://bucket/key/name`.
    pub fn join(&self, name: &str) -> ObjectUrl {
        let key = if self.key.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.key)
        };
        ObjectUrl {
            bucket: self.bucket.clone(),
            key,
        }
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{S3}{}/{}", self.bucket, self.key)
    }
}

/// The error for `path`, an `s3://` path, in a build without the `s3` feature.
pub fn s3_disabled(path: impl AsRef<Path>) -> EmberError {
    EmberError::Config(format!(
        "{}: s3:// paths need ember's `s3` feature (features = [\"s3\"] on the ember \
         dependency in Cargo.toml)",
        crate::io::excerpt(&path.as_ref().to_string_lossy())
    ))
}
