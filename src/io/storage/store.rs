//! The object_store side of [`ObjectUrl`] (feature `s3`): its key as a store location,
//! the store of its bucket (built once per process from the AWS environment variables),
//! the one I/O runtime every request runs on, and store errors as ember's.
//!
//! Invariants: every request runs on one I/O runtime of the process ([`block_on`]),
//! callable from any thread; stores are cached per bucket.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;

use super::ObjectUrl;
use crate::error::{EmberError, Result};

impl ObjectUrl {
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

    /// The store of this URL's bucket.
    pub fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        store(&self.bucket)
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
