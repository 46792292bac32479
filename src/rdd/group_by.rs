//! `group_by` (Spark's `groupBy(f)`, with its default partition count, /
//! `groupBy(f, numPartitions)`): the records grouped
//! by the key a function computes for each, `Rdd<(K, Vec<T>)>`.
//!
//! Invariants: built as `key_by(f).group_by_key_into(n)`, so it has `group_by_key`'s
//! properties (one hash shuffle, no map-side combine, spills when memory runs short);
//! every record is in exactly one group, each key appears once; the order of a group's
//! records is not defined. A partition count of 0 (for a non-empty input) is an
//! invalid-argument error at the first action.

use std::panic::Location;

use super::pair::rename;
use super::Rdd;
use crate::closure::assert_stateless;
use crate::data::{Data, Key};

impl<T: Data> Rdd<T> {
    /// The records grouped by `f(record)`, partitioned as Spark's `groupBy(f)` is, by
    /// Spark's default partitioner of this RDD: as many hash partitions as this RDD has
    /// if it has a partitioner, else the configured default parallelism if set, else
    /// this RDD's partition count.
    #[track_caller]
    pub fn group_by<K: Key, F: Fn(&T) -> K + 'static>(&self, f: F) -> Rdd<(K, Vec<T>)> {
        let _capture_f = assert_stateless(&f);
        let at = Location::caller();
        let n = match self.node.partitioner.as_ref() {
            Some(p) if p.num_partitions() > 0 => p.num_partitions(),
            _ => self
                .ctx
                .configured_shuffle_partitions()
                .unwrap_or(self.num_partitions()),
        };
        let mut rdd = self.key_by(f).group_by_key_into(n);
        rename(&mut rdd, "group_by", at);
        rdd
    }

    /// [`group_by`](Self::group_by) into `partitions` hash partitions.
    #[track_caller]
    pub fn group_by_into<K: Key, F: Fn(&T) -> K + 'static>(
        &self,
        f: F,
        partitions: usize,
    ) -> Rdd<(K, Vec<T>)> {
        let _capture_f = assert_stateless(&f);
        let at = Location::caller();
        let mut rdd = self.key_by(f).group_by_key_into(partitions);
        rename(&mut rdd, "group_by", at);
        rdd
    }
}
