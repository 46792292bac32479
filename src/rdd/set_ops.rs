//! Set-like operators on RDDs of hashable records, as Spark defines them:
//! `subtract` (the left side's records whose value does not occur on the right,
//! duplicates kept, the left side's partition count) and `intersection` (the distinct
//! records on both sides, the larger partition count). Both are one cogroup.

use std::panic::Location;

use super::Rdd;
use crate::data::Key;

impl<T: Key> Rdd<T> {
    /// The records of this RDD that do not occur in `other` (each kept as often as it
    /// occurs here), in as many partitions as this RDD has.
    #[track_caller]
    pub fn subtract(&self, other: &Rdd<T>) -> Rdd<T> {
        let at = Location::caller();
        if self.num_partitions() == 0 {
            return self.context().empty();
        }
        let left = self.map(|x: T| (x, ()));
        let right = other.map(|x: T| (x, ()));
        let mut rdd = left.cogroup_into(&right, self.num_partitions()).flat_map(
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

    /// The distinct records that occur in both this RDD and `other`.
    #[track_caller]
    pub fn intersection(&self, other: &Rdd<T>) -> Rdd<T> {
        let at = Location::caller();
        let left = self.map(|x: T| (x, ()));
        let right = other.map(|x: T| (x, ()));
        let mut rdd = left
            .cogroup(&right)
            .flat_map(|(k, (l, r)): (T, (Vec<()>, Vec<()>))| {
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
