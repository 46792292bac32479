//! [`PartOutput`], the file one attempt of a sink's task writes: the target itself for
//! a local path; for an `s3://` one (with the `s3` feature) a file staged under the
//! executor's work directory and uploaded when finished.
//!
//! Invariant: a staged local file is removed whether its upload succeeds or not; without
//! the `s3` feature an `s3://` target is an error saying so, before anything is written.

use std::path::{Path, PathBuf};

use super::{is_remote, upload_file, ObjectUrl};
use crate::error::{EmberError, Result};

/// The file one attempt of a sink's task writes: `target` itself when local, else a
/// staged file uploaded to `target` by [`finish`](Self::finish).
pub struct PartOutput {
    target: PathBuf,
    staged: Option<PathBuf>,
}

impl PartOutput {
    /// Where to write `target`; staging (for `s3://`) under `work_dir`.
    pub fn create(target: PathBuf, work_dir: &Path) -> Result<Self> {
        if !is_remote(&target) {
            return Ok(PartOutput {
                target,
                staged: None,
            });
        }
        if cfg!(not(feature = "s3")) {
            return Err(super::s3_disabled(&target));
        }
        let dir = work_dir.join("uploads");
        std::fs::create_dir_all(&dir).map_err(|e| EmberError::io(&dir, e))?;
        let staged = dir.join(format!("{:016x}", rand::random::<u64>()));
        Ok(PartOutput {
            target,
            staged: Some(staged),
        })
    }

    /// The local file to write (created by the caller).
    pub fn local(&self) -> &Path {
        self.staged.as_deref().unwrap_or(&self.target)
    }

    /// `e` naming the target rather than the staged file it was about.
    pub fn name_target(&self, e: EmberError) -> EmberError {
        let Some(staged) = &self.staged else {
            return e;
        };
        let (from, to) = (
            staged.display().to_string(),
            self.target.display().to_string(),
        );
        match e {
            EmberError::Io { path, source } if path == *staged => EmberError::Io {
                path: self.target.clone(),
                source,
            },
            EmberError::Corrupt { what, message } => EmberError::Corrupt {
                what: what.replace(&from, &to),
                message,
            },
            EmberError::SchemaMismatch {
                path,
                column,
                found,
                expected,
            } => EmberError::SchemaMismatch {
                path: path.replace(&from, &to),
                column,
                found,
                expected,
            },
            other => other,
        }
    }

    /// The written file is complete: uploads it if it is staged; returns the target.
    pub fn finish(mut self) -> Result<String> {
        if let Some(staged) = self.staged.take() {
            let uploaded = upload_file(&staged, &ObjectUrl::parse(&self.target)?);
            let _ = std::fs::remove_file(&staged);
            uploaded?;
        }
        Ok(self.target.to_string_lossy().into_owned())
    }
}

impl Drop for PartOutput {
    fn drop(&mut self) {
        if let Some(staged) = &self.staged {
            let _ = std::fs::remove_file(staged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "s3"))]
    #[test]
    fn without_the_s3_feature_an_s3_target_is_refused_naming_the_feature() {
        let work = tempfile::tempdir().unwrap();
        let target = PathBuf::from("s3://bucket/out/_temporary/j/part-00000.x");
        let e = PartOutput::create(target, work.path()).err().unwrap();
        let message = e.to_string();
        assert!(
            message.contains("s3://bucket/out/_temporary/j/part-00000.x"),
            "{message}"
        );
        assert!(message.contains("ember's `s3` feature"), "{message}");
        assert!(!work.path().join("uploads").exists(), "nothing staged");
    }

    #[cfg(feature = "s3")]
    #[test]
    fn a_staged_part_names_its_target_in_errors_and_leaves_no_file() {
        let work = tempfile::tempdir().unwrap();
        let target = PathBuf::from("s3://bucket/out/_temporary/j/part-00000.x");
        let part = PartOutput::create(target.clone(), work.path()).unwrap();
        let staged = part.local().to_path_buf();
        assert!(staged.starts_with(work.path().join("uploads")));
        std::fs::write(&staged, b"partial").unwrap();
        let e = part.name_target(EmberError::io(&staged, std::io::Error::other("disk full")));
        assert!(
            e.to_string()
                .contains("s3://bucket/out/_temporary/j/part-00000.x"),
            "{e}"
        );
        let e = part.name_target(EmberError::Corrupt {
            what: format!("Parquet file {} (writing)", staged.display()),
            message: "m".into(),
        });
        assert!(!e.to_string().contains("uploads"), "{e}");
        drop(part);
        assert!(
            !staged.exists(),
            "a part dropped unfinished removes its staged file"
        );
        // A local target is written in place and errors are left as they are.
        let local = PartOutput::create(work.path().join("p"), work.path()).unwrap();
        assert_eq!(local.local(), work.path().join("p"));
    }
}
