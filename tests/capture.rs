//! `ember::capture!`: closures that carry named values. The values travel with the
//! plan and come back in every task, per operator: the same call site with different
//! values in one stage (a loop) gives each node its own, on both sides of a shuffle
//! and in actions. Results are checked against plain Rust over the same data.

mod common;

use common::{ctx, random_pairs, ref_reduce, sorted};
use ember::capture;

fn words() -> Vec<String> {
    "the quick brown fox jumps over the lazy dog and the cat sat on a mat"
        .split(' ')
        .map(String::from)
        .collect()
}

#[test]
fn copy_and_owned_values_reach_every_task() {
    let c = ctx(2);
    let min = 4;
    let stop = vec!["over".to_string(), "jumps".to_string()];
    let got = c
        .parallelize(words(), 3)
        .filter(capture!(min, stop => |w: &String| w.len() >= min && !stop.contains(w)))
        .collect()
        .unwrap();
    let want: Vec<String> = words()
        .into_iter()
        .filter(|w| w.len() >= 4 && w != "over" && w != "jumps")
        .collect();
    assert_eq!(got, want);
    let suffix = String::from("!");
    let shout = c
        .parallelize(words(), 2)
        .map(capture!(suffix => |w: String| format!("{w}{suffix}")))
        .collect()
        .unwrap();
    assert_eq!(shout[0], "the!");
    assert_eq!(shout.len(), words().len());
}

#[test]
fn a_loop_gives_each_node_its_own_values() {
    let c = ctx(2);
    let mut rdd = c.parallelize((0..1000u64).collect::<Vec<_>>(), 4);
    // Ten filters of one call site in one stage, each with another value.
    for t in 0..10u64 {
        rdd = rdd.filter(capture!(t => |x: &u64| x % 10 != t || x % 20 == t));
    }
    let want: Vec<u64> = (0..1000u64).filter(|x| x % 20 < 10).collect();
    assert_eq!(rdd.collect().unwrap(), want);
    // And across shuffles: an iteration per value, as an iterative job does.
    let mut sums = c.parallelize(random_pairs(3, 2000, 50), 3);
    let mut plain: Vec<(u64, i64)> = sums.collect().unwrap();
    for step in 1..=5i64 {
        sums = sums
            .map_values(capture!(step => |v: i64| v * step % 1_000_003))
            .reduce_by_key(capture!(step => |a: i64, b: i64| (a + b + step) % 1_000_003));
        let mapped: Vec<(u64, i64)> = plain
            .iter()
            .map(|(k, v)| (*k, v * step % 1_000_003))
            .collect();
        plain = ref_reduce(&mapped, |a, b| (a + b + step) % 1_000_003);
    }
    assert_eq!(sorted(sums.collect().unwrap()), plain);
}

#[test]
fn aggregations_and_actions_carry_their_values() {
    let c = ctx(2);
    let data = random_pairs(9, 5000, 100);
    let m = 97i64;
    let reduced = c
        .parallelize(data.clone(), 4)
        .reduce_by_key(capture!(m => |a: i64, b: i64| (a + b).rem_euclid(m)));
    let want = ref_reduce(&data, |a, b| (a + b).rem_euclid(97));
    assert_eq!(sorted(reduced.collect().unwrap()), want);
    // On data partitioned alike the aggregation runs without a shuffle: same answer.
    let parted = c.parallelize(data.clone(), 4).partition_by(3);
    let narrow = parted.reduce_by_key(capture!(m => |a: i64, b: i64| (a + b).rem_euclid(m)));
    assert_eq!(sorted(narrow.collect().unwrap()), want);
    // An action's own function.
    let k = 3i64;
    let total = c
        .parallelize((1..=100i64).collect::<Vec<_>>(), 4)
        .reduce(capture!(k => |a: i64, b: i64| a + b * k - b * (k - 1)))
        .unwrap();
    assert_eq!(total, 5050);
    // Keyed and sorted by a captured function.
    let base = 10u64;
    let sorted_rdd = c
        .parallelize((0..50u64).collect::<Vec<_>>(), 3)
        .sort_by_into(capture!(base => |x: &u64| (x % base, *x)), true, 2);
    let mut want: Vec<u64> = (0..50).collect();
    want.sort_by_key(|x| (x % 10, *x));
    assert_eq!(sorted_rdd.collect().unwrap(), want);
}

#[test]
fn two_closures_of_one_site_made_before_use_are_refused() {
    let c = ctx(2);
    let make = |n: u64| capture!(n => |x: &u64| *x > n);
    let first = make(1);
    let second = make(2);
    let rdd = c.parallelize(vec![1u64, 2, 3], 2);
    let err = rdd.filter(second).count().unwrap_err().to_string();
    assert!(
        err.contains("made several times with different values"),
        "{err}"
    );
    // Handed on one at a time, the same site works (the older one is still pending:
    // refuse until it is used or the thread's pending closures are gone).
    drop(first);
}
