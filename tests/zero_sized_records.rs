//! Zero-sized records and keys (`()`, `((), ())`) go through shuffles and spills like any
//! other (Spark: `distinct` / `reduceByKey` on unit-like keys work).

mod common;

use common::*;

#[test]
fn unit_records_and_keys_shuffle_exactly() {
    let c = ctx(2);
    // distinct of units: one.
    let units = c.parallelize(vec![(); 1000], 7);
    assert_eq!(units.distinct().collect().unwrap(), vec![()]);
    assert_eq!(units.repartition(13).count().unwrap(), 1000);
    // A unit key with unit values: reduce, group and count them.
    let pairs = c.parallelize(vec![((), ()); 500], 5);
    assert_eq!(
        pairs.reduce_by_key(|_, _| ()).collect().unwrap(),
        vec![((), ())]
    );
    let groups = pairs.group_by_key().collect().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].1.len(), 500);
    let counted = c
        .parallelize(vec![(); 300], 3)
        .map(|u: ()| (u, 1u64))
        .reduce_by_key(|a, b| a + b)
        .collect()
        .unwrap();
    assert_eq!(counted, vec![((), 300)]);
    // Unit values beside real keys, and a sort by a real key with unit values.
    let keyed = c.parallelize((0..100u32).map(|k| (k % 10, ())).collect::<Vec<_>>(), 4);
    assert_eq!(sorted(keyed.distinct().collect().unwrap()).len(), 10);
    let sorted_keys = keyed.sort_by_key_into(true, 3).keys().collect().unwrap();
    let mut want: Vec<u32> = (0..100).map(|k| k % 10).collect();
    want.sort();
    assert_eq!(sorted_keys, want);
}

#[test]
fn unit_records_survive_spilling() {
    // A tiny memory limit (as tests/spill.rs uses) makes the sort spill.
    let c = ctx_mem(2, 256 * 1024);
    let n = 200_000usize;
    let pairs = c.parallelize((0..n as u32).map(|i| (i % 3, ())).collect::<Vec<_>>(), 4);
    let groups = sorted(
        pairs
            .group_by_key()
            .map(|(k, vs): (u32, Vec<()>)| (k, vs.len()))
            .collect()
            .unwrap(),
    );
    assert_eq!(groups, vec![(0, 66_667), (1, 66_667), (2, 66_666)]);
    let units = c.parallelize(vec![(); n], 4);
    assert_eq!(units.repartition(5).count().unwrap(), n as u64);
    // Distinct real keys with unit values: the sort spills its runs of (key, ()).
    let keyed = c.parallelize((0..n as u32).rev().map(|k| (k, ())).collect::<Vec<_>>(), 4);
    let keys = keyed.sort_by_key_into(true, 2).keys().collect().unwrap();
    let spilled = c.last_job_metrics().unwrap().totals.bytes_spilled;
    assert!(spilled > 0, "the sort was meant to spill");
    assert_eq!(keys, (0..n as u32).collect::<Vec<_>>());
}
