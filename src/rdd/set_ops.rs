//! Set-like operators on RDDs of hashable records, as Spark defines them:
//! `subtract` (the left side's records whose value does not occur on the right,
//! duplicates kept, the left side's partition count) and `intersection` (the distinct
//! records on both sides, Spark's default partitioner's count), each with an `_into`
//! variant taking the partition count. Both are one cogroup.

use std::panic::Location;

use super::Rdd;
use crate::data::Key;

impl<T: Key> Rdd<T> {
    /// The records of this RDD that do not occur in `other` (each kept as often as it
    /// occurs here), in as many partitions as this RDD has (Spark's `subtract(other)`).
    #[track_caller]
    pub fn subtract(&self, other: &Rdd<T>) -> Rdd<T> {
        if self.num_partitions() == 0 {
            return self.context().empty();
        }
        self.subtract_into(other, self.num_partitions())
    }

    /// [`subtract`](Self::subtract) into `partitions` hash partitions (Spark's
    /// `subtract(other, numPartitions)`).
    #[track_caller]
    pub fn subtract_into(&self, other: &Rdd<T>, partitions: usize) -> Rdd<T> {
        let at = Location::caller();
        let left = self.map(|x: T| (x, ()));
        let right = other.map(|x: T| (x, ()));
        let mut rdd = left.cogroup_into(&right, partitions).flat_map(
            |(k, (l, r)): (T, (Vec<()>, Vec<()>))| {
                if r.is_empty() {
                    vec![k; l.len()]
                } else {
                    Vec::new()
                }
            },
        );
        super::pair::rename(&mut rdd, "subtract", at);
        rdd
    }

    /// The distinct records that occur in both this RDD and `other`, partitioned by
    /// Spark's default partitioner (hash partitioning into the configured default
    /// parallelism or the larger side's partition count).
    #[track_caller]
    pub fn intersection(&self, other: &Rdd<T>) -> Rdd<T> {
        self.intersection_to(other, None)
    }

    /// [`intersection`](Self::intersection) into `partitions` hash partitions (Spark's
    /// `intersection(other, numPartitions)`).
    #[track_caller]
    pub fn intersection_into(&self, other: &Rdd<T>, partitions: usize) -> Rdd<T> {
        self.intersection_to(other, Some(partitions))
    }

    #[track_caller]
    fn intersection_to(&self, other: &Rdd<T>, partitions: Option<usize>) -> Rdd<T> {
        let at = Location::caller();
        let left = self.map(|x: T| (x, ()));
        let right = other.map(|x: T| (x, ()));
        let groups = match partitions {
            Some(n) => left.cogroup_into(&right, n),
            None => left.cogroup(&right),
        };
        let mut rdd = groups.flat_map(|(k, (l, r)): (T, (Vec<()>, Vec<()>))| {
            if !l.is_empty() && !r.is_empty() {
                vec![k]
            } else {
                Vec::new()
            }
        });
        super::pair::rename(&mut rdd, "intersection", at);
        rdd
    }
}
