//! Listing input in object storage as the file system is listed: an object, a
//! "directory" (the objects directly under `key/`, not those in deeper "directories"),
//! or a glob over keys whose `*` and `?` never match a `/`; names of which a component
//! starts with `_` or `.` (`_SUCCESS`, `_temporary/...`) and directory markers (keys
//! ending in `/`) are skipped.
//!
//! Invariants: the result is sorted by key; the lengths a listing saw are remembered
//! (at most [`MAX_REMEMBERED`] of them) for planning splits right after it
//! ([`listed_len`]); opening an object for reading always asks the store, so a length
//! remembered here never outlives a rewrite of the object in what a task reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use futures_util::TryStreamExt;
use object_store::ObjectStoreExt;

use super::store::{block_on, storage_error};
use super::ObjectUrl;
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

/// The length of the object at `url` as the last listing saw it, or as the store says
/// now (for planning: sizes of the objects a listing just returned).
pub fn listed_len(url: &ObjectUrl) -> Result<u64> {
    if let Some(len) = lengths()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&url.to_string())
    {
        return Ok(*len);
    }
    remote_len(url)
}

/// The length of the object at `url`, asked of the store.
pub fn remote_len(url: &ObjectUrl) -> Result<u64> {
    let (store, location) = (url.store()?, url.location()?);
    let meta =
        block_on(async move { store.head(&location).await }).map_err(|e| storage_error(url, e))?;
    Ok(meta.size)
}

/// Whether a key below the listed directory is hidden (a component starts with `_` or
/// `.`) or a directory marker (empty, or ending in `/`).
fn skipped(relative: &str) -> bool {
    relative.is_empty()
        || relative.ends_with('/')
        || relative
            .split('/')
            .any(|c| c.starts_with('_') || c.starts_with('.'))
}

/// Every object `piece` (one `s3://` input path) names, sorted; `InputNotFound` if none.
pub fn list_remote(piece: &str) -> Result<Vec<PathBuf>> {
    let url = ObjectUrl::parse(piece)?;
    let store = url.store()?;
    let glob_at = url.key.find(['*', '?', '[']);
    // The directory listed: the key itself, or a glob's part before its first pattern
    // (everything under it is listed and matched below).
    let base = match glob_at {
        None => url.key.clone(),
        Some(at) => url.key[..at]
            .rsplit_once('/')
            .map_or("", |(d, _)| d)
            .to_string(),
    };
    let prefix = (!base.is_empty())
        .then(|| {
            ObjectUrl {
                bucket: url.bucket.clone(),
                key: base.clone(),
            }
            .location()
        })
        .transpose()?;
    let s = store.clone();
    let metas: Vec<object_store::ObjectMeta> = match glob_at {
        // A directory: its own objects only.
        None => {
            block_on(async move { s.list_with_delimiter(prefix.as_ref()).await }).map(|l| l.objects)
        }
        Some(_) => block_on(async move { s.list(prefix.as_ref()).try_collect().await }),
    }
    .map_err(|e| storage_error(&url, e))?;
    let pattern = glob_at
        .map(|_| {
            glob::Pattern::new(&url.key)
                .map_err(|e| EmberError::Config(format!("invalid glob pattern {piece:?}: {e}")))
        })
        .transpose()?;
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let mut out = Vec::new();
    for meta in metas {
        let key = meta.location.as_ref().to_string();
        let relative = key
            .strip_prefix(base.as_str())
            .unwrap_or(&key)
            .trim_start_matches('/');
        if skipped(relative) {
            continue;
        }
        if let Some(p) = &pattern {
            if !p.matches_with(&key, options) {
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
    // Not a directory with objects of its own: an object of exactly this key is a file
    // (asked second, so that a directory marker object is not taken for one).
    if out.is_empty() && glob_at.is_none() && !url.key.is_empty() {
        let (s, location) = (store.clone(), url.location()?);
        match block_on(async move { s.head(&location).await }) {
            Ok(meta) => {
                remember(&url, meta.size);
                return Ok(vec![PathBuf::from(url.to_string())]);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(storage_error(&url, e)),
        }
    }
    if out.is_empty() {
        return Err(EmberError::InputNotFound {
            path: piece.to_string(),
        });
    }
    out.sort();
    Ok(out)
}
