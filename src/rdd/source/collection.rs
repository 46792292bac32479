//! In-memory sources: `parallelize` (records cut into even slices, each encoded on its
//! own in the node's payload), `range` (contiguous number ranges, computed in the task)
//! and `empty` (no partitions, as Spark's `emptyRDD`).
//!
//! Invariant: slice `i` of `n` holds records `i * len / n .. (i + 1) * len / n`, in
//! order, so `collect` gives the input back.

use std::panic::Location;
use std::rc::Rc;

use ember_proto::RddNode;

use super::count_in;
use crate::context::Context;
use crate::data::{decode, encode, Data, BATCH};
use crate::error::Result;
use crate::rdd::partition_op::batches_of;
use crate::rdd::Rdd;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

impl Context {
    /// An RDD of the given records cut into `partitions` even slices.
    #[track_caller]
    pub fn parallelize<T: Data>(&self, data: Vec<T>, partitions: usize) -> Rdd<T> {
        if partitions == 0 {
            return self
                .source::<T>(
                    "parallelize",
                    Location::caller(),
                    0,
                    parallelize_compute::<T>,
                    Vec::new(),
                )
                .invalid("number of partitions must be positive, got 0");
        }
        let n = partitions;
        let len = data.len();
        let mut slices = Vec::with_capacity(n);
        let mut it = data.into_iter();
        for i in 0..n {
            let take = (i + 1) * len / n - i * len / n;
            let slice: Vec<T> = it.by_ref().take(take).collect();
            slices.push(encode("parallelize", &slice));
        }
        let compute: ComputeFn = parallelize_compute::<T>;
        self.source(
            "parallelize",
            Location::caller(),
            n as u32,
            compute,
            encode_slices(&slices),
        )
    }

    /// The numbers `start..end` in `partitions` contiguous ranges.
    #[track_caller]
    pub fn range(&self, start: i64, end: i64, partitions: usize) -> Rdd<i64> {
        let compute: ComputeFn = range_compute;
        let rdd = self.source(
            "range",
            Location::caller(),
            partitions as u32,
            compute,
            encode("range", &(start, end)),
        );
        if partitions == 0 {
            return rdd.invalid("number of partitions must be positive, got 0");
        }
        rdd
    }

    /// An empty RDD.
    #[track_caller]
    pub fn empty<T: Data>(&self) -> Rdd<T> {
        // Spark's emptyRDD: no partitions at all.
        let compute: ComputeFn = parallelize_compute::<T>;
        self.source("empty", Location::caller(), 0, compute, encode_slices(&[]))
    }
}

/// The payload of a `parallelize` node: every slice's encoded records, laid out so a
/// task reads its own slice without decoding the others (a job of N one-record
/// partitions would otherwise decode N slices in each of its N tasks): a `u32` slice
/// count `n`, then `n + 1` `u64` offsets into the data that follows (little-endian),
/// then the slices' bytes back to back.
pub(crate) fn encode_slices(slices: &[Vec<u8>]) -> Vec<u8> {
    let data: usize = slices.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(4 + 8 * (slices.len() + 1) + data);
    out.extend_from_slice(&(slices.len() as u32).to_le_bytes());
    let mut at = 0u64;
    out.extend_from_slice(&at.to_le_bytes());
    for s in slices {
        at += s.len() as u64;
        out.extend_from_slice(&at.to_le_bytes());
    }
    for s in slices {
        out.extend_from_slice(s);
    }
    out
}

/// Slice `part` of an [`encode_slices`] payload (`None` past the last slice); an error
/// names what is inconsistent in a payload that is not one.
pub(crate) fn slice_of(payload: &[u8], part: u32) -> Result<Option<&[u8]>> {
    let bad = |what: &str| {
        crate::error::EmberError::Plan(format!(
            "parallelize payload of {} bytes: {what}",
            payload.len()
        ))
    };
    let word = |at: usize| -> Result<u64> {
        payload
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .ok_or_else(|| bad("offset table cut short"))
    };
    let n = payload
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
        .ok_or_else(|| bad("no slice count"))?;
    if part >= n {
        return Ok(None);
    }
    let data = 4 + 8 * (n as usize + 1);
    let (lo, hi) = (
        word(4 + 8 * part as usize)?,
        word(4 + 8 * (part as usize + 1))?,
    );
    let range = usize::try_from(lo)
        .ok()
        .zip(usize::try_from(hi).ok())
        .filter(|(lo, hi)| lo <= hi)
        .and_then(|(lo, hi)| payload.get(data + lo..data + hi))
        .ok_or_else(|| bad(&format!("slice {part} at {lo}..{hi} is out of bounds")))?;
    Ok(Some(range))
}

pub(crate) fn parallelize_compute<T: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let slice: Vec<T> = match slice_of(&node.payload, part)? {
        Some(bytes) => decode("parallelize slice", bytes)?,
        None => Vec::new(),
    };
    count_in(tc, slice.len());
    let out: Batches<T> = batches_of(slice);
    Ok(Box::new(out))
}

/// Range bounds of partition `part` of `[start, end)` cut into `n` even pieces.
pub(crate) fn range_bounds(start: i64, end: i64, n: u32, part: u32) -> (i64, i64) {
    let len = (end as i128 - start as i128).max(0);
    let lo = start as i128 + len * part as i128 / n as i128;
    let hi = start as i128 + len * (part as i128 + 1) / n as i128;
    (lo as i64, hi as i64)
}

pub(crate) fn range_compute(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let (start, end): (i64, i64) = decode("range", &node.payload)?;
    let (lo, hi) = range_bounds(start, end, node.num_partitions, part);
    count_in(tc, (hi - lo) as usize);
    let mut next = lo;
    let out: Batches<i64> = Box::new(std::iter::from_fn(move || {
        if next >= hi {
            return None;
        }
        let stop = (next + BATCH as i64).min(hi);
        let b: Vec<i64> = (next..stop).collect();
        next = stop;
        Some(Ok(b))
    }));
    Ok(Box::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slice_comes_back_alone_and_bad_payloads_are_errors() {
        let slices: Vec<Vec<u8>> = vec![b"ab".to_vec(), vec![], b"cde".to_vec()];
        let payload = encode_slices(&slices);
        for (i, s) in slices.iter().enumerate() {
            assert_eq!(slice_of(&payload, i as u32).unwrap(), Some(s.as_slice()));
        }
        assert_eq!(slice_of(&payload, 3).unwrap(), None);
        assert_eq!(slice_of(&encode_slices(&[]), 0).unwrap(), None);
        // Cut anywhere, it is refused with what is wrong, never a panic.
        for cut in 0..payload.len() {
            if let Err(e) = slice_of(&payload[..cut], 2) {
                assert!(e.to_string().contains("parallelize payload"), "{e}");
            } else {
                panic!("a payload cut at {cut} of {} passed", payload.len());
            }
        }
        let mut swapped = payload.clone();
        swapped[12..20].copy_from_slice(&9u64.to_le_bytes()); // slice 1 starts past its end
        let e = slice_of(&swapped, 1).unwrap_err().to_string();
        assert!(e.contains("slice 1 at 9..2 is out of bounds"), "{e}");
    }
}
