//! Packing splits into partitions, so that a directory of many small files becomes a
//! few partitions of useful size instead of one task per file (Spark's file sources
//! with `maxPartitionBytes` and `openCostInBytes`, Hadoop's `CombineFileInputFormat`).
//!
//! Invariants:
//! - Every split is in exactly one partition, and partitions list splits in the order
//!   [`plan_splits`](super::plan_splits) gave them (by file, then offset): reading the
//!   partitions in order reads every line of the input once, in file order, exactly as
//!   one split per partition would.
//! - A split costs its length plus the open cost. A partition's cost stays within the
//!   capacity `min(total cost / min_partitions, max_partition_bytes)`, unless it holds a
//!   single split larger than that (big files are cut by [`plan_splits`] already).
//! - There are at least `min(min_partitions, splits)` partitions.

use super::FileSplit;

/// How splits are packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// What opening a file is reckoned to cost, in bytes of reading (Spark's
    /// `spark.sql.files.openCostInBytes`).
    pub open_cost: u64,
    /// Most bytes (open costs included) a partition is packed to (Spark's
    /// `spark.sql.files.maxPartitionBytes`).
    pub max_partition_bytes: u64,
}

/// 32 MiB per partition and 1 MiB per file opened: a quarter of Spark's 128 MiB and
/// 4 MiB, so a directory of small files packs as many files into a partition as Spark
/// would. A map task holds its shuffle output in memory until the pool says spill, so
/// smaller tasks reuse the same memory task after task instead of faulting in fresh
/// pages: on the 50 M-record kv set (`local[2]`, release) kvsum went from 5.1 s to 4.6 s,
/// sort from 9.0 s to 8.0 s with peak RSS from 1.2 GB to 0.7 GB, wordcount unchanged.
pub const DEFAULT_PACKING: Packing = Packing {
    open_cost: 1 << 20,
    max_partition_bytes: 32 << 20,
};

/// Packs `splits` (in order) into at least `min(min_partitions, splits.len())`
/// partitions; see the module invariants.
pub fn pack_splits(
    splits: Vec<FileSplit>,
    min_partitions: usize,
    packing: Packing,
) -> Vec<Vec<FileSplit>> {
    let cost = |s: &FileSplit| {
        s.end
            .saturating_sub(s.start)
            .saturating_add(packing.open_cost)
    };
    let total: u64 = splits.iter().fold(0u64, |a, s| a.saturating_add(cost(s)));
    let capacity = (total / min_partitions.max(1) as u64)
        .min(packing.max_partition_bytes)
        .max(1);
    let wanted = min_partitions.min(splits.len());
    let mut parts: Vec<Vec<FileSplit>> = Vec::new();
    let mut current: Vec<FileSplit> = Vec::new();
    let mut used = 0u64;
    for s in &splits {
        let c = cost(s);
        if !current.is_empty() && used.saturating_add(c) > capacity {
            parts.push(std::mem::take(&mut current));
            used = 0;
        }
        used = used.saturating_add(c);
        current.push(s.clone());
    }
    if !current.is_empty() {
        parts.push(current);
    }
    if parts.len() < wanted {
        // Uneven pieces left fewer partitions than asked for: one split each.
        return splits.into_iter().map(|s| vec![s]).collect();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::sync::Arc;

    fn split(name: &str, start: u64, end: u64) -> FileSplit {
        FileSplit {
            path: Arc::from(Path::new(name)),
            start,
            end,
        }
    }

    const P: Packing = Packing {
        open_cost: 10,
        max_partition_bytes: 100,
    };

    #[test]
    fn small_files_share_partitions_in_order_up_to_the_capacity() {
        // Ten files of 20 bytes: cost 30 each, 300 in all; min 1 -> capacity 100.
        let splits: Vec<FileSplit> = (0..10).map(|i| split(&format!("f{i}"), 0, 20)).collect();
        let parts = pack_splits(splits.clone(), 1, P);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 3, 1]);
        assert_eq!(parts.concat(), splits);
        // min_partitions 5 -> capacity 60: two files each.
        let parts = pack_splits(splits.clone(), 5, P);
        assert_eq!(parts.len(), 5);
        assert_eq!(parts.concat(), splits);
    }

    #[test]
    fn a_big_split_stands_alone_and_min_partitions_is_kept() {
        let splits = vec![
            split("a", 0, 5),
            split("big", 0, 500),
            split("b", 0, 5),
            split("c", 0, 5),
        ];
        let parts = pack_splits(splits.clone(), 1, P);
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 2]);
        assert_eq!(parts.concat(), splits);
        // At least min(min_partitions, splits) partitions, whatever the sizes.
        for m in 1..=6 {
            let parts = pack_splits(splits.clone(), m, P);
            assert!(parts.len() >= m.min(splits.len()), "m={m}: {}", parts.len());
            assert_eq!(parts.concat(), splits);
        }
        assert!(pack_splits(Vec::new(), 3, P).is_empty());
    }
}
