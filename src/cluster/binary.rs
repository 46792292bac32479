//! The identity of the running job binary: the SHA-256 of its executable file, the
//! name under which the driver stores it and executors run it.
//!
//! Invariant: computed once per process from `std::env::current_exe()`, so every plan
//! this process builds names the same binary.

use std::io::Read;
use std::path::PathBuf;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::error::{EmberError, Result};

/// Path and lower-case hex SHA-256 of this process's executable.
pub(crate) fn current() -> Result<&'static (PathBuf, String)> {
    static ID: OnceLock<std::result::Result<(PathBuf, String), String>> = OnceLock::new();
    ID.get_or_init(|| {
        let path = std::env::current_exe()
            .map_err(|e| format!("cannot find this program's executable: {e}"))?;
        let hash =
            sha256_file(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok((path, hash))
    })
    .as_ref()
    .map_err(|e| EmberError::Cluster(e.clone()))
}

/// Lower-case hex SHA-256 of a file's contents.
pub(crate) fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(ember_proto::digest::to_hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_a_file_like_sha256sum() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
