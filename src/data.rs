//! The bounds on what can flow through an RDD, and how it is serialised.
//!
//! Records cross task, stage and process boundaries: they are serialised into shuffle
//! files, cached, and sent back to the driver, so every record type is serde-serialisable
//! and owned (`'static`). Keys of pair operators additionally hash and compare.
//! [`encode`] / [`decode`] (postcard) serialise records, partition state and plan
//! values; a decode failure is a typed error naming what was being read.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::hash::Hash;

use crate::error::{EmberError, Result};

/// A record type an RDD can hold.
///
/// **Records must own their data.** A record that borrows (`(1, "x")` is a
/// `(i32, &'static str)`, a `&[u8]`, a struct with a `&str` field) cannot be read back
/// from a shuffle file or the wire, and the compiler says so as
///
/// ```text
/// error: implementation of `Deserialize` is not general enough
///   = note: `(i32, &str)` must implement `Deserialize<'0>`, for any lifetime `'0`...
/// ```
///
/// Use owned types: `String` for `&str` (`"x".to_string()`), `Vec<u8>` for `&[u8]`,
/// `Box<T>`/`T` for `&T`.
///
/// ```compile_fail
/// let ctx = ember::Context::local(1).unwrap();
/// let _ = ctx.parallelize(vec![(1, "x")], 1); // borrowed &str: does not compile
/// ```
///
/// ```
/// let ctx = ember::Context::local(1).unwrap();
/// let owned = ctx.parallelize(vec![(1, "x".to_string())], 1);
/// assert_eq!(owned.collect().unwrap(), vec![(1, "x".to_string())]);
/// ```
pub trait Data: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Data for T {}

/// A record type usable as a key of a pair RDD (hash partitioning, grouping).
pub trait Key: Data + Hash + Eq {}
impl<T: Data + Hash + Eq> Key for T {}

/// Records per batch handed between pipelined operators (one dynamic call per batch).
pub(crate) const BATCH: usize = 1024;

/// Serialises a record, a partition's state or a plan value (postcard); `what` names it
/// in the panic of a type whose `Serialize` fails.
pub(crate) fn encode<S: serde::Serialize>(what: &str, s: &S) -> Vec<u8> {
    postcard::to_allocvec(s)
        .unwrap_or_else(|e| panic!("ember: cannot serialise the state of {what}: {e}"))
}

/// Deserialises what [`encode`] wrote; `what` names it in the error.
pub(crate) fn decode<S: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<S> {
    postcard::from_bytes(bytes).map_err(|e| EmberError::ser(what, e))
}
