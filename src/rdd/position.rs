//! `LinePosition`: where a line of a text file starts, cheap enough to attach to every
//! line.
//!
//! In memory a position is a small file id plus a byte offset (16 bytes, no reference
//! count to touch per line); the id indexes a process-wide registry of the file paths this
//! process has read. On the wire a position carries its path, so it means the same thing
//! in any process that deserialises it.
//!
//! Invariant: ids are only ever added to the registry, never reused, so an id stays valid
//! for the life of the process.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Result;
use crate::io::text_input::line_number_at;

#[derive(Default)]
struct Registry {
    paths: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The id of `path` in this process's registry (registering it the first time).
pub(crate) fn file_id(path: &str) -> u32 {
    if let Some(id) = registry().read().expect("file registry").ids.get(path) {
        return *id;
    }
    let mut reg = registry().write().expect("file registry");
    if let Some(id) = reg.ids.get(path) {
        return *id;
    }
    let id = reg.paths.len() as u32;
    let path: Arc<str> = Arc::from(path);
    reg.paths.push(path.clone());
    reg.ids.insert(path, id);
    id
}

fn path_of(id: u32) -> Arc<str> {
    registry().read().expect("file registry").paths[id as usize].clone()
}

/// Where a line of a text file starts: the file and the byte offset of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinePosition {
    file: u32,
    offset: u64,
}

impl LinePosition {
    pub(crate) fn new(file: u32, offset: u64) -> Self {
        LinePosition { file, offset }
    }

    /// The file's path.
    pub fn file(&self) -> Arc<str> {
        path_of(self.file)
    }

    /// Byte offset of the line's first byte in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The 1-based line number (reads the file up to the line; meant for error messages).
    pub fn line_number(&self) -> Result<u64> {
        line_number_at(std::path::Path::new(&*self.file()), self.offset)
    }
}

impl std::fmt::Display for LinePosition {
    /// `file:line`, or `file at byte offset N` if the file cannot be read again.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line_number() {
            Ok(n) => write!(f, "{}:{}", self.file(), n),
            Err(_) => write!(f, "{} at byte offset {}", self.file(), self.offset),
        }
    }
}

impl Serialize for LinePosition {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        (&*self.file(), self.offset).serialize(s)
    }
}

impl<'de> Deserialize<'de> for LinePosition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (path, offset) = <(String, u64)>::deserialize(d)?;
        Ok(LinePosition::new(file_id(&path), offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_positions_round_trip_through_their_path() {
        let a = file_id("/data/a.txt");
        let b = file_id("/data/b.txt");
        assert_ne!(a, b);
        assert_eq!(file_id("/data/a.txt"), a);
        let pos = LinePosition::new(b, 42);
        let bytes = postcard::to_allocvec(&pos).unwrap();
        let back: LinePosition = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, pos);
        assert_eq!(&*back.file(), "/data/b.txt");
        assert_eq!(back.offset(), 42);
        assert_eq!(
            pos.to_string(),
            "/data/b.txt at byte offset 42",
            "an unreadable file falls back to the offset"
        );
    }
}
