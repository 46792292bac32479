//! The job side of shuffles: which reducer a record goes to ([`partitioner`]), and
//! reading a reducer's blocks, local, remote or stored (`read`); `stored`: the copies of
//! `storage:` shuffle durability. The file format itself (data
//! files with their index at the end, frames, checksums) is the `ember-shuffle` crate, re-exported here.
//!
//! Invariant: every record a map task writes reaches exactly one reducer, the one its
//! partitioner names; a reducer reads every map output's block or fails with a typed
//! fetch failure naming the missing one.

pub mod partitioner;
pub(crate) mod read;
pub(crate) mod stored;
#[cfg(feature = "s3")]
pub(crate) mod stored_remote;
pub(crate) mod write;

pub use ember_shuffle::*;
pub use partitioner::{
    hash_partition, KeyPartitioner, Partitioner, PartitionerKind, RangePartitioner,
};
pub(crate) use read::{read_blocks, read_dependency_blocks, read_indexed_blocks, read_plain};
