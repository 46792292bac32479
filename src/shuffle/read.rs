//! The reduce side's input: every record of one reducer's blocks of a shuffle, map
//! output by map output.
//!
//! Blocks held by this executor are read from its shuffle directory; blocks of a lost
//! executor's outputs that were stored (`storage:` durability) from the shuffle's
//! stored directory; blocks held by
//! other executors (cluster mode) are fetched over their shuffle service, one stream
//! per executor carrying all of that executor's blocks, split into several requests
//! where the blocks' sizes add up to more than one request may ask for
//! (`ember_proto::limits::MAX_FETCH_REQUEST_BYTES`, 1 GiB). Empty blocks (size 0 in the map
//! status) are skipped without a read.
//!
//! Invariants: blocks are consumed in map-partition order wherever they live, so a
//! reducer sees the same record order in local and cluster mode (and floating-point
//! aggregates come out bit-identical); every record of every non-empty block is yielded
//! exactly once, or the iterator ends with a typed `FetchFailed` naming the block that
//! could not be read; `shuffle_bytes_read` counts the compressed block sizes asked for;
//! `shuffle_records_read` (and `records_in`) every record yielded, added a block at a time
//! and when the reader is dropped, never per record (a metrics borrow per record was
//! 13 % of kvsum's wall time).
//! Small remote requests among the first [`EAGER_FETCHES`] go out when the reader is
//! built, so remote executors serve them while local blocks are read.

use std::path::Path;
use std::rc::Rc;

use ember_proto::limits::MAX_FETCH_REQUEST_BYTES;
use ember_proto::RddNode;
use serde::de::DeserializeOwned;

use crate::data::Data;
use crate::env::RemoteBlockStream;
use crate::error::{EmberError, Result};
use crate::shuffle::{open_block_records, BlockId, BlockRecords};
use crate::task::TaskContext;
use crate::task::{into_batches, Batches, Erased};

/// Where one block comes from.
enum Source {
    /// This executor's shuffle directory.
    Local(BlockId),
    /// The shuffle's stored directory (`storage:` durability; its writer is gone).
    Stored(BlockId),
    /// The stream from the other executor with this index in `remote`.
    /// (Then the map partition the next block of that stream must be.)
    Remote(usize, u32),
}

/// Iterates every record of this reducer's blocks, map partition by map partition.
pub(crate) fn read_blocks<T: DeserializeOwned + 'static>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    reduce: u32,
) -> Result<impl Iterator<Item = Result<T>>> {
    Ok(read_indexed_blocks(tc, node, reduce)?.map(|r| r.map(|(_, t)| t)))
}

/// [`read_blocks`] with the map partition each record comes from.
pub(crate) fn read_indexed_blocks<T: DeserializeOwned + 'static>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    reduce: u32,
) -> Result<impl Iterator<Item = Result<(u32, T)>>> {
    let dep = match node.deps.first().and_then(|d| d.kind.as_ref()) {
        Some(ember_proto::dependency::Kind::Shuffle(s)) => s.clone(),
        _ => {
            return Err(EmberError::Plan(format!(
                "node {} does not read a shuffle",
                node.id
            )))
        }
    };
    read_dependency_blocks(tc, &dep, reduce)
}

/// Fetch requests a reducer sends as it starts (among its first ones, those of at most
/// [`EAGER_FETCH_BYTES`]); the others go out when their first block is needed.
const EAGER_FETCHES: usize = 8;
/// The largest request sent before it is needed: its answer fits in the serving
/// executor's queue for the request (4 messages of up to 1 MiB), so the executor's
/// blocking thread finishes it without waiting for this reducer to read.
const EAGER_FETCH_BYTES: u64 = 2 << 20;

/// One fetch request: executor id, shuffle address, the maps asked, their bytes.
type FetchRequest = (String, String, Vec<u32>, u64);

/// Adds map `m` (its block of `size` bytes) to the latest request to `executor_id`, or
/// to a new one if that would take the request over `max_bytes` (the executor refuses
/// more than one block over it); returns the request's index. So one executor's blocks
/// go out in as few requests as the bound allows, each under it or of one block.
fn add_to_request(
    requests: &mut Vec<FetchRequest>,
    executor_id: &str,
    address: &str,
    m: u32,
    size: u64,
    max_bytes: u64,
) -> usize {
    let latest = requests
        .iter()
        .rposition(|(e, _, _, _)| e == executor_id)
        .filter(|&i| requests[i].3.saturating_add(size) <= max_bytes);
    match latest {
        Some(i) => {
            requests[i].2.push(m);
            requests[i].3 += size;
            i
        }
        None => {
            requests.push((executor_id.to_string(), address.to_string(), vec![m], size));
            requests.len() - 1
        }
    }
}

/// [`read_indexed_blocks`] of any shuffle dependency of a node (a cogroup reads several).
pub(crate) fn read_dependency_blocks<T: DeserializeOwned + 'static>(
    tc: &Rc<TaskContext>,
    dep: &ember_proto::ShuffleDependency,
    reduce: u32,
) -> Result<impl Iterator<Item = Result<(u32, T)>>> {
    let shuffle_id = dep.shuffle_id;
    let num_maps = tc.node(dep.parent)?.num_partitions;
    // The task's map locations by map partition (a linear scan per map would make a
    // reducer's setup quadratic in the map count).
    let mut by_map: Vec<Option<&ember_proto::MapLocation>> = vec![None; num_maps as usize];
    let locations = tc.map_locations(shuffle_id);
    for loc in locations {
        if let Some(entry) = by_map.get_mut(loc.map_partition as usize) {
            *entry = Some(loc);
        }
    }
    // Where the stored copies of a lost executor's outputs are (`storage:` durability).
    let stored = super::stored::stored_dir(dep).map(Path::to_path_buf);
    let mut sources = Vec::new();
    let mut remote: Vec<FetchRequest> = Vec::new();
    for m in 0..num_maps {
        let id = |executor_id: &str| BlockId {
            executor_id: executor_id.to_string(),
            shuffle_id,
            map_partition: m,
            reduce_partition: reduce,
        };
        let Some(loc) = by_map[m as usize] else {
            return Err(id("")
                .fetch_failed("no known location for this map output")
                .into());
        };
        // The sizes may start at `first_reduce` (only this reducer's block was sent);
        // a size not sent is read anyway, never assumed empty.
        let size = reduce
            .checked_sub(loc.first_reduce)
            .and_then(|i| loc.block_sizes.get(i as usize).copied());
        if size == Some(0) {
            continue;
        }
        let size = size.unwrap_or(0);
        tc.with_metrics(|mm| mm.shuffle_bytes_read += size);
        if loc.from_storage {
            if stored.is_none() {
                return Err(id(&loc.executor_id)
                    .fetch_failed("the output is stored, but its shuffle names no stored directory")
                    .into());
            }
            sources.push(Source::Stored(id(&loc.executor_id)));
            continue;
        }
        if loc.executor_id == tc.env.executor_id {
            sources.push(Source::Local(id(&loc.executor_id)));
            continue;
        }
        if tc.env.remote.is_none() || loc.shuffle_address.is_empty() {
            return Err(id(&loc.executor_id)
                .fetch_failed(format!(
                    "map output lives on executor {}, which this executor cannot reach",
                    loc.executor_id
                ))
                .into());
        }
        let i = add_to_request(
            &mut remote,
            &loc.executor_id,
            &loc.shuffle_address,
            m,
            size,
            MAX_FETCH_REQUEST_BYTES,
        );
        sources.push(Source::Remote(i, m));
    }
    let dir = tc.env.shuffle_dir();
    // This task's view of the resident map outputs (see `ember_shuffle::resident`).
    let view = ember_shuffle::resident::View::now();
    // One stream per request: small ones among the first EAGER_FETCHES sent now, so the
    // executors serving them read their blocks while this task reads local ones (and
    // earlier streams); the rest when their first block is needed.
    let env = tc.env.clone();
    let open = move |(executor_id, address, maps, _): &FetchRequest| {
        let fetcher = env.remote.clone().expect("checked above");
        fetcher.fetch(executor_id, address, shuffle_id, reduce, maps.clone())
    };
    let mut streams: Vec<Option<RemoteBlockStream>> = remote
        .iter()
        .enumerate()
        .map(|(i, request)| {
            (i < EAGER_FETCHES && request.3 <= EAGER_FETCH_BYTES).then(|| open(request))
        })
        .collect();
    let mut sources = sources.into_iter();
    // The block being read, and whether it is a stored copy.
    let mut current: Option<(u32, BlockRecords<T>, bool)> = None;
    // Records read and not yet added to the task's metrics: added when a block ends and
    // when the reader is dropped, not one borrow of the metrics per record.
    let mut read = RecordsRead {
        tc: tc.clone(),
        uncounted: 0,
    };
    Ok(std::iter::from_fn(move || loop {
        if let Some((m, c, from_storage)) = current.as_mut() {
            match c.next() {
                Some(Ok(t)) => {
                    read.uncounted += 1;
                    return Some(Ok((*m, t)));
                }
                Some(Err(e)) => return Some(Err(read_error(e.into(), *from_storage))),
                None => {}
            }
            current = None;
            read.count();
        }
        match sources.next()? {
            Source::Local(id) => match open_block_records::<T>(&view, &dir, &id) {
                Ok(records) => current = Some((id.map_partition, records, false)),
                Err(e) => return Some(Err(e.into())),
            },
            Source::Stored(id) => {
                let stored = stored
                    .as_deref()
                    .expect("checked when the sources were made");
                match super::stored::open_copy_block::<T>(stored, &id) {
                    Ok(records) => current = Some((id.map_partition, records, true)),
                    Err(e) => return Some(Err(read_error(e.into(), true))),
                }
            }
            Source::Remote(i, m) => {
                let stream = streams[i].get_or_insert_with(|| open(&remote[i]));
                match stream.next() {
                    Some(Ok((id, bytes))) => {
                        current =
                            Some((id.map_partition, BlockRecords::from_bytes(id, bytes), false))
                    }
                    Some(Err(e)) => return Some(Err(e)),
                    None => {
                        // The executor closed the stream before this block: it is
                        // unreadable there, a fetch failure the scheduler acts on.
                        let (executor_id, _, _, _) = &remote[i];
                        let id = BlockId {
                            executor_id: executor_id.clone(),
                            shuffle_id,
                            map_partition: m,
                            reduce_partition: reduce,
                        };
                        return Some(Err(id
                            .fetch_failed("the remote block stream ended before this block")
                            .into()));
                    }
                }
            }
        }
    }))
}

/// Counts a reducer's records read into its task's metrics, a block at a time and when
/// the reader is dropped (an early stop, an error), so every record read is counted.
struct RecordsRead {
    tc: Rc<TaskContext>,
    uncounted: u64,
}

impl RecordsRead {
    fn count(&mut self) {
        let n = std::mem::take(&mut self.uncounted);
        if n > 0 {
            self.tc.with_metrics(|m| {
                m.shuffle_records_read += n;
                m.records_in += n;
            });
        }
    }
}

impl Drop for RecordsRead {
    fn drop(&mut self) {
        self.count();
    }
}

/// A read error of a block; a fetch failure of a stored copy says so, so the scheduler
/// drops that copy rather than presume its (already lost) executor lost again.
fn read_error(mut e: EmberError, stored: bool) -> EmberError {
    if let EmberError::FetchFailed { from_storage, .. } = &mut e {
        *from_storage |= stored;
    }
    e
}

/// Reduce side without aggregation: the records as they come.
pub(crate) fn read_plain<K: Data, V: Data>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let out: Batches<(K, V)> = into_batches(read_blocks::<(K, V)>(tc, node, part)?);
    Ok(Box::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reducer's requests to one executor stay under the bound the executor enforces
    /// (or hold one block), keep map order, and other executors' blocks do not split them.
    #[test]
    fn requests_to_one_executor_split_at_the_byte_bound() {
        let mut requests = Vec::new();
        let blocks = [
            ("a", 0, 40),
            ("b", 1, 90),
            ("a", 2, 50),
            ("a", 3, 20),
            ("a", 4, 150),
            ("a", 5, 0),
            ("b", 6, 10),
        ];
        for (e, m, size) in blocks {
            add_to_request(&mut requests, e, "addr", m, size, 100);
        }
        let got: Vec<(&str, Vec<u32>, u64)> = requests
            .iter()
            .map(|(e, _, maps, bytes)| (e.as_str(), maps.clone(), *bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("a", vec![0, 2], 90),
                ("b", vec![1, 6], 100),
                ("a", vec![3], 20),
                ("a", vec![4], 150),
                ("a", vec![5], 0),
            ]
        );
        for (_, maps, bytes) in &got {
            assert!(*bytes <= 100 || maps.len() == 1, "{maps:?} {bytes}");
        }
    }
}
