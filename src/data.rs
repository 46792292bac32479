//! The bounds on what can flow through an RDD.
//!
//! Records cross task, stage and process boundaries: they are serialised into shuffle
//! files, cached, and sent back to the driver, so every record type is serde-serialisable
//! and owned (`'static`). Keys of pair operators additionally hash and compare.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::hash::Hash;

/// A record type an RDD can hold.
pub trait Data: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Data for T {}

/// A record type usable as a key of a pair RDD (hash partitioning, grouping).
pub trait Key: Data + Hash + Eq {}
impl<T: Data + Hash + Eq> Key for T {}

/// Records per batch handed between pipelined operators (one dynamic call per batch).
pub(crate) const BATCH: usize = 1024;
