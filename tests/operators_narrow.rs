//! Narrow transformations and sources, each checked against the same computation in
//! plain Rust.

mod common;

use common::{ctx, sorted, SplitMix};
use ember::{Accumulator, Broadcast, Records};

fn data(n: i64) -> Vec<i64> {
    let mut rng = SplitMix::new(7);
    (0..n).map(|_| rng.below(1000) as i64 - 500).collect()
}

#[test]
fn map_filter_flat_map_preserve_order() {
    let c = ctx(2);
    let input = data(1000);
    let rdd = c.parallelize(input.clone(), 4);

    let mapped = rdd.map(|x: i64| x * 3 + 1).collect().unwrap();
    assert_eq!(mapped, input.iter().map(|x| x * 3 + 1).collect::<Vec<_>>());

    let filtered = rdd.filter(|x: &i64| x % 3 == 0).collect().unwrap();
    assert_eq!(
        filtered,
        input
            .iter()
            .copied()
            .filter(|x| x % 3 == 0)
            .collect::<Vec<_>>()
    );

    let flat = rdd
        .flat_map(|x: i64| (0..x.rem_euclid(4)).map(move |i| x + i).collect::<Vec<_>>())
        .collect()
        .unwrap();
    let expected: Vec<i64> = input
        .iter()
        .flat_map(|&x| (0..x.rem_euclid(4)).map(move |i| x + i))
        .collect();
    assert_eq!(flat, expected);

    // A map to a different type.
    let strings = rdd.map(|x: i64| format!("<{x}>")).collect().unwrap();
    assert_eq!(
        strings,
        input.iter().map(|x| format!("<{x}>")).collect::<Vec<_>>()
    );
    assert_eq!(rdd.map(|x: i64| x * 2).count().unwrap(), 1000);
}

#[test]
fn filter_removing_everything_and_flat_map_to_nothing() {
    let c = ctx(2);
    let rdd = c.parallelize(data(500), 3);
    assert!(rdd.filter(|_: &i64| false).collect().unwrap().is_empty());
    assert_eq!(rdd.filter(|_: &i64| false).count().unwrap(), 0);
    assert!(rdd
        .flat_map(|_: i64| Vec::<i64>::new())
        .collect()
        .unwrap()
        .is_empty());
}

#[test]
fn map_partitions_and_with_index() {
    let c = ctx(2);
    let input: Vec<i64> = (0..103).collect();
    let rdd = c.parallelize(input.clone(), 5);
    // Per-partition sums, in partition order.
    let sums = rdd
        .map_partitions(|it: Records<i64>| std::iter::once(it.sum::<i64>()))
        .collect()
        .unwrap();
    let expected: Vec<i64> = (0..5)
        .map(|i| input[i * 103 / 5..(i + 1) * 103 / 5].iter().sum())
        .collect();
    assert_eq!(sums, expected);
    assert_eq!(sums.iter().sum::<i64>(), input.iter().sum::<i64>());

    let tagged = rdd
        .map_partitions_with_index(|i: u32, it: Records<i64>| it.map(move |x| (i, x)))
        .collect()
        .unwrap();
    let mut exp = Vec::new();
    for i in 0..5usize {
        for &x in &input[i * 103 / 5..(i + 1) * 103 / 5] {
            exp.push((i as u32, x));
        }
    }
    assert_eq!(tagged, exp);

    // map_partitions that expands records beyond one batch (4096).
    let expanded = c
        .parallelize(vec![1i64, 2, 3], 2)
        .map_partitions(|it: Records<i64>| {
            it.flat_map(|x| std::iter::repeat_n(x, 5000))
                .collect::<Vec<_>>()
        })
        .collect()
        .unwrap();
    assert_eq!(expanded.len(), 15_000);
    assert_eq!(expanded.iter().sum::<i64>(), 5000 * 6);
    assert_eq!(expanded[..5000], [1; 5000]);
    assert_eq!(expanded[10_000..], [3; 5000]);
}

#[test]
fn map_partitions_with_index_with_state() {
    let c = ctx(2);
    let rdd = c.parallelize((0..20i64).collect(), 4);
    let out = rdd
        .map_partitions_with_index_with(100i64, |&base: &i64, i: u32, it: Records<i64>| {
            it.map(move |x| x + base * i64::from(i))
        })
        .collect()
        .unwrap();
    let expected: Vec<i64> = (0..20i64).map(|x| x + 100 * (x / 5)).collect();
    assert_eq!(out, expected);
}

#[test]
fn key_by_keys_records() {
    let c = ctx(2);
    let input = data(300);
    let out = c
        .parallelize(input.clone(), 3)
        .key_by(|x: &i64| x.rem_euclid(7))
        .collect()
        .unwrap();
    assert_eq!(
        out,
        input
            .iter()
            .map(|&x| (x.rem_euclid(7), x))
            .collect::<Vec<_>>()
    );
}

#[test]
fn glom_returns_one_vector_per_partition_including_empty_ones() {
    let c = ctx(2);
    let parts = c
        .parallelize((0..10i64).collect(), 3)
        .glom()
        .collect()
        .unwrap();
    assert_eq!(parts, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8, 9]]);

    // More partitions than elements: the empty partitions are still there.
    let rdd = c.parallelize(vec![1i64, 2, 3], 7);
    assert_eq!(rdd.num_partitions(), 7);
    let parts = rdd.glom().collect().unwrap();
    assert_eq!(parts.len(), 7);
    assert_eq!(parts.iter().filter(|p| p.is_empty()).count(), 4);
    assert_eq!(parts.concat(), vec![1, 2, 3]);
    assert_eq!(rdd.collect().unwrap(), vec![1, 2, 3]);
    assert_eq!(rdd.count().unwrap(), 3);
}

#[test]
fn parallelize_empty_and_more_partitions_than_elements() {
    let c = ctx(2);
    let empty = c.parallelize(Vec::<String>::new(), 4);
    assert_eq!(empty.num_partitions(), 4);
    assert!(empty.collect().unwrap().is_empty());
    assert_eq!(empty.count().unwrap(), 0);
    assert_eq!(
        empty.glom().collect().unwrap(),
        vec![Vec::<String>::new(); 4]
    );
    assert!(c.empty::<i32>().collect().unwrap().is_empty());

    let one = c.parallelize(vec!["only".to_string()], 8);
    assert_eq!(one.map(|s: String| s.len()).collect().unwrap(), vec![4]);
    // parallelize(n, 0) is an invalid argument (Spark: "Positive number of partitions
    // required"), reported by the first action.
    assert!(matches!(
        c.parallelize(vec![1u8, 2], 0).count(),
        Err(ember::EmberError::InvalidArgument(_))
    ));
}

#[test]
fn range_matches_std_range() {
    let c = ctx(2);
    assert_eq!(
        c.range(0, 100, 4).collect().unwrap(),
        (0..100).collect::<Vec<i64>>()
    );
    assert_eq!(
        c.range(-50, 37, 3).collect().unwrap(),
        (-50..37).collect::<Vec<i64>>()
    );
    assert_eq!(c.range(5, 5, 3).count().unwrap(), 0);
    assert_eq!(c.range(10, 0, 2).count().unwrap(), 0);
    let r = c.range(0, 3, 8);
    assert_eq!(r.num_partitions(), 8);
    assert_eq!(r.collect().unwrap(), vec![0, 1, 2]);
    assert_eq!(r.glom().collect().unwrap().len(), 8);
    // Bigger than a batch, partitions contiguous.
    let parts = c.range(0, 10_001, 3).glom().collect().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts.concat(), (0..10_001).collect::<Vec<i64>>());
    assert!(
        parts.iter().all(|p| (3333..=3334).contains(&p.len())),
        "{:?}",
        parts.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert_eq!(
        c.range(0, 100_000, 4)
            .map(|x: i64| x % 7)
            .reduce(|a, b| a + b)
            .unwrap(),
        (0..100_000i64).map(|x| x % 7).sum::<i64>()
    );
}

#[test]
fn union_concatenates_partitions() {
    let c = ctx(2);
    let a = c.parallelize((0..10i64).collect(), 3);
    let b = c.parallelize((100..105i64).collect(), 2);
    let u = a.union(&b);
    assert_eq!(u.num_partitions(), 5);
    let mut expected: Vec<i64> = (0..10).collect();
    expected.extend(100..105);
    assert_eq!(u.collect().unwrap(), expected);
    // Union with itself keeps duplicates.
    let twice = a.union(&a).collect().unwrap();
    assert_eq!(twice.len(), 20);
    assert_eq!(
        sorted(twice),
        sorted([(0..10i64).collect::<Vec<_>>(), (0..10).collect()].concat())
    );
    // Union with an empty RDD and of transformed RDDs.
    let e = c.parallelize(Vec::<i64>::new(), 2);
    assert_eq!(a.union(&e).collect().unwrap(), (0..10).collect::<Vec<_>>());
    let m = a.map(|x: i64| -x).union(&b.filter(|x: &i64| x % 2 == 0));
    assert_eq!(
        m.collect().unwrap(),
        vec![0, -1, -2, -3, -4, -5, -6, -7, -8, -9, 100, 102, 104]
    );
}

#[test]
fn coalesce_merges_contiguous_partitions() {
    let c = ctx(2);
    let input = data(1000);
    let rdd = c.parallelize(input.clone(), 8);
    let co = rdd.coalesce(3);
    assert_eq!(co.num_partitions(), 3);
    // Contiguous ranges of partitions: the order is kept.
    assert_eq!(co.collect().unwrap(), input);
    let parts = co.glom().collect().unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(parts.concat(), input);
    // Coalesce cannot increase the number of partitions.
    assert_eq!(rdd.coalesce(20).num_partitions(), 8);
    assert_eq!(rdd.coalesce(20).collect().unwrap(), input);
    assert_eq!(
        rdd.coalesce(1).glom().collect().unwrap(),
        vec![input.clone()]
    );
    // Spark: "Number of partitions (0) must be positive".
    assert!(matches!(
        rdd.coalesce(0).collect(),
        Err(ember::EmberError::InvalidArgument(_))
    ));
}

#[test]
fn sample_is_deterministic_and_a_subset() {
    let c = ctx(2);
    let input: Vec<i64> = (0..20_000).collect();
    let rdd = c.parallelize(input.clone(), 4);

    let s1 = rdd.sample(false, 0.1, 42).collect().unwrap();
    let s2 = rdd.sample(false, 0.1, 42).collect().unwrap();
    assert_eq!(s1, s2, "same seed, same sample");
    // Without replacement: a subset, no duplicates, order kept.
    assert!(
        s1.windows(2).all(|w| w[0] < w[1]),
        "sample without replacement repeats or reorders"
    );
    assert!(s1.iter().all(|x| (0..20_000).contains(x)));
    // Rough size: 2000 expected, sd ~42.
    assert!(
        (1700..=2300).contains(&s1.len()),
        "sample of 10% has {} of 20000",
        s1.len()
    );

    let s3 = rdd.sample(false, 0.1, 43).collect().unwrap();
    assert_ne!(s1, s3, "different seeds should give different samples");

    assert!(rdd.sample(false, 0.0, 1).collect().unwrap().is_empty());
    assert_eq!(rdd.sample(false, 1.0, 1).collect().unwrap(), input);
    assert!(rdd.sample(true, 0.0, 1).collect().unwrap().is_empty());

    // With replacement: every element comes from the input, size around fraction * n.
    let r1 = rdd.sample(true, 0.5, 9).collect().unwrap();
    assert_eq!(r1, rdd.sample(true, 0.5, 9).collect().unwrap());
    assert!(r1.iter().all(|x| (0..20_000).contains(x)));
    assert!(
        (9000..=11_000).contains(&r1.len()),
        "sample with replacement 0.5 has {}",
        r1.len()
    );
    let r2 = rdd.sample(true, 2.0, 9).count().unwrap();
    assert!(
        (37_000..=43_000).contains(&r2),
        "sample with replacement 2.0 has {r2}"
    );
}

#[test]
fn zip_with_index_numbers_records_in_order() {
    let c = ctx(2);
    let input: Vec<String> = (0..1000).map(|i| format!("r{i}")).collect();
    // Uneven partitions, some empty after the filter.
    let rdd = c
        .parallelize(input.clone(), 6)
        .filter(|s: &String| !s.ends_with('7'));
    let expected: Vec<(String, u64)> = input
        .iter()
        .filter(|s| !s.ends_with('7'))
        .cloned()
        .zip(0u64..)
        .collect();
    assert_eq!(rdd.zip_with_index().collect().unwrap(), expected);

    let sparse = c
        .parallelize(vec![10i64, 20], 5)
        .zip_with_index()
        .collect()
        .unwrap();
    assert_eq!(sparse, vec![(10, 0), (20, 1)]);
    assert!(c
        .parallelize(Vec::<i64>::new(), 3)
        .zip_with_index()
        .collect()
        .unwrap()
        .is_empty());
}

#[test]
fn with_variants_receive_state() {
    let c = ctx(2);
    let input = data(500);
    let rdd = c.parallelize(input.clone(), 4);

    let m = rdd
        .map_with((3i64, 7i64), |&(a, b): &(i64, i64), x: i64| a * x + b)
        .collect()
        .unwrap();
    assert_eq!(m, input.iter().map(|x| 3 * x + 7).collect::<Vec<_>>());

    let f = rdd
        .filter_with(100i64, |&limit: &i64, x: &i64| *x > limit)
        .collect()
        .unwrap();
    assert_eq!(
        f,
        input
            .iter()
            .copied()
            .filter(|&x| x > 100)
            .collect::<Vec<_>>()
    );

    let words = vec!["a".to_string(), "bb".to_string()];
    let fm = rdd
        .flat_map_with(words.clone(), |ws: &Vec<String>, x: i64| {
            ws.iter().map(|w| format!("{w}{x}")).collect::<Vec<_>>()
        })
        .collect()
        .unwrap();
    let expected: Vec<String> = input
        .iter()
        .flat_map(|x| words.iter().map(move |w| format!("{w}{x}")))
        .collect();
    assert_eq!(fm, expected);
}

#[test]
fn broadcast_used_in_map_with() {
    let c = ctx(2);
    let table: Vec<String> = (0..100).map(|i| format!("name{i}")).collect();
    let bc = c.broadcast(table.clone());
    assert_eq!(*bc.value(), table);
    let ids: Vec<usize> = (0..1000).map(|i| (i * 37) % 100).collect();
    let out = c
        .parallelize(ids.clone(), 4)
        .map_with(bc.clone(), |b: &Broadcast<Vec<String>>, i: usize| {
            b.value()[i].clone()
        })
        .collect()
        .unwrap();
    assert_eq!(
        out,
        ids.iter().map(|&i| table[i].clone()).collect::<Vec<_>>()
    );

    // Two broadcasts in one job, and a broadcast reused in a second job.
    let bc2 = c.broadcast(1000usize);
    let out2 = c
        .parallelize(ids.clone(), 3)
        .map_with(bc2, |b: &Broadcast<usize>, i: usize| i + *b.value())
        .map_with(bc, |b: &Broadcast<Vec<String>>, i: usize| {
            b.value()[i - 1000].len()
        })
        .collect()
        .unwrap();
    assert_eq!(
        out2,
        ids.iter().map(|&i| table[i].len()).collect::<Vec<_>>()
    );
}

#[test]
fn accumulator_in_map_with_counts_every_record() {
    let c = ctx(2);
    let acc: Accumulator<u64> = c.accumulator("seen");
    let n = c
        .parallelize(data(777), 5)
        .map_with(acc.clone(), |a: &Accumulator<u64>, x: i64| {
            a.add(1);
            x
        })
        .count()
        .unwrap();
    assert_eq!(n, 777);
    assert_eq!(acc.value(), 777);
}

#[test]
fn text_file_reads_every_line() {
    let c = ctx(2);
    let dir = std::env::temp_dir().join(format!(
        "ember-test-text-{}-{}",
        std::process::id(),
        SplitMix::new(1).next_u64()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("input.txt");
    let lines: Vec<String> = (0..5000)
        .map(|i| format!("line {i} {}", "x".repeat(i % 13)))
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let rdd = c.text_file(path.to_str().unwrap(), 4).unwrap();
    assert!(rdd.num_partitions() >= 4);
    assert_eq!(rdd.collect().unwrap(), lines);
    assert_eq!(rdd.count().unwrap(), 5000);
    assert!(c
        .text_file(dir.join("missing.txt").to_str().unwrap(), 2)
        .is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chained_narrow_operators_in_one_stage() {
    let c = ctx(2);
    let input = data(3000);
    let out = c
        .parallelize(input.clone(), 3)
        .map(|x: i64| x + 1)
        .filter(|x: &i64| x % 2 == 0)
        .flat_map(|x: i64| vec![x, -x])
        .key_by(|x: &i64| x.signum())
        .map(|(k, v): (i64, i64)| k * v)
        .collect()
        .unwrap();
    let expected: Vec<i64> = input
        .iter()
        .map(|x| x + 1)
        .filter(|x| x % 2 == 0)
        .flat_map(|x| [x, -x])
        .map(|x| x.signum() * x)
        .collect();
    assert_eq!(out, expected);
    let m = c.last_job_metrics().unwrap();
    assert_eq!(
        m.stages_run, 1,
        "narrow operators must pipeline in one stage"
    );
    assert_eq!(m.tasks, 3);
}

/// `named` (Spark's `setName`): the RDD shows the given name; a handle sharing it keeps
/// its own name and both compute the same records.
#[test]
fn named_gives_an_rdd_its_name_and_a_shared_one_a_step_of_its_own() {
    let ctx = ember::Context::local(2).unwrap();
    let fresh = ctx
        .parallelize((0..10u32).collect::<Vec<_>>(), 2)
        .map(|x: u32| x * 3)
        .named("tripled");
    assert_eq!(fresh.name(), "tripled");
    let shared = ctx
        .parallelize((0..10u32).collect::<Vec<_>>(), 2)
        .map(|x: u32| x + 1);
    let before = shared.name().to_string();
    let renamed = shared.clone().named(&"a very long name ".repeat(40));
    assert_eq!(shared.name(), before, "the other handle keeps its name");
    assert!(renamed.name().starts_with("a very long name"));
    assert!(renamed.name().chars().count() <= 256, "{}", renamed.name());
    assert_eq!(renamed.collect().unwrap(), shared.collect().unwrap());
    assert_eq!(
        fresh.collect().unwrap(),
        (0..10u32).map(|x| x * 3).collect::<Vec<_>>()
    );
}
