//! The reduce side's input: every record of one reducer's blocks of a shuffle, map
//! output by map output.
//!
//! Blocks held by this executor are read from its shuffle directory; blocks held by
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
//! could not be read; `shuffle_bytes_read` counts the compressed block sizes asked for.

use std::rc::Rc;

use ember_proto::limits::MAX_FETCH_REQUEST_BYTES;
use ember_proto::RddNode;
use serde::de::DeserializeOwned;

use crate::error::{EmberError, Result};
use crate::shuffle::{open_block_records, BlockId, BlockRecords, RemoteBlockStream};
use crate::task::TaskContext;

/// Where one block comes from.
enum Source {
    /// This executor's shuffle directory.
    Local(BlockId),
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
    let mut sources = Vec::new();
    // (executor id, address, maps, their bytes): one fetch request each.
    let mut remote: Vec<(String, String, Vec<u32>, u64)> = Vec::new();
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
        // One request per executor, split where its blocks would add up to more than
        // one request may ask for (the executor refuses that); the latest batch of an
        // executor is the last one of its id in `remote`.
        let batch = remote
            .iter()
            .rposition(|(e, _, _, _)| *e == loc.executor_id)
            .filter(|&i| remote[i].3.saturating_add(size) <= MAX_FETCH_REQUEST_BYTES);
        match batch {
            Some(i) => {
                remote[i].2.push(m);
                remote[i].3 += size;
                sources.push(Source::Remote(i, m));
            }
            None => {
                remote.push((
                    loc.executor_id.clone(),
                    loc.shuffle_address.clone(),
                    vec![m],
                    size,
                ));
                sources.push(Source::Remote(remote.len() - 1, m));
            }
        }
    }
    let dir = tc.env.shuffle_dir();
    // One stream per request, opened when its first block is needed.
    let mut streams: Vec<Option<RemoteBlockStream>> = remote.iter().map(|_| None).collect();
    let env = tc.env.clone();
    let mut sources = sources.into_iter();
    let mut current: Option<(u32, BlockRecords<T>)> = None;
    let tc = tc.clone();
    Ok(std::iter::from_fn(move || loop {
        if let Some((m, c)) = current.as_mut() {
            if let Some(r) = c.next() {
                let m = *m;
                return Some(r.map(|t| (m, t)).map_err(EmberError::from));
            }
            current = None;
        }
        match sources.next()? {
            Source::Local(id) => match open_block_records::<T>(&dir, &id) {
                Ok(records) => current = Some((id.map_partition, records)),
                Err(e) => return Some(Err(e.into())),
            },
            Source::Remote(i, m) => {
                let stream = streams[i].get_or_insert_with(|| {
                    let (executor_id, address, maps, _) = &remote[i];
                    let fetcher = env.remote.clone().expect("checked above");
                    fetcher.fetch(executor_id, address, shuffle_id, reduce, maps.clone())
                });
                match stream.next() {
                    Some(Ok((id, bytes))) => {
                        current = Some((id.map_partition, BlockRecords::from_bytes(id, bytes)))
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
    })
    .inspect(move |r| {
        if r.is_ok() {
            tc.with_metrics(|m| {
                m.shuffle_records_read += 1;
                m.records_in += 1;
            })
        }
    }))
}
