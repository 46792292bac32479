//! Writing to object storage: uploading a finished local file (in parts when large),
//! copying, deleting a prefix (a sink's staged part is [`super::PartOutput`]).
//!
//! Invariants: an object becomes visible only whole (one `put`, or a multipart upload
//! completed after its last part; an upload that fails is aborted).

use std::io::Read;
use std::path::Path;

use futures_util::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};

use super::store::{block_on, storage_error};
use super::ObjectUrl;
use crate::error::{EmberError, Result};

/// Bytes per uploaded part (S3 wants at least 5 MiB for every part but the last).
const PART_BYTES: usize = 16 << 20;

/// Uploads local file `local` as the object `url`.
pub fn upload_file(local: &Path, url: &ObjectUrl) -> Result<()> {
    let mut file = std::fs::File::open(local).map_err(|e| EmberError::io(local, e))?;
    let mut chunk = vec![0u8; PART_BYTES];
    let first = read_full(&mut file, &mut chunk).map_err(|e| EmberError::io(local, e))?;
    let store = url.store()?;
    let location = url.location()?;
    if first < PART_BYTES {
        chunk.truncate(first);
        return block_on(async move { store.put(&location, PutPayload::from(chunk)).await })
            .map(|_| ())
            .map_err(|e| storage_error(url, e));
    }
    // The whole multipart upload on the I/O runtime (the file is read there too, a
    // part at a time), aborted if any step fails.
    let shown = local.to_path_buf();
    block_on(async move {
        let mut upload = store.put_multipart(&location).await.map_err(Step::Store)?;
        let mut n = first;
        let sent: std::result::Result<(), Step> = async {
            loop {
                upload
                    .put_part(PutPayload::from(chunk[..n].to_vec()))
                    .await
                    .map_err(Step::Store)?;
                n = read_full(&mut file, &mut chunk).map_err(Step::Local)?;
                if n == 0 {
                    return Ok(());
                }
            }
        }
        .await;
        let done = match sent {
            Ok(()) => upload.complete().await.map(|_| ()).map_err(Step::Store),
            Err(e) => Err(e),
        };
        if done.is_err() {
            // Parts of an upload that never completed would be kept (and billed).
            let _ = upload.abort().await;
        }
        done
    })
    .map_err(|e| match e {
        Step::Store(e) => storage_error(url, e),
        Step::Local(e) => EmberError::io(shown, e),
    })
}

/// Which side of an upload failed.
enum Step {
    Store(object_store::Error),
    Local(std::io::Error),
}

/// Fills `buf` as far as the file goes; returns how many bytes it holds.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Writes `bytes` as the object `url`.
pub fn put_bytes(url: &ObjectUrl, bytes: Vec<u8>) -> Result<()> {
    let (s, l) = (url.store()?, url.location()?);
    block_on(async move { s.put(&l, PutPayload::from(bytes)).await })
        .map(|_| ())
        .map_err(|e| storage_error(url, e))
}

/// Copies object `from` to `to` (same bucket or not: through the store of `to`).
pub fn copy_object(from: &ObjectUrl, to: &ObjectUrl) -> Result<()> {
    if from.bucket != to.bucket {
        return Err(EmberError::Config(format!(
            "cannot copy {from} to another bucket ({to})"
        )));
    }
    let (s, f, t) = (to.store()?, from.location()?, to.location()?);
    block_on(async move { s.copy(&f, &t).await }).map_err(|e| storage_error(to, e))
}

/// Every object at or under `url`.
fn objects_under(url: &ObjectUrl) -> Result<Vec<object_store::path::Path>> {
    let store = url.store()?;
    let prefix = (!url.key.is_empty()).then(|| url.location()).transpose()?;
    let s = store.clone();
    let metas: Vec<object_store::ObjectMeta> =
        block_on(async move { s.list(prefix.as_ref()).try_collect().await })
            .map_err(|e| storage_error(url, e))?;
    let mut out: Vec<object_store::path::Path> = metas.into_iter().map(|m| m.location).collect();
    if !url.key.is_empty() {
        let (s, l) = (store, url.location()?);
        let here = l.clone();
        if block_on(async move { s.head(&l).await }).is_ok() {
            out.push(here);
        }
    }
    Ok(out)
}

/// Whether no object is at or under `url`.
pub fn prefix_is_empty(url: &ObjectUrl) -> Result<bool> {
    Ok(objects_under(url)?.is_empty())
}

/// Deletes every object at or under `url`.
pub fn delete_prefix(url: &ObjectUrl) -> Result<()> {
    for location in objects_under(url)? {
        let s = url.store()?;
        let l = location.clone();
        match block_on(async move { s.delete(&l).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(storage_error(url, e)),
        }
    }
    Ok(())
}
