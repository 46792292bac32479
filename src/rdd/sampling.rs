//! Sampling actions and splits as Spark defines them: `random_split` (disjoint,
//! covering splits by normalised weights: every split draws the same per-partition
//! random sequence and keeps the records whose draw falls in its range) and
//! `take_sample` (an exact-size sample: count, sample with a fraction that over-shoots
//! with high probability, retry if short, shuffle and cut).
//!
//! Invariants: for a deterministic input, each `random_split` seed gives splits that
//! are disjoint and together hold every record once; `take_sample` without replacement
//! returns `min(num, count)` distinct records (by position), with replacement `num`.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::partition_op::Records;
use super::Rdd;
use crate::data::{Data, Key};
use crate::error::{EmberError, Result};

/// The random stream of partition `index` for `seed` (as `sample` derives it).
fn partition_rng(seed: u64, index: u32) -> rand_pcg::Pcg64Mcg {
    rand_pcg::Pcg64Mcg::seed_from_u64(seed ^ u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl<T: Data> Rdd<T> {
    /// Splits the records at random into parts weighted by `weights` (normalised to sum
    /// to 1): disjoint, together every record once, the same for the same seed.
    #[track_caller]
    pub fn random_split(&self, weights: &[f64], seed: u64) -> Result<Vec<Rdd<T>>> {
        if weights.is_empty() || weights.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
            return Err(EmberError::InvalidArgument(format!(
                "random_split weights must be finite and >= 0, got {weights:?}"
            )));
        }
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return Err(EmberError::InvalidArgument(format!(
                "random_split weights must not sum to 0, got {weights:?}"
            )));
        }
        let mut bounds = vec![0.0];
        let mut acc = 0.0;
        for w in weights {
            acc += w / total;
            bounds.push(acc);
        }
        // The last range ends past 1 so that no draw in [0, 1) is lost to rounding.
        *bounds.last_mut().expect("at least one weight") = f64::INFINITY;
        Ok(bounds
            .windows(2)
            .map(|w| {
                self.map_partitions_with_index_with(
                    (w[0], w[1], seed),
                    |&(lb, ub, seed): &(f64, f64, u64), index: u32, it: Records<T>| {
                        let mut rng = partition_rng(seed, index);
                        it.filter(move |_| {
                            let r = rng.gen::<f64>();
                            lb <= r && r < ub
                        })
                    },
                )
            })
            .collect())
    }

    /// `num` records drawn at random (without replacement: at most the record count,
    /// each record at most once), in random order; the same for the same seed.
    #[track_caller]
    pub fn take_sample(&self, with_replacement: bool, num: usize, seed: u64) -> Result<Vec<T>> {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
        if num == 0 {
            return Ok(Vec::new());
        }
        let total = self.count()?;
        if total == 0 {
            return Ok(Vec::new());
        }
        if !with_replacement && num as u64 >= total {
            let mut all = self.collect()?;
            all.shuffle(&mut rng);
            return Ok(all);
        }
        let fraction = fraction_for_sample_size(num as u64, total, with_replacement);
        let mut samples = self
            .sample(with_replacement, fraction, rng.gen())
            .collect()?;
        // Rarely short (the fraction over-shoots with probability 0.9999): draw again.
        for _ in 0..100 {
            if samples.len() >= num {
                break;
            }
            samples = self
                .sample(with_replacement, fraction, rng.gen())
                .collect()?;
        }
        samples.shuffle(&mut rng);
        samples.truncate(num);
        Ok(samples)
    }
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// A stratified sample (Spark's `sampleByKey`): each record is kept with its key's
    /// fraction (as the expected number of copies with replacement). Every key of the
    /// RDD needs a fraction: a record whose key has none fails its task, as in Spark.
    #[track_caller]
    pub fn sample_by_key(
        &self,
        with_replacement: bool,
        fractions: HashMap<K, f64>,
        seed: u64,
    ) -> Result<Rdd<(K, V)>> {
        if let Some(bad) = fractions
            .values()
            .find(|f| !(f.is_finite() && **f >= 0.0 && (with_replacement || **f <= 1.0)))
        {
            return Err(EmberError::InvalidArgument(format!(
                "sample_by_key fractions must be finite, >= 0 and (without replacement) <= 1; got {bad}"
            )));
        }
        Ok(self.map_partitions_with_index_with(
            (fractions, with_replacement, seed),
            |(fractions, with_replacement, seed): &(HashMap<K, f64>, bool, u64),
             index: u32,
             it: Records<(K, V)>| {
                let mut rng = partition_rng(*seed, index);
                let (fractions, with_replacement) = (fractions.clone(), *with_replacement);
                it.flat_map(move |(k, v)| {
                    let Some(&f) = fractions.get(&k) else {
                        panic!("sample_by_key: a record's key has no sampling fraction (every key needs one)");
                    };
                    let copies = if with_replacement {
                        super::narrow::poisson(&mut rng, f) as usize
                    } else {
                        usize::from(rng.gen::<f64>() < f)
                    };
                    std::iter::repeat_n((k, v), copies)
                })
            },
        ))
    }
}

/// Spark's `SamplingUtils.computeFractionForSampleSize`: a fraction whose sample holds
/// at least `num` of `total` records with probability 0.9999.
fn fraction_for_sample_size(num: u64, total: u64, with_replacement: bool) -> f64 {
    let f = num as f64 / total as f64;
    if with_replacement {
        let stdevs = if num < 12 { 9.0 } else { 5.0 };
        (f + stdevs * (f / total as f64).sqrt()).max(1e-10)
    } else {
        let gamma = -(1e-4f64).ln() / total as f64;
        (f + gamma + (gamma * gamma + 2.0 * gamma * f).sqrt()).clamp(1e-10, 1.0)
    }
}
