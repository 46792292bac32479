//! The map side of a shuffle: routing keys to reduce partitions ([`Partitioning`]: by
//! hash or by range; any [`Partitioner`](super::Partitioner) through its router) and
//! writing a map task's records into its map output ([`MapSide`]), spilling the
//! writer's buffers when the task's memory reservation is refused. Its reduce side is
//! `read.rs`.
//!
//! Invariants: every record written by a map task reaches exactly one reducer, the one
//! its partitioner names; a map output's status is returned only once its file is
//! complete (blocks, then their index).

use std::hash::Hash;
use std::rc::Rc;

use ember_proto::{MapStatus, ShuffleDependency};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{hash_partition, RangePartitioner, ShuffleWriter};
use crate::data::{decode, Data};
use crate::error::Result;
use crate::task::TaskContext;

/// How keys are routed to reduce partitions.
pub(crate) trait Partitioning<K>: Sized + 'static {
    fn load(payload: &[u8], num_reduce: u32) -> Result<Self>;
    fn partition(&self, key: &K) -> u32;
}

/// Hash partitioning with a fixed seed (the same in every process).
pub(crate) struct HashPartitioning(u32);
impl<K: Hash> Partitioning<K> for HashPartitioning {
    fn load(_: &[u8], n: u32) -> Result<Self> {
        Ok(HashPartitioning(n))
    }
    #[inline]
    fn partition(&self, key: &K) -> u32 {
        hash_partition(key, self.0)
    }
}

impl<K: Ord + DeserializeOwned + 'static> Partitioning<K> for RangePartitioner<K> {
    fn load(payload: &[u8], _: u32) -> Result<Self> {
        decode("range partitioner", payload)
    }
    #[inline]
    fn partition(&self, key: &K) -> u32 {
        RangePartitioner::partition(self, key)
    }
}

/// Payload of a shuffle's write function.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct WritePayload {
    pub partitioner: Vec<u8>,
    pub state: Vec<u8>,
}

/// Writes records into the map output, spilling its buffers when memory is refused.
pub(crate) struct MapSide<T: Serialize> {
    writer: ShuffleWriter<T>,
    reservation: crate::memory::Reservation,
    since_check: usize,
}

impl<T: Serialize> MapSide<T> {
    pub(crate) fn new(tc: &Rc<TaskContext>, dep: &ShuffleDependency, map: u32) -> Self {
        MapSide {
            writer: ShuffleWriter::new(
                tc.env.shuffle_dir(),
                dep.shuffle_id,
                map,
                dep.num_reduce_partitions,
            ),
            reservation: tc.reservation("shuffle writer"),
            since_check: 0,
        }
    }

    #[inline]
    pub(crate) fn write(&mut self, reduce: u32, rec: &T) -> Result<()> {
        self.writer.write(reduce, rec)?;
        self.since_check += 1;
        if self.since_check >= 1024 {
            self.since_check = 0;
            let buffered = self.writer.buffered_bytes();
            if buffered > self.reservation.size() && self.reservation.resize(buffered).is_err() {
                self.writer.spill_buffers()?;
                self.reservation.free();
            }
        }
        Ok(())
    }

    pub(crate) fn finish(
        self,
        tc: &Rc<TaskContext>,
        dep: &ShuffleDependency,
        map: u32,
    ) -> Result<MapStatus> {
        let spilled = self.writer.spilled_bytes();
        let out = self.writer.finish()?;
        let stored =
            super::stored::store_map_output(&tc.env.shuffle_dir(), dep, map, &tc.env.executor_id);
        tc.with_metrics(|m| {
            m.shuffle_bytes_written += out.bytes_written;
            m.shuffle_records_written += out.records_written;
            m.records_out += out.records_written;
            if spilled > 0 {
                m.bytes_spilled += spilled;
                m.spill_count += 1;
            }
        });
        Ok(MapStatus {
            replicas: Default::default(),
            shuffle_id: dep.shuffle_id,
            map_partition: map,
            block_sizes: out.block_sizes,
            stored,
        })
    }
}

/// Map side without combining: route each `(K, V)` to its reducer.
pub(crate) fn write_plain<K: Data, V: Data, P: Partitioning<K>>(
    tc: &Rc<TaskContext>,
    dep: &ShuffleDependency,
    map: u32,
) -> Result<MapStatus> {
    let payload: WritePayload = decode("shuffle write", &dep.write_payload)?;
    let partitioner = P::load(&payload.partitioner, dep.num_reduce_partitions)?;
    let mut out = MapSide::<(K, V)>::new(tc, dep, map);
    for batch in tc.compute::<(K, V)>(dep.parent, map)? {
        for rec in batch? {
            out.write(partitioner.partition(&rec.0), &rec)?;
        }
    }
    out.finish(tc, dep, map)
}
