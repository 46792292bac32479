//! `s3://` paths in a build without the `s3` feature: the object storage functions of
//! [`super`] with the same signatures, each failing with [`super::s3_disabled`] naming
//! the path, so sources and sinks give the same clear error wherever they meet one.

use std::path::{Path, PathBuf};

use super::{s3_disabled, ObjectUrl};
use crate::error::Result;

/// Listing `piece` needs the `s3` feature.
pub fn list_remote(piece: &str) -> Result<Vec<PathBuf>> {
    Err(s3_disabled(piece))
}

/// Uploading needs the `s3` feature.
pub fn upload_file(_local: &Path, url: &ObjectUrl) -> Result<()> {
    Err(s3_disabled(url.to_string()))
}

/// Writing an object needs the `s3` feature.
pub fn put_bytes(url: &ObjectUrl, _bytes: Vec<u8>) -> Result<()> {
    Err(s3_disabled(url.to_string()))
}

/// Copying an object needs the `s3` feature.
pub fn copy_object(_from: &ObjectUrl, to: &ObjectUrl) -> Result<()> {
    Err(s3_disabled(to.to_string()))
}

/// Listing a prefix needs the `s3` feature.
pub fn prefix_is_empty(url: &ObjectUrl) -> Result<bool> {
    Err(s3_disabled(url.to_string()))
}

/// Deleting a prefix needs the `s3` feature.
pub fn delete_prefix(url: &ObjectUrl) -> Result<()> {
    Err(s3_disabled(url.to_string()))
}
