//! Source RDDs: in-memory collections, number ranges, and text files cut into
//! byte-range splits (see [`crate::io::text_input`]).

use std::path::PathBuf;
use std::rc::Rc;

use ember_proto::RddNode;

use super::partition_op::batches_of;
use super::position::{file_id, LinePosition};
use crate::data::decode;
use crate::data::{Data, BATCH};
use crate::error::Result;
use crate::io::text_input::{read_whole_file, FileSplit, LineReader};
use crate::task::{Batches, Erased, TaskContext};

fn count_in(tc: &Rc<TaskContext>, n: usize) {
    tc.with_metrics(|m| m.records_in += n as u64);
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

/// The splits of partition `part`.
fn splits_of(node: &RddNode, part: u32) -> Result<Vec<FileSplit>> {
    partition_payload(node, part, "text_file")
}

/// Every part a task of partition `part` reads (see [`parts_to_read`]), in order.
fn partition_parts(tc: &TaskContext, node: &RddNode, part: u32) -> Result<Vec<FileSplit>> {
    Ok(splits_of(node, part)?
        .into_iter()
        .flat_map(|s| parts_to_read(tc, s))
        .collect())
}

/// Windows a sampling task reads instead of a whole split.
const SAMPLE_WINDOWS: u64 = 32;
/// Bytes per sampling window.
const SAMPLE_WINDOW_BYTES: u64 = 64 << 10;

/// The parts of `split` a task reads: all of it, or, for a sampling task and a split
/// much larger than the windows, [`SAMPLE_WINDOWS`] sub-splits of
/// [`SAMPLE_WINDOW_BYTES`] spread evenly over it. Sub-splits follow the split rules
/// (a line belongs to the sub-split it starts in), so every line read is a line of the
/// split, read once.
fn parts_to_read(tc: &TaskContext, split: FileSplit) -> Vec<FileSplit> {
    let len = split.end.saturating_sub(split.start);
    if !tc.sampling() || len < 4 * SAMPLE_WINDOWS * SAMPLE_WINDOW_BYTES {
        return vec![split];
    }
    let stride = len / SAMPLE_WINDOWS;
    (0..SAMPLE_WINDOWS)
        .map(|i| {
            let start = split.start + i * stride;
            FileSplit {
                path: split.path.clone(),
                start,
                end: start + SAMPLE_WINDOW_BYTES,
            }
        })
        .collect()
}

/// Reads the lines of several splits (of one file or many) in order, one batch at a
/// time; a batch never mixes lines of two splits.
struct SplitsReader {
    parts: std::vec::IntoIter<FileSplit>,
    reader: Option<LineReader>,
    /// The split `reader` reads.
    current: Option<FileSplit>,
}

impl SplitsReader {
    fn new(parts: Vec<FileSplit>) -> Self {
        SplitsReader {
            parts: parts.into_iter(),
            reader: None,
            current: None,
        }
    }

    /// Fills `f`'s batch from the current reader, moving to the next split when one is
    /// exhausted; `Ok(false)` when every split is. `f` also gets the split it reads.
    fn next(
        &mut self,
        mut f: impl FnMut(&FileSplit, &mut LineReader) -> Result<bool>,
    ) -> Result<bool> {
        loop {
            let reader = match &mut self.reader {
                Some(r) => r,
                None => match self.parts.next() {
                    Some(split) => {
                        let r = LineReader::open(&split)?;
                        self.current = Some(split);
                        self.reader.insert(r)
                    }
                    None => return Ok(false),
                },
            };
            let split = self.current.as_ref().expect("a reader has its split");
            if f(split, reader)? {
                return Ok(true);
            }
            self.reader = None;
        }
    }
}

pub(crate) fn text_file_compute(tc: &Rc<TaskContext>, node: &RddNode, part: u32) -> Result<Erased> {
    let mut reader = SplitsReader::new(partition_parts(tc, node, part)?);
    let tc = tc.clone();
    let out: Batches<String> = Box::new(std::iter::from_fn(move || {
        let mut batch = Vec::with_capacity(BATCH);
        let more = reader.next(|_, r| {
            r.next_batch(BATCH, &mut batch)?;
            Ok(!batch.is_empty())
        });
        match more {
            Ok(false) => None,
            Ok(true) => {
                count_in(&tc, batch.len());
                Some(Ok(batch))
            }
            Err(e) => Some(Err(e)),
        }
    }));
    Ok(Box::new(out))
}

pub(crate) fn text_file_positions_compute(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let mut reader = SplitsReader::new(partition_parts(tc, node, part)?);
    let tc = tc.clone();
    let mut raw = Vec::with_capacity(BATCH);
    let mut file = 0u32;
    let out: Batches<(LinePosition, String)> = Box::new(std::iter::from_fn(move || {
        raw.clear();
        let more = reader.next(|split, r| {
            r.next_batch_with_offsets(BATCH, &mut raw)?;
            file = file_id(&split.path.to_string_lossy());
            Ok(!raw.is_empty())
        });
        match more {
            Ok(false) => None,
            Ok(true) => {
                count_in(&tc, raw.len());
                let batch = raw
                    .drain(..)
                    .map(|(offset, line)| (LinePosition::new(file, offset), line))
                    .collect();
                Some(Ok(batch))
            }
            Err(e) => Some(Err(e)),
        }
    }));
    Ok(Box::new(out))
}

pub(crate) fn whole_text_files_compute(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let groups: Vec<Vec<PathBuf>> = decode("whole_text_files", &node.payload)?;
    let files = groups.get(part as usize).cloned().unwrap_or_default();
    let tc = tc.clone();
    let mut it = files.into_iter();
    let out: Batches<(String, String)> = Box::new(std::iter::from_fn(move || {
        let path = it.next()?;
        count_in(&tc, 1);
        Some(read_whole_file(&path).map(|text| vec![(path.to_string_lossy().into_owned(), text)]))
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
