//! Source RDDs, each defined (an `impl Context` block) beside the compute function its
//! tasks run, as the Parquet and CSV sources are: in-memory collections and number
//! ranges (`collection.rs`), text files cut into byte-range splits and whole files
//! (`text.rs`, reading through [`crate::io::text_input`]). This file makes a source's
//! lineage node and holds what the file sources share (a partition's own payload,
//! counted batches).
//!
//! Invariant: a source node has no dependencies and its payload holds everything its
//! tasks read (one part per partition, so a task decodes only its own).

mod collection;
mod text;

use std::panic::Location;
use std::rc::Rc;

use ember_proto::RddNode;

use super::Rdd;
use crate::context::Context;
use crate::data::{decode, Data};
use crate::error::Result;
#[cfg(any(feature = "csv", feature = "parquet"))]
use crate::task::Batches;
use crate::task::{ComputeFn, TaskContext};

fn count_in(tc: &Rc<TaskContext>, n: usize) {
    tc.with_metrics(|m| m.records_in += n as u64);
}

/// What a file source's node holds for partition `part`: its payload is each
/// partition's part encoded on its own, so only this one is decoded. `what` names the
/// source in errors.
pub(crate) fn partition_payload<P: serde::de::DeserializeOwned>(
    node: &RddNode,
    part: u32,
    what: &str,
) -> Result<P> {
    let parts: Vec<&[u8]> =
        postcard::from_bytes(&node.payload).map_err(|e| crate::error::EmberError::ser(what, e))?;
    let bytes = parts
        .get(part as usize)
        .ok_or_else(|| crate::error::EmberError::Plan(format!("{what} has no partition {part}")))?;
    decode(&format!("{what} partition"), bytes)
}

#[cfg(any(feature = "csv", feature = "parquet"))]
/// The batches `next` reads, each counted as records read (`rows` of it), ending after
/// the first error (which is the last item).
pub(crate) fn counted_batches<U: 'static>(
    tc: &Rc<TaskContext>,
    rows: fn(&[U]) -> u64,
    mut next: impl FnMut() -> Option<Result<Vec<U>>> + 'static,
) -> Batches<U> {
    let tc = tc.clone();
    let mut failed = false;
    Box::new(std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let item = next()?;
        match &item {
            Ok(b) => {
                let n = rows(b);
                tc.with_metrics(|m| m.records_in += n);
            }
            Err(_) => failed = true,
        }
        Some(item)
    }))
}

#[cfg(any(feature = "csv", feature = "parquet"))]
/// The records of a batch: its length.
pub(crate) fn batch_len<U>(b: &[U]) -> u64 {
    b.len() as u64
}

impl Context {
    /// A source RDD: a lineage node without dependencies whose tasks run `compute`
    /// over `payload`.
    pub(crate) fn source<T: Data>(
        &self,
        op: &str,
        at: &Location<'_>,
        partitions: u32,
        compute: ComputeFn,
        payload: Vec<u8>,
    ) -> Rdd<T> {
        self.new_rdd(op, at, partitions, Vec::new(), compute, payload)
    }
}
