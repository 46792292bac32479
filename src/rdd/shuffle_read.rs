//! The reduce side's input: every record of one reducer's blocks of a shuffle, map
//! output by map output.
//!
//! Blocks held by this executor are read from its shuffle directory; blocks held by
//! other executors (cluster mode) are fetched over their shuffle service, one stream
//! per executor. Empty blocks (size 0 in the map status) are skipped without a read.
//!
//! Invariants: every record of every non-empty block is yielded exactly once, or the
//! iterator ends with a typed `FetchFailed` naming the block that could not be read;
//! the reducer's `shuffle_bytes_read` counts the compressed block sizes it asked for.

use std::rc::Rc;

use ember_proto::RddNode;
use serde::de::DeserializeOwned;

use crate::error::{EmberError, Result};
use crate::shuffle::{open_block_records, BlockId, BlockRecords};
use crate::task::TaskContext;

/// Where a group of blocks comes from.
enum Source {
    /// One block in this executor's shuffle directory.
    Local(BlockId),
    /// Blocks of these map partitions, all on one other executor.
    Remote {
        executor_id: String,
        address: String,
        maps: Vec<u32>,
    },
}

/// Iterates every record of this reducer's blocks, map partition by map partition.
pub(crate) fn read_blocks<T: DeserializeOwned + 'static>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    reduce: u32,
) -> Result<impl Iterator<Item = Result<T>>> {
    let dep = match node.deps.first().and_then(|d| d.kind.as_ref()) {
        Some(ember_proto::dependency::Kind::Shuffle(s)) => s.clone(),
        _ => {
            return Err(EmberError::Plan(format!(
                "node {} does not read a shuffle",
                node.id
            )))
        }
    };
    let shuffle_id = dep.shuffle_id;
    let num_maps = tc.node(dep.parent)?.num_partitions;
    let locations = tc.map_locations(shuffle_id).to_vec();
    let mut sources = Vec::new();
    let mut remote: Vec<(String, String, Vec<u32>)> = Vec::new();
    for m in 0..num_maps {
        let id = |executor_id: &str| BlockId {
            executor_id: executor_id.to_string(),
            shuffle_id,
            map_partition: m,
            reduce_partition: reduce,
        };
        let Some(loc) = locations.iter().find(|l| l.map_partition == m) else {
            return Err(id("").fetch_failed("no known location for this map output"));
        };
        if loc.block_sizes.get(reduce as usize).copied() == Some(0) {
            continue;
        }
        let size = loc.block_sizes.get(reduce as usize).copied().unwrap_or(0);
        tc.with_metrics(|mm| mm.shuffle_bytes_read += size);
        if loc.executor_id == tc.env.executor_id {
            sources.push(Source::Local(id(&loc.executor_id)));
            continue;
        }
        if tc.env.remote.is_none() || loc.shuffle_address.is_empty() {
            return Err(id(&loc.executor_id).fetch_failed(format!(
                "map output lives on executor {}, which this executor cannot reach",
                loc.executor_id
            )));
        }
        match remote.iter_mut().find(|(e, _, _)| *e == loc.executor_id) {
            Some((_, _, maps)) => maps.push(m),
            None => remote.push((
                loc.executor_id.clone(),
                loc.shuffle_address.clone(),
                vec![m],
            )),
        }
    }
    sources.extend(
        remote
            .into_iter()
            .map(|(executor_id, address, maps)| Source::Remote {
                executor_id,
                address,
                maps,
            }),
    );
    let dir = tc.env.shuffle_dir();
    let env = tc.env.clone();
    let mut sources = sources.into_iter();
    let mut fetching: Option<crate::cluster::fetch::RemoteBlocks> = None;
    let mut current: Option<BlockRecords<T>> = None;
    let tc = tc.clone();
    Ok(std::iter::from_fn(move || loop {
        if let Some(c) = current.as_mut() {
            if let Some(r) = c.next() {
                return Some(r);
            }
            current = None;
        }
        if let Some(f) = fetching.as_mut() {
            match f.next() {
                Some(Ok((id, bytes))) => {
                    current = Some(BlockRecords::from_bytes(id, bytes));
                    continue;
                }
                Some(Err(e)) => return Some(Err(e)),
                None => fetching = None,
            }
        }
        match sources.next()? {
            Source::Local(id) => match open_block_records::<T>(&dir, &id) {
                Ok(records) => current = Some(records),
                Err(e) => return Some(Err(e)),
            },
            Source::Remote {
                executor_id,
                address,
                maps,
            } => {
                let remote = env.remote.as_ref().expect("checked above");
                fetching = Some(remote.fetch(&executor_id, &address, shuffle_id, reduce, maps));
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
