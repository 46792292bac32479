//! `sample_by_key_exact` (Spark's `sampleByKeyExact`): a stratified sample holding
//! exactly `ceil(fraction_k * count_k)` records of each key `k` (without replacement;
//! with replacement exactly that many draws).
//!
//! How: one job counts the records of each key in each partition. The driver then
//! decides, for each key, how many of its sample records come from each partition: a
//! uniformly random set of `s` of the key's `n` positions (Floyd's algorithm, on the
//! complement when `s > n / 2`) without replacement, `s` independent uniform positions
//! with replacement. Each task then takes its share: selection sampling (Knuth's
//! algorithm S: keep a record with probability `still needed / still left`) without
//! replacement, its share of uniform positions among its records of the key with
//! replacement.
//!
//! Invariants: for an input that computes the same records in the same order each time
//! (as Spark also requires), the sample has exactly the sizes above, without
//! replacement no record twice, and the same seed gives the same sample. Every key of
//! the RDD needs a fraction (else an invalid-argument error); fractions must be finite,
//! `>= 0` and, without replacement, `<= 1`. The shares (one entry per key and partition)
//! travel with the plan, so the number of distinct keys times partitions must stay
//! modest; the driver holds `min(s, n - s)` positions of one key at a time (with
//! replacement it draws `s` positions without holding them), and a task holds, with
//! replacement, its share of positions.

use std::collections::{HashMap, HashSet};
use std::panic::Location;

use rand::{Rng, SeedableRng};

use super::pair::rename;
use super::partition_op::Records;
use super::Rdd;
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};

/// One key's share in one partition: (key, records of the key there, sample records).
type Share<K> = (K, u64, u64);

/// What every task of the sample gets: replacement, seed, each partition's shares.
type Plan<K> = (bool, u64, Vec<Vec<Share<K>>>);

/// The random stream of partition `index` for `seed`.
fn partition_rng(seed: u64, index: u32) -> rand_pcg::Pcg64Mcg {
    rand_pcg::Pcg64Mcg::seed_from_u64(
        seed ^ 0x5eed_e8ac ^ u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    )
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// A stratified sample with exactly `ceil(fractions[k] * count of k)` records of
    /// each key `k` (with replacement: that many draws). Runs one job to count the
    /// records of each key in each partition. Every key of the RDD needs a fraction.
    #[track_caller]
    pub fn sample_by_key_exact(
        &self,
        with_replacement: bool,
        fractions: HashMap<K, f64>,
        seed: u64,
    ) -> Result<Rdd<(K, V)>> {
        let at = Location::caller();
        if let Some(bad) = fractions
            .values()
            .find(|f| !(f.is_finite() && **f >= 0.0 && (with_replacement || **f <= 1.0)))
        {
            return Err(EmberError::InvalidArgument(format!(
                "sample_by_key_exact fractions must be finite, >= 0 and (without replacement) <= 1; got {bad}"
            )));
        }
        // Per partition, each key's record count, keys in order of first appearance (so
        // the driver's draws below do not depend on hash-map order).
        let counts: Vec<Vec<(K, u64)>> = self
            .map_partitions(|it: Records<(K, V)>| {
                let mut index: HashMap<K, usize> = HashMap::new();
                let mut counts: Vec<(K, u64)> = Vec::new();
                for (k, _) in it {
                    match index.get(&k) {
                        Some(&i) => counts[i].1 += 1,
                        None => {
                            index.insert(k.clone(), counts.len());
                            counts.push((k, 1));
                        }
                    }
                }
                std::iter::once(counts)
            })
            .collect()?;
        // Each key's partitions and counts there, keys in order of first appearance.
        let mut keys: Vec<K> = Vec::new();
        let mut per_key: HashMap<K, Vec<(usize, u64)>> = HashMap::new();
        for (p, part) in counts.iter().enumerate() {
            for (k, c) in part {
                if !fractions.contains_key(k) {
                    return Err(EmberError::InvalidArgument(format!(
                        "sample_by_key_exact at {}:{}: a key of the RDD (in partition {p}) has no sampling fraction (every key needs one)",
                        at.file(),
                        at.line()
                    )));
                }
                per_key
                    .entry(k.clone())
                    .or_insert_with(|| {
                        keys.push(k.clone());
                        Vec::new()
                    })
                    .push((p, *c));
            }
        }
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
        let mut shares: Vec<Vec<Share<K>>> = vec![Vec::new(); counts.len()];
        for k in keys {
            let parts = &per_key[&k];
            let n: u64 = parts.iter().map(|(_, c)| c).sum();
            let size = (fractions[&k] * n as f64).ceil() as u64;
            let size = if with_replacement { size } else { size.min(n) };
            let counts: Vec<u64> = parts.iter().map(|(_, c)| *c).collect();
            let taken = allocate(&mut rng, &counts, size, with_replacement);
            for ((p, c), s) in parts.iter().zip(taken) {
                shares[*p].push((k.clone(), *c, s));
            }
        }
        let plan: Plan<K> = (with_replacement, seed, shares);
        let mut rdd = self.map_partitions_with_index_with(
            plan,
            |(with_replacement, seed, shares): &Plan<K>, index: u32, it: Records<(K, V)>| {
                let mine = shares.get(index as usize).cloned().unwrap_or_default();
                take_share(*with_replacement, partition_rng(*seed, index), mine, it)
            },
        );
        rename(&mut rdd, "sample_by_key_exact", at);
        Ok(rdd)
    }
}

/// How many of `size` sample positions fall in each of the consecutive ranges of
/// `counts` records: a uniform `size`-subset of the positions without replacement,
/// `size` independent uniform positions with replacement.
fn allocate(rng: &mut impl Rng, counts: &[u64], size: u64, with_replacement: bool) -> Vec<u64> {
    let n: u64 = counts.iter().sum();
    let mut taken = vec![0u64; counts.len()];
    if n == 0 || size == 0 {
        return taken;
    }
    // Range i is [ends[i] - counts[i], ends[i]).
    let ends: Vec<u64> = counts
        .iter()
        .scan(0u64, |acc, c| {
            *acc += c;
            Some(*acc)
        })
        .collect();
    let range_of = |pos: u64| ends.partition_point(|&e| e <= pos);
    if with_replacement {
        for _ in 0..size {
            taken[range_of(rng.gen_range(0..n))] += 1;
        }
        return taken;
    }
    // Floyd's algorithm picks `m` distinct positions of `n` with `m` draws; pick the
    // smaller of the sample and its complement.
    let complement = size > n / 2;
    let m = if complement { n - size } else { size };
    let mut chosen: HashSet<u64> = HashSet::with_capacity(m as usize);
    for j in n - m..n {
        let t = rng.gen_range(0..=j);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    for pos in chosen {
        taken[range_of(pos)] += 1;
    }
    if complement {
        for (t, c) in taken.iter_mut().zip(counts) {
            *t = c - *t;
        }
    }
    taken
}

/// The sample records of one partition: `share` says, per key, how many records it
/// has and how many of them (or draws among them) the sample takes.
fn take_share<K: Key, V: Data>(
    with_replacement: bool,
    mut rng: rand_pcg::Pcg64Mcg,
    share: Vec<Share<K>>,
    it: Records<(K, V)>,
) -> impl Iterator<Item = (K, V)> {
    // Per key: (its records here, records still to come, sample records still to
    // take, and with replacement the sorted positions drawn among its records).
    let mut left: HashMap<K, (u64, u64, u64, std::vec::IntoIter<u64>)> = HashMap::new();
    for (k, count, take) in share {
        let positions = if with_replacement && count > 0 {
            let mut p: Vec<u64> = (0..take).map(|_| rng.gen_range(0..count)).collect();
            p.sort_unstable();
            p
        } else {
            Vec::new()
        };
        left.insert(k, (count, count, take, positions.into_iter()));
    }
    it.flat_map(move |(k, v)| {
        let copies = match left.get_mut(&k) {
            // A key the counting job did not see (the input changed): not sampled.
            None => 0,
            Some((count, remaining, needed, positions)) => {
                let copies = if with_replacement {
                    // This record's position among the key's records here.
                    let i = *count - *remaining;
                    let mut copies = 0usize;
                    while positions.as_slice().first() == Some(&i) {
                        positions.next();
                        copies += 1;
                    }
                    copies
                } else if *needed > 0 && rng.gen_range(0..(*remaining).max(1)) < *needed {
                    *needed -= 1;
                    1
                } else {
                    0
                };
                *remaining = remaining.saturating_sub(1);
                copies
            }
        };
        std::iter::repeat_n((k, v), copies)
    })
}
