//! `storage:` shuffle durability, the job side: committing a map output's copy to the
//! shuffle's stored directory (a directory every executor sees, one per application),
//! or to an `s3://` prefix (`stored_remote`, with the `s3` feature). In a directory the
//! copies have the shuffle files' own names, so a released shuffle's copies go with
//! [`ember_shuffle::remove_shuffle_files`] ([`remove_copies`], `cleaner::removing_stored`).
//!
//! Invariants:
//! * A copy is committed the way the local output is: written to a temporary name in the
//!   same directory, synced, then renamed to `shuffle_S_M.data`, so a reader sees a whole
//!   earlier attempt's copy or this one, never a part. Only then does the map task report
//!   `MapStatus::stored`, so what the driver relies on is on the storage.
//! * The copy is byte for byte the local output (blocks, then their index with crc32s):
//!   a reducer reads it with the same reader and checks the same checksums, and a
//!   missing or damaged copy is a typed fetch failure, after which lineage recomputes
//!   the output.
//! * Directories are made `0700` and copies `0600`: only the uid the application's
//!   tasks run as reads them.
//! * A copy is written past the page cache where the file system allows
//!   (`ember_shuffle::cold_copy`): it is read only if its writer is lost.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use ember_proto::ShuffleDependency;
use ember_shuffle::cold_copy::ColdFile;

use crate::error::{EmberError, Result};

/// Bytes read from the local output at a time while copying it.
const COPY_BUFFER_BYTES: usize = 256 * 1024;

/// The stored directory of `dep`, if its shuffle is stored.
pub(crate) fn stored_dir(dep: &ShuffleDependency) -> Option<&Path> {
    (!dep.stored_dir.is_empty()).then(|| Path::new(&dep.stored_dir))
}

/// Stores map output `map` of `dep`'s shuffle if the shuffle is stored: `true` once its
/// copy is committed. A copy that cannot be made is not a task failure: it is logged
/// (naming the directory and the error) and the output stays local only, with lineage
/// as its fallback, as under `local` durability. `writer` names the executor in the
/// copy's temporary name (executors in containers may share a pid).
pub(crate) fn store_map_output(
    shuffle_dir: &Path,
    dep: &ShuffleDependency,
    map: u32,
    writer: &str,
) -> bool {
    let Some(dir) = stored_dir(dep) else {
        return false;
    };
    let copied = if crate::io::storage::is_remote(dir) {
        upload(shuffle_dir, dir, dep.shuffle_id, map)
    } else {
        copy_map_output(shuffle_dir, dir, dep.shuffle_id, map, writer)
    };
    match copied {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("{e}; the output stays on its executor only");
            false
        }
    }
}

/// Uploads map output `map` of shuffle `shuffle_id` to the `s3://` prefix `prefix`.
#[cfg(feature = "s3")]
fn upload(shuffle_dir: &Path, prefix: &Path, shuffle_id: u32, map: u32) -> Result<()> {
    super::stored_remote::upload_copy(shuffle_dir, prefix, shuffle_id, map)
}

#[cfg(not(feature = "s3"))]
fn upload(_: &Path, prefix: &Path, _: u32, _: u32) -> Result<()> {
    Err(crate::io::storage::s3_disabled(prefix))
}

/// Removes the stored copies of `shuffle_ids` under `store` (a directory or an `s3://`
/// prefix); how many files (or shuffles' prefixes) went. Errors are logged.
pub(crate) fn remove_copies(store: &Path, shuffle_ids: &[u32]) -> usize {
    if !crate::io::storage::is_remote(store) {
        return ember_shuffle::remove_shuffle_files(store, shuffle_ids);
    }
    #[cfg(feature = "s3")]
    return super::stored_remote::delete_copies(store, shuffle_ids);
    #[cfg(not(feature = "s3"))]
    0
}

/// Removes an application's whole store (its context ended). Errors are logged.
pub(crate) fn remove_store(store: &Path) {
    let result = if crate::io::storage::is_remote(store) {
        crate::io::storage::ObjectUrl::parse(store)
            .and_then(|url| crate::io::storage::delete_prefix(&url))
            .map_err(|e| e.to_string())
    } else {
        match fs::remove_dir_all(store) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        }
    };
    if let Err(e) = result {
        // Best effort: the client may not see the store the executors share.
        tracing::warn!(store = %store.display(), "removing the stored shuffle outputs: {e}");
    }
}

/// The records of block `id` of its stored copy under `store` (a directory or an
/// `s3://` prefix), checked as any block is.
pub(crate) fn open_copy_block<T: serde::de::DeserializeOwned>(
    store: &Path,
    id: &ember_shuffle::BlockId,
) -> std::result::Result<ember_shuffle::BlockRecords<T>, ember_shuffle::ShuffleError> {
    if !crate::io::storage::is_remote(store) {
        return ember_shuffle::open_file_block_records::<T>(store, id);
    }
    #[cfg(feature = "s3")]
    return super::stored_remote::open_copy_block(store, id);
    #[cfg(not(feature = "s3"))]
    Err(id.fetch_failed(crate::io::storage::s3_disabled(store).to_string()))
}

/// Copies map output `map` of shuffle `shuffle_id` from `shuffle_dir` to the stored
/// directory `dir` and commits it.
fn copy_map_output(
    shuffle_dir: &Path,
    dir: &Path,
    shuffle_id: u32,
    map: u32,
    writer: &str,
) -> Result<()> {
    let from = ember_shuffle::data_path(shuffle_dir, shuffle_id, map);
    let to = ember_shuffle::data_path(dir, shuffle_id, map);
    let failed = |what: &str, e: std::io::Error| {
        EmberError::io(
            dir,
            std::io::Error::new(
                e.kind(),
                format!("storing map output {map} of shuffle {shuffle_id}: {what}: {e}"),
            ),
        )
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| failed("making the directory", e))?;
    let mut src = fs::File::open(&from).map_err(|e| failed("opening the local output", e))?;
    let writer: String = writer
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    let tmp = dir.join(format!(
        ".{}.tmp-{writer}-{}-{}",
        to.file_name().and_then(|n| n.to_str()).unwrap_or("shuffle"),
        std::process::id(),
        unique()
    ));
    let result = (|| {
        // A cold copy (read only if its writer is lost): past the page cache where the
        // file system allows.
        let mut out = ColdFile::create(&tmp, 0o600).map_err(|e| failed("creating the copy", e))?;
        let mut src = std::io::BufReader::with_capacity(COPY_BUFFER_BYTES, &mut src);
        std::io::copy(&mut src, &mut out).map_err(|e| failed("copying", e))?;
        let out = out.finish().map_err(|e| failed("copying", e))?;
        out.sync_all().map_err(|e| failed("syncing the copy", e))?;
        fs::rename(&tmp, &to).map_err(|e| failed("committing the copy", e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A number no other copy made by this process uses.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dep(stored: &Path) -> ShuffleDependency {
        ShuffleDependency {
            shuffle_id: 7,
            stored_dir: stored.to_str().unwrap().to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn a_stored_copy_is_the_local_output_committed_private_and_removed_on_release() {
        let tmp = tempfile::tempdir().unwrap();
        let local = tmp.path().join("local");
        fs::create_dir_all(&local).unwrap();
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        fs::write(ember_shuffle::data_path(&local, 7, 3), &bytes).unwrap();
        let stored = tmp.path().join("shared").join("app-1");
        assert!(store_map_output(&local, &dep(&stored), 3, "executor-1"));
        let copy = ember_shuffle::data_path(&stored, 7, 3);
        assert_eq!(fs::read(&copy).unwrap(), bytes);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&copy), 0o600);
        assert_eq!(mode(&stored), 0o700);
        // Nothing but the committed copy is left behind.
        let names: Vec<String> = fs::read_dir(&stored)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["shuffle_7_3.data"]);
        // Another shuffle's copy survives the release of this one.
        fs::write(ember_shuffle::data_path(&stored, 8, 0), b"x").unwrap();
        assert_eq!(ember_shuffle::remove_shuffle_files(&stored, &[7]), 1);
        assert!(!copy.exists());
        assert!(ember_shuffle::data_path(&stored, 8, 0).exists());
    }

    #[test]
    fn a_shuffle_without_a_stored_dir_is_not_copied_and_a_failed_copy_is_not_stored() {
        let tmp = tempfile::tempdir().unwrap();
        let plain = ShuffleDependency::default();
        assert!(!store_map_output(tmp.path(), &plain, 0, "e"));
        let stored = tmp.path().join("shared");
        // No local output to copy: not stored, and the task goes on.
        assert!(!store_map_output(tmp.path(), &dep(&stored), 5, "e"));
        let e = copy_map_output(tmp.path(), &stored, 7, 5, "e")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("map output 5 of shuffle 7") && e.contains("opening the local output"),
            "{e}"
        );
        let leftovers = fs::read_dir(&stored).map(|d| d.count()).unwrap_or(0);
        assert_eq!(leftovers, 0);
    }
}
