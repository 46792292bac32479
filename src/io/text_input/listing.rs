//! Listing input files: turning a user's input string (a file, a directory, a glob, or a
//! comma-separated list of those) into the files to read, as Hadoop's `FileInputFormat`
//! lists them.
//!
//! Invariants:
//! - Names starting with `_` or `.` (`_SUCCESS`, `.crc`, ...) are skipped in directory
//!   listings and glob results; a file named explicitly is always taken.
//! - Directories are listed non-recursively; every file listed is a regular file
//!   (symlinks followed): FIFOs, sockets and devices are refused, naming the path.
//! - [`list_input_files`] is sorted by path without duplicates;
//!   [`list_input_files_as_listed`] keeps a comma-separated list's order and repeats.
//! - A relative path is made absolute against this process's working directory, and
//!   every error names the path (or pattern) it concerns.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{EmberError, Result};

/// Resolve a user's input: a file, a directory (its files, non-recursive), or a glob pattern
/// (e.g. `/data/part-*`). Names starting with `_` or `.` are skipped in directory listings and
/// glob results (a file named explicitly is always taken). A comma-separated list of such paths
/// is accepted too. The result is sorted by path and free of duplicates.
///
/// A missing path, or a glob matching no visible entry, is [`EmberError::InputNotFound`]; an
/// existing directory without visible files yields no files. An invalid glob pattern is
/// [`EmberError::Config`]. Unreadable paths are [`EmberError::Io`] naming the path.
pub fn list_input_files(path: &str) -> Result<Vec<PathBuf>> {
    let mut files = list_pieces(path)?.concat();
    files.sort();
    files.dedup();
    tracing::debug!(input = path, files = files.len(), "listed input files");
    Ok(files)
}

/// [`list_input_files`] as Hadoop's `FileInputFormat` (and so Spark's `textFile`) reads
/// a comma-separated list: the pieces in the order listed, each expanded as there (a
/// directory's or glob's files sorted by path), and a file listed twice is read twice
/// (`"a,a"` is `a`, then `a` again). The same errors.
pub fn list_input_files_as_listed(path: &str) -> Result<Vec<PathBuf>> {
    let files = list_pieces(path)?.concat();
    tracing::debug!(input = path, files = files.len(), "listed input files");
    Ok(files)
}

/// The files of each piece of a comma-separated input, piece by piece in the order
/// listed, each piece's sorted by path without duplicates; an input of no pieces is
/// [`EmberError::InputNotFound`].
fn list_pieces(path: &str) -> Result<Vec<Vec<PathBuf>>> {
    let mut pieces = Vec::new();
    for piece in path.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let mut files = Vec::new();
        if crate::io::storage::is_remote(piece) {
            files.extend(crate::io::storage::list_remote(piece)?);
        } else {
            list_one(piece, &mut files)?;
        }
        files.sort();
        files.dedup();
        pieces.push(files);
    }
    if pieces.is_empty() {
        return Err(EmberError::InputNotFound {
            path: path.to_string(),
        });
    }
    Ok(pieces)
}

/// Lists one (non-comma) input path into `out`. A relative path is made absolute
/// against this process's working directory first: tasks may run in other processes
/// (cluster workers) with other working directories.
fn list_one(piece: &str, out: &mut Vec<PathBuf>) -> Result<()> {
    let abs = std::path::absolute(piece).map_err(|e| EmberError::io(piece, e))?;
    let piece = abs.to_str().unwrap_or(piece);
    let p = Path::new(piece);
    match fs::metadata(p) {
        // An existing path is taken literally, even if it contains glob characters.
        Ok(meta) if meta.is_dir() => list_dir(p, out),
        Ok(meta) => {
            check_regular(p, &meta)?;
            out.push(p.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if !piece.contains(['*', '?', '[']) {
                return Err(EmberError::InputNotFound {
                    path: piece.to_string(),
                });
            }
            let matches = glob::glob(piece)
                .map_err(|e| EmberError::Config(format!("invalid glob pattern {piece:?}: {e}")))?;
            let mut found = false;
            for entry in matches {
                let m = entry.map_err(|e| {
                    let path = e.path().to_path_buf();
                    EmberError::io(path, std::io::Error::from(e))
                })?;
                if is_hidden(&m) {
                    continue;
                }
                found = true;
                let meta = fs::metadata(&m).map_err(|e| EmberError::io(&m, e))?;
                if meta.is_dir() {
                    list_dir(&m, out)?;
                } else {
                    check_regular(&m, &meta)?;
                    out.push(m);
                }
            }
            if found {
                Ok(())
            } else {
                Err(EmberError::InputNotFound {
                    path: piece.to_string(),
                })
            }
        }
        Err(e) => Err(EmberError::io(p, e)),
    }
}

/// Pushes the visible regular files (symlinks followed) directly inside `dir`.
fn list_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| EmberError::io(dir, e))? {
        let entry = entry.map_err(|e| EmberError::io(dir, e))?;
        let path = entry.path();
        if is_hidden(&path) {
            continue;
        }
        let meta = fs::metadata(&path).map_err(|e| EmberError::io(&path, e))?;
        // Subdirectories are not descended into (Hadoop's non-recursive listing).
        if !meta.is_dir() {
            check_regular(&path, &meta)?;
            out.push(path);
        }
    }
    Ok(())
}

/// Refuses what is not a regular file: reading a FIFO blocks until a writer comes (a
/// job that never ends), a device or socket is not input.
fn check_regular(path: &Path, meta: &fs::Metadata) -> Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    Err(EmberError::io(
        path,
        std::io::Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device); input must be regular files",
        ),
    ))
}

/// Hadoop's hidden-file rule: the last component starts with `_` or `.`.
fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .map(|n| {
            let b = n.as_encoded_bytes();
            b.first() == Some(&b'_') || b.first() == Some(&b'.')
        })
        .unwrap_or(false)
}
