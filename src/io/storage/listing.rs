//! Listing input in object storage as the file system is listed: an object, a
//! "directory" (every object under `key/`), or a glob over keys; names of which a
//! component starts with `_` or `.` (`_SUCCESS`, `_temporary/...`) are skipped.
//!
//! Invariants: the result is sorted by key; the lengths a listing saw are remembered
//! (at most [`MAX_REMEMBERED`] of them), so planning splits asks the store again only
//! for objects it did not list.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use futures_util::TryStreamExt;
use object_store::ObjectStoreExt;

use super::{block_on, storage_error, ObjectUrl};
use crate::error::{EmberError, Result};

/// Object lengths remembered from listings.
const MAX_REMEMBERED: usize = 1 << 20;

fn lengths() -> &'static Mutex<HashMap<String, u64>> {
    static LENGTHS: OnceLock<Mutex<HashMap<String, u64>>> = OnceLock::new();
    LENGTHS.get_or_init(Default::default)
}

fn remember(url: &ObjectUrl, len: u64) {
    let mut m = lengths().lock().unwrap_or_else(|e| e.into_inner());
    if m.len() >= MAX_REMEMBERED {
        m.clear();
    }
    m.insert(url.to_string(), len);
}

/// The length of the object at `url`.
pub fn remote_len(url: &ObjectUrl) -> Result<u64> {
    if let Some(len) = lengths()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&url.to_string())
    {
        return Ok(*len);
    }
    let (store, location) = (url.store()?, url.location());
    let meta =
        block_on(async move { store.head(&location).await }).map_err(|e| storage_error(url, e))?;
    remember(url, meta.size);
    Ok(meta.size)
}

/// Whether a key below `base` is hidden (a component starts with `_` or `.`).
fn hidden(relative: &str) -> bool {
    relative
        .split('/')
        .any(|c| c.starts_with('_') || c.starts_with('.'))
}

/// Every object `piece` (one `s3://` input path) names, sorted; `InputNotFound` if none.
pub fn list_remote(piece: &str) -> Result<Vec<PathBuf>> {
    let url = ObjectUrl::parse(piece)?;
    let store = url.store()?;
    let glob_at = url.key.find(['*', '?', '[']);
    // An object of exactly this key is a file.
    if glob_at.is_none() && !url.key.is_empty() {
        let (s, location) = (store.clone(), url.location());
        match block_on(async move { s.head(&location).await }) {
            Ok(meta) => {
                remember(&url, meta.size);
                return Ok(vec![PathBuf::from(url.to_string())]);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(storage_error(&url, e)),
        }
    }
    // The directory to list: the key, or the part of a glob before its first pattern.
    let (dir, pattern) = match glob_at {
        None => (url.key.clone(), None),
        Some(at) => {
            let dir = url.key[..at].rsplit_once('/').map_or("", |(d, _)| d);
            let pattern = glob::Pattern::new(&url.key)
                .map_err(|e| EmberError::Config(format!("invalid glob pattern {piece:?}: {e}")))?;
            (dir.to_string(), Some(pattern))
        }
    };
    let prefix = (!dir.is_empty()).then(|| object_store::path::Path::from(dir.as_str()));
    let s = store.clone();
    let metas: Vec<object_store::ObjectMeta> =
        block_on(async move { s.list(prefix.as_ref()).try_collect().await })
            .map_err(|e| storage_error(&url, e))?;
    let mut out = Vec::new();
    for meta in metas {
        let key = meta.location.to_string();
        let relative = key
            .strip_prefix(dir.as_str())
            .unwrap_or(&key)
            .trim_start_matches('/');
        if hidden(relative) {
            continue;
        }
        if let Some(p) = &pattern {
            if !p.matches(&key) {
                continue;
            }
        }
        let object = ObjectUrl {
            bucket: url.bucket.clone(),
            key,
        };
        remember(&object, meta.size);
        out.push(PathBuf::from(object.to_string()));
    }
    if out.is_empty() {
        return Err(EmberError::InputNotFound {
            path: piece.to_string(),
        });
    }
    out.sort();
    Ok(out)
}
