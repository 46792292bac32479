//! Numeric and order actions (Spark's `DoubleRDDFunctions` and `RDD.max/min/isEmpty`):
//! `sum`, `stats` (count, mean, variance, max, min in one pass), `mean`, `variance`,
//! `stdev`, `sample_variance`, `sample_stdev` on `Rdd<f64>`; `max`, `min` on any `Ord`
//! record; `is_empty` on any RDD.
//!
//! Invariants: `stats` merges per-partition counters with Chan et al.'s parallel update
//! (as Spark's `StatCounter`), so its result does not depend on how records fall into
//! partitions beyond floating-point rounding; an empty RDD has count 0, mean 0, variance
//! NaN, max -inf and min +inf (Spark's values; also for an RDD of no partitions, where
//! Spark's `stats` would fail); a NaN record makes mean, variance, max and min NaN, as
//! Java's `Math.max` does in Spark's; `max` / `min` of an empty RDD are the
//! empty-collection error.

use serde::{Deserialize, Serialize};

use super::Rdd;
use crate::data::Data;
use crate::error::{EmberError, Result};

/// Count, mean, variance, max and min of a set of numbers, mergeable (Spark's
/// `StatCounter`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StatCounter {
    count: u64,
    mean: f64,
    /// Sum of squared differences from the mean.
    m2: f64,
    max: f64,
    min: f64,
}

impl Default for StatCounter {
    fn default() -> Self {
        StatCounter {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            max: f64::NEG_INFINITY,
            min: f64::INFINITY,
        }
    }
}

impl StatCounter {
    /// The statistics of `values`.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Self {
        values.into_iter().fold(Self::default(), Self::with)
    }

    /// With one more value.
    pub fn with(mut self, x: f64) -> Self {
        let delta = x - self.mean;
        self.count += 1;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
        self.max = java_max(self.max, x);
        self.min = java_min(self.min, x);
        self
    }

    /// Both sets' statistics together.
    pub fn merge(self, other: Self) -> Self {
        if other.count == 0 {
            return self;
        }
        if self.count == 0 {
            return other;
        }
        let (n, m) = (self.count as f64, other.count as f64);
        let delta = other.mean - self.mean;
        // Spark's choice of formula keeps precision when one side is much larger.
        let mean = if m * 10.0 < n {
            self.mean + delta * m / (n + m)
        } else if n * 10.0 < m {
            other.mean - delta * n / (n + m)
        } else {
            (self.mean * n + other.mean * m) / (n + m)
        };
        StatCounter {
            count: self.count + other.count,
            mean,
            m2: self.m2 + other.m2 + delta * delta * n * m / (n + m),
            max: java_max(self.max, other.max),
            min: java_min(self.min, other.min),
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn mean(&self) -> f64 {
        self.mean
    }
    pub fn sum(&self) -> f64 {
        self.mean * self.count as f64
    }
    pub fn max(&self) -> f64 {
        self.max
    }
    pub fn min(&self) -> f64 {
        self.min
    }
    /// Population variance (NaN for no values).
    pub fn variance(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.m2 / self.count as f64
        }
    }
    /// Sample variance, dividing by count - 1 (NaN for fewer than 2 values).
    pub fn sample_variance(&self) -> f64 {
        if self.count <= 1 {
            f64::NAN
        } else {
            self.m2 / (self.count - 1) as f64
        }
    }
    pub fn stdev(&self) -> f64 {
        self.variance().sqrt()
    }
    pub fn sample_stdev(&self) -> f64 {
        self.sample_variance().sqrt()
    }
}

impl Rdd<f64> {
    /// The sum of the records (0 for none).
    pub fn sum(&self) -> Result<f64> {
        self.fold(0.0, |a, b| a + b)
    }

    /// Count, mean, variance, max and min in one job.
    pub fn stats(&self) -> Result<StatCounter> {
        self.aggregate(
            StatCounter::default(),
            StatCounter::with,
            StatCounter::merge,
        )
    }

    /// The mean of the records (0 for none, as Spark's).
    pub fn mean(&self) -> Result<f64> {
        Ok(self.stats()?.mean())
    }

    /// Population variance.
    pub fn variance(&self) -> Result<f64> {
        Ok(self.stats()?.variance())
    }

    /// Population standard deviation.
    pub fn stdev(&self) -> Result<f64> {
        Ok(self.stats()?.stdev())
    }

    /// Sample variance (divides by count - 1).
    pub fn sample_variance(&self) -> Result<f64> {
        Ok(self.stats()?.sample_variance())
    }

    /// Sample standard deviation.
    pub fn sample_stdev(&self) -> Result<f64> {
        Ok(self.stats()?.sample_stdev())
    }

    /// `bucket_count` evenly spaced buckets between the smallest and the largest record
    /// (one bucket `[min, min]` if they are equal) and how many records fall in each
    /// (Spark's `histogram(bucketCount)`): the boundaries and the counts. An empty RDD,
    /// or one holding an infinity or NaN, is an invalid-argument error.
    #[track_caller]
    pub fn histogram(&self, bucket_count: usize) -> Result<(Vec<f64>, Vec<u64>)> {
        if bucket_count == 0 {
            return Err(EmberError::InvalidArgument(
                "histogram needs at least one bucket".into(),
            ));
        }
        let s = self.stats()?;
        let (min, max) = (s.min(), s.max());
        if !(min.is_finite() && max.is_finite()) {
            return Err(EmberError::InvalidArgument(
                "histogram of an empty RDD or of one holding an infinity or NaN".into(),
            ));
        }
        let bounds: Vec<f64> = if min == max {
            vec![min, min]
        } else {
            let step = (max - min) / bucket_count as f64;
            let mut b: Vec<f64> = (0..bucket_count).map(|i| min + step * i as f64).collect();
            b.push(max);
            b
        };
        let counts = self.histogram_with(&bounds)?;
        Ok((bounds, counts))
    }

    /// How many records fall in each bucket `[b[i], b[i+1])` of the sorted `boundaries`,
    /// the last bucket closed `[b[n-2], b[n-1]]` (Spark's `histogram(buckets)`); records
    /// outside the boundaries and NaN are not counted.
    #[track_caller]
    pub fn histogram_with(&self, boundaries: &[f64]) -> Result<Vec<u64>> {
        if boundaries.len() < 2 {
            return Err(EmberError::InvalidArgument(format!(
                "histogram needs at least 2 boundaries, got {}",
                boundaries.len()
            )));
        }
        if boundaries.iter().any(|b| b.is_nan()) || boundaries.windows(2).any(|w| w[0] > w[1]) {
            return Err(EmberError::InvalidArgument(format!(
                "histogram boundaries must be sorted numbers, got {boundaries:?}"
            )));
        }
        let buckets = boundaries.len() - 1;
        let per_partition = self
            .map_partitions_with_index_with(
                boundaries.to_vec(),
                |b: &Vec<f64>, _: u32, it: super::Records<f64>| {
                    let mut counts = vec![0u64; b.len() - 1];
                    for x in it {
                        if let Some(i) = bucket_of(b, x) {
                            counts[i] += 1;
                        }
                    }
                    std::iter::once(counts)
                },
            )
            .collect()?;
        let mut total = vec![0u64; buckets];
        for counts in per_partition {
            for (t, c) in total.iter_mut().zip(counts) {
                *t += c;
            }
        }
        Ok(total)
    }
}

/// The bucket `x` falls in among sorted `bounds` (`[b[i], b[i+1])`, the last closed).
fn bucket_of(bounds: &[f64], x: f64) -> Option<usize> {
    let last = bounds.len() - 1;
    if x.is_nan() || x < bounds[0] || x > bounds[last] {
        return None;
    }
    if x == bounds[last] {
        return Some(last - 1);
    }
    // The last boundary <= x.
    let i = bounds.partition_point(|b| *b <= x) - 1;
    Some(i.min(last - 1))
}

impl<T: Data + Ord> Rdd<T> {
    /// The largest record; the empty-collection error for none.
    pub fn max(&self) -> Result<T> {
        self.reduce(|a, b| if b > a { b } else { a })
            .map_err(|e| renamed_empty(e, "max"))
    }

    /// The smallest record; the empty-collection error for none.
    pub fn min(&self) -> Result<T> {
        self.reduce(|a, b| if b < a { b } else { a })
            .map_err(|e| renamed_empty(e, "min"))
    }
}

impl<T: Data> Rdd<T> {
    /// Whether the RDD has no records: true at once for no partitions, else computed
    /// as `take(1)` (only as many partitions as that needs).
    pub fn is_empty(&self) -> Result<bool> {
        if self.num_partitions() == 0 {
            return Ok(true);
        }
        Ok(self.take(1)?.is_empty())
    }
}

/// `Math.max` as Spark's StatCounter uses it: NaN if either is NaN.
fn java_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `Math.min`: NaN if either is NaN.
fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// The empty-collection error under the action's own name; other errors as they are.
fn renamed_empty(e: EmberError, action: &'static str) -> EmberError {
    match e {
        EmberError::EmptyRdd(_) => EmberError::EmptyRdd(action),
        other => other,
    }
}
