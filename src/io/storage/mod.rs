//! Object storage (`s3://bucket/key` paths) for every file source and sink, through
//! the arrow project's `object_store` crate; local paths go to the file system as
//! before.
//!
//! An `s3://` path travels through the plan as a `PathBuf` holding the URL text, so
//! the sources and sinks that take paths take it unchanged; [`is_remote`] tells the two
//! apart. Stores are configured by the usual AWS environment variables of the process
//! that reads or writes (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`): in a cluster, the
//! executors' as well as the client's.
//!
//! Invariants: every request runs on one I/O runtime of the process ([`block_on`]),
//! callable from any thread; every error names the `s3://` URL it concerns; keys are
//! used as they are (never percent-encoded), so what a listing returns opens.

mod listing;
mod remote_file;
mod upload;

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;

use crate::error::{EmberError, Result};

pub use listing::{list_remote, listed_len, remote_len};
pub use remote_file::{InputFile, RemoteFile};
pub use upload::{copy_object, delete_prefix, prefix_is_empty, put_bytes, upload_file, PartOutput};

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

    /// The key as `object_store` names it: the key itself, never percent-encoded
    /// (a key listed from the store reads back as the same key).
    pub fn location(&self) -> Result<object_store::path::Path> {
        object_store::path::Path::parse(&self.key).map_err(|e| {
            EmberError::Config(format!(
                "{}: not a usable object key: {e}",
                crate::io::excerpt(&self.to_string())
            ))
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

    /// The store of this URL's bucket.
    pub fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        store(&self.bucket)
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{S3}{}/{}", self.bucket, self.key)
    }
}

/// The store of `bucket`, built once per process from the AWS environment variables.
fn store(bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    static STORES: OnceLock<Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>> =
        OnceLock::new();
    let mut stores = STORES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(s) = stores.get(bucket) {
        return Ok(s.clone());
    }
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| EmberError::Config(format!("object store for s3://{bucket}: {e}")))?;
    let s3: Arc<dyn ObjectStore> = Arc::new(s3);
    stores.insert(bucket.to_string(), s3.clone());
    Ok(s3)
}

/// Runs `fut` to completion on the process's I/O runtime, from any thread (also one of
/// another runtime's: the future is spawned there and waited for, never nested).
pub fn block_on<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ember-object-io")
            .enable_all()
            .build()
            .expect("the object storage I/O runtime")
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the object storage I/O runtime stopped")
}

/// An `object_store` error about `url` as ember's error.
pub(crate) fn storage_error(url: &ObjectUrl, e: object_store::Error) -> EmberError {
    match e {
        object_store::Error::NotFound { .. } => EmberError::InputNotFound {
            path: url.to_string(),
        },
        other => EmberError::io(url.to_string(), std::io::Error::other(other.to_string())),
    }
}
