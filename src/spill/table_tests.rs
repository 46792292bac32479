//! Tests of the aggregation table: insert order through partitioning and staging, float
//! sums, anchors, and staging's charge.

use super::*;
use crate::spill::test_data::{records, Collect};
use foldhash::fast::FixedState;
use std::collections::HashMap;

/// Sums floats left to right: a different grouping would change low bits.
struct SumF;
impl Aggregate<u64, f64, f64> for SumF {
    fn create(&self, _: &u64, v: f64) -> f64 {
        v
    }
    fn merge_value(&self, c: &mut f64, v: f64) {
        *c += v;
    }
    fn merge_combiners(&self, c: &mut f64, o: f64) {
        *c += o;
    }
}

/// Every key's records fold in insert order through a partitioned, staging table,
/// for keys of type `K` made from the test records' `u64` keys by `key`.
fn folds_every_key_in_insert_order<K>(key: impl Fn(u64) -> K)
where
    K: Hash + Eq + Clone + Serialize + std::fmt::Debug + 'static,
{
    let hasher = FixedState::default();
    let keys = PARTITION_AT * 3;
    let recs = records(keys * 6, keys, 7);
    let mut table: AggTable<K, u32, Vec<u32>> = AggTable::new();
    let mut expected: HashMap<K, Vec<u32>> = HashMap::new();
    let mut max_staged = 0;
    for (i, (k, _)) in recs.iter().enumerate() {
        let seq = i as u32;
        let k = key(*k);
        let hash = hasher.hash_one(&k);
        // All three ways in: a value, a combiner of two, and a borrowed key.
        match i % 997 {
            3 | 400 => {
                expected.entry(k.clone()).or_default().extend([seq, seq]);
                table.upsert(
                    &Collect,
                    &hasher,
                    hash,
                    k,
                    Pending::Combiner(vec![seq, seq]),
                );
            }
            5 => {
                // Rare: each one drains its key's bucket early.
                table.upsert_ref(&Collect, &hasher, hash, &k, seq, K::clone);
                expected.entry(k).or_default().push(seq);
            }
            _ => {
                expected.entry(k.clone()).or_default().push(seq);
                table.upsert(&Collect, &hasher, hash, k, Pending::Value(seq));
            }
        }
        max_staged = max_staged.max(table.staged());
    }
    assert_eq!(table.mask, FANOUT - 1, "the table split into sub-tables");
    assert!(
        max_staged >= STAGE_MIN / 2,
        "records were staged: {max_staged}"
    );
    table.settle(&Collect, &hasher);
    assert_eq!(table.keys(), expected.len());
    let mut got: HashMap<K, Vec<u32>> = HashMap::new();
    for (k, c) in table.take_entries() {
        assert!(got.insert(k.clone(), c).is_none(), "key {k:?} held twice");
    }
    assert_eq!(got, expected);
    assert_eq!(table.keys(), 0);
}

#[test]
fn a_partitioned_table_folds_every_key_in_insert_order() {
    // A `u64` key's hash is recomputed on apply; a `String` key's is staged with it.
    assert!(rehashed_on_apply::<u64>());
    assert!(!rehashed_on_apply::<String>());
    folds_every_key_in_insert_order(|k| k);
    folds_every_key_in_insert_order(|k| format!("key-{k}"));
}

#[test]
fn float_sums_are_bit_identical_to_a_left_fold_in_record_order() {
    let hasher = FixedState::default();
    let keys = PARTITION_AT * 2;
    let recs = records(keys * 5, keys, 11);
    let mut table: AggTable<u64, f64, f64> = AggTable::new();
    let mut expected: HashMap<u64, f64> = HashMap::new();
    for (i, (k, v)) in recs.iter().enumerate() {
        let x = (v.len() as f64) / 3.0 + (i % 97) as f64 * 1e-7;
        table.upsert(&SumF, &hasher, hasher.hash_one(k), *k, Pending::Value(x));
        expected.entry(*k).and_modify(|c| *c += x).or_insert(x);
    }
    table.settle(&SumF, &hasher);
    let got: HashMap<u64, u64> = table
        .take_entries()
        .map(|(k, c)| (k, c.to_bits()))
        .collect();
    let want: HashMap<u64, u64> = expected
        .into_iter()
        .map(|(k, c)| (k, c.to_bits()))
        .collect();
    assert_eq!(got, want);
}

/// Every table's anchor puts each entry where hashbrown really keeps it, through
/// growth, the split into sub-tables and a spill's emptying (a hashbrown that moved
/// its layout would make the prefetches useless; this says so).
#[test]
fn anchors_locate_every_entry_where_hashbrown_keeps_it() {
    fn check(table: &AggTable<u64, u32, Vec<u32>>) -> usize {
        let size = std::mem::size_of::<(u64, Vec<u32>)>();
        let mut checked = 0;
        for (t, a) in table.tables.iter().zip(&table.anchors) {
            if t.is_empty() {
                continue;
            }
            assert_eq!(a.mask + 1, t.num_buckets());
            for i in t.iter_buckets() {
                let e = t.get_bucket(i).expect("a full bucket") as *const _ as usize;
                assert_eq!(a.ctrl - (i + 1) * size, e, "bucket {i}");
                checked += 1;
            }
        }
        checked
    }
    let hasher = FixedState::default();
    let mut table: AggTable<u64, u32, Vec<u32>> = AggTable::new();
    let mut k = 0u64;
    for until in [
        1,
        3,
        100,
        5000,
        PARTITION_AT - 1,
        PARTITION_AT,
        3 * PARTITION_AT,
    ] {
        while (k as usize) < until {
            table.upsert_ref(&Collect, &hasher, hasher.hash_one(k), &k, 1, |k| *k);
            k += 1;
        }
        assert_eq!(check(&table), until);
    }
    assert_eq!(table.mask, FANOUT - 1);
    table.take_entries().for_each(drop);
    assert!(table.anchors.iter().all(|a| a.ctrl == 0));
    for k in 0..1000u64 {
        table.upsert_ref(&Collect, &hasher, hasher.hash_one(k), &k, 1, |k| *k);
    }
    assert_eq!(check(&table), 1000);
}

#[test]
fn staged_records_are_charged_and_released() {
    let hasher = FixedState::default();
    let mut table: AggTable<u64, u32, Vec<u32>> = AggTable::new();
    for k in 0..PARTITION_AT as u64 {
        table.upsert(&Collect, &hasher, hasher.hash_one(k), k, Pending::Value(1));
    }
    assert_eq!(table.mask, FANOUT - 1);
    // The buckets are sized for a full batch as the table splits, and charged from then.
    let slot = std::mem::size_of::<Staged<u64, u32, Vec<u32>>>() as u64;
    let slots = |t: &AggTable<u64, u32, Vec<u32>>| -> u64 {
        t.buckets.iter().map(|b| b.capacity() as u64).sum()
    };
    assert!(slots(&table) >= STAGE_MIN as u64, "{}", slots(&table));
    for i in 0..10_000u64 {
        let k = i % 1000;
        table.upsert(&Collect, &hasher, hasher.hash_one(k), k, Pending::Value(2));
    }
    assert_eq!(table.staged(), 10_000);
    let staged = table.estimated_bytes();
    table.settle(&Collect, &hasher);
    assert_eq!(table.staged(), 0);
    assert!(slots(&table) >= STAGE_MIN as u64, "kept for the next batch");
    table.release_staging();
    assert_eq!(slots(&table), 0);
    let released = table.estimated_bytes();
    assert!(
        staged >= released + STAGE_MIN as u64 * slot,
        "staging slots were charged and are no longer: {staged} -> {released}"
    );
}
