//! Actions: run a job and bring results back to the driver program (collect, count,
//! take, reduce, fold, aggregate, foreach, take_ordered, top) or write them out
//! (save_as_text_file).
//!
//! Every action is a [`ResultOp`] run on each partition of the final RDD by the result
//! stage; the per-partition results are merged in the driver program.

use std::fmt::Display;
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use compact_str::CompactString;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::partition_op::State;
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::job::decode_results;
use crate::task::{Batches, ResultFn, TaskContext};

/// What an action computes on one partition.
pub(crate) trait ResultOp: 'static {
    type In: Data;
    type Out: Serialize + DeserializeOwned;
    fn run(
        tc: &Rc<TaskContext>,
        payload: &[u8],
        part: u32,
        input: Batches<Self::In>,
    ) -> Result<Self::Out>;
}

/// Result function of action `R`.
pub(crate) fn result_compute<R: ResultOp>(
    tc: &Rc<TaskContext>,
    node: u32,
    part: u32,
    payload: &[u8],
) -> Result<Vec<u8>> {
    let input = tc.compute::<R::In>(node, part)?;
    let out = R::run(tc, payload, part, input)?;
    postcard::to_allocvec(&out).map_err(|e| EmberError::ser("action result", e))
}

fn counted<T>(tc: &Rc<TaskContext>, input: Batches<T>) -> impl Iterator<Item = Result<Vec<T>>> {
    let tc = tc.clone();
    input.inspect(move |b| {
        if let Ok(b) = b {
            tc.with_metrics(|m| m.records_out += b.len() as u64)
        }
    })
}

struct Collect<T>(PhantomData<T>);
impl<T: Data> ResultOp for Collect<T> {
    type In = T;
    type Out = Vec<T>;
    fn run(tc: &Rc<TaskContext>, _: &[u8], _: u32, input: Batches<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        for b in counted(tc, input) {
            let mut b = b?;
            if out.is_empty() {
                out = b;
            } else {
                out.append(&mut b);
            }
        }
        Ok(out)
    }
}

struct Count<T>(PhantomData<T>);
impl<T: Data> ResultOp for Count<T> {
    type In = T;
    type Out = u64;
    fn run(tc: &Rc<TaskContext>, _: &[u8], _: u32, input: Batches<T>) -> Result<u64> {
        let mut n = 0u64;
        for b in input {
            n += b?.len() as u64;
        }
        tc.with_metrics(|m| m.records_out += n);
        Ok(n)
    }
}

struct Take<T>(PhantomData<T>);
impl<T: Data> ResultOp for Take<T> {
    type In = T;
    type Out = Vec<T>;
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Vec<T>> {
        let n: u64 = decode("take", payload)?;
        let mut out = Vec::new();
        for b in input {
            if out.len() as u64 >= n {
                break;
            }
            let b = b?;
            let room = (n - out.len() as u64) as usize;
            out.extend(b.into_iter().take(room));
        }
        Ok(out)
    }
}

struct Fold<S, T, F>(PhantomData<fn(S, T, F)>);
impl<T: Data, F: Fn(T, T) -> T + 'static> ResultOp for Fold<(), T, F> {
    type In = T;
    type Out = Option<T>;
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Option<T>> {
        let zero: Option<T> = decode("fold zero", payload)?;
        let f = conjure::<F>();
        let mut acc = zero;
        for b in input {
            for x in b? {
                acc = Some(match acc {
                    Some(a) => f(a, x),
                    None => x,
                });
            }
        }
        Ok(acc)
    }
}

struct Aggregate<T, U, Seq, Comb>(PhantomData<fn(T, U, Seq, Comb)>);
impl<T: Data, U: Data, Seq: Fn(U, T) -> U + 'static, Comb: 'static> ResultOp
    for Aggregate<T, U, Seq, Comb>
{
    type In = T;
    type Out = U;
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<U> {
        let mut acc: U = decode("aggregate zero", payload)?;
        let seq = conjure::<Seq>();
        for b in input {
            for x in b? {
                acc = seq(acc, x);
            }
        }
        Ok(acc)
    }
}

struct Foreach<S, T, F>(PhantomData<fn(S, T, F)>);
impl<S: State, T: Data, F: Fn(&S, T) + 'static> ResultOp for Foreach<S, T, F> {
    type In = T;
    type Out = ();
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<()> {
        let s: S = decode("foreach state", payload)?;
        let f = conjure::<F>();
        for b in input {
            for x in b? {
                f(&s, x);
            }
        }
        Ok(())
    }
}

struct TakeOrdered<T, const DESC: bool>(PhantomData<T>);
impl<T: Data + Ord, const DESC: bool> ResultOp for TakeOrdered<T, DESC> {
    type In = T;
    type Out = Vec<T>;
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<Vec<T>> {
        let n: u64 = decode("take_ordered", payload)?;
        let mut best: Vec<T> = Vec::new();
        for b in input {
            best.extend(b?);
            if best.len() as u64 > 2 * n + 1024 {
                keep_best::<T, DESC>(&mut best, n as usize);
            }
        }
        keep_best::<T, DESC>(&mut best, n as usize);
        Ok(best)
    }
}

fn keep_best<T: Ord, const DESC: bool>(v: &mut Vec<T>, n: usize) {
    if DESC {
        v.sort_unstable_by(|a, b| b.cmp(a));
    } else {
        v.sort_unstable();
    }
    v.truncate(n);
}

struct SaveText<T>(PhantomData<T>);
impl<T: Data + Display> ResultOp for SaveText<T> {
    type In = T;
    type Out = String;
    fn run(tc: &Rc<TaskContext>, payload: &[u8], part: u32, input: Batches<T>) -> Result<String> {
        let dir: PathBuf = decode("save_as_text_file", payload)?;
        tc.write_attempt(&dir, part, |path| write_lines(path, input))
    }
}

/// How many lines ahead [`write_lines`] prefetches the bytes of.
const LINE_PREFETCH_DISTANCE: usize = 8;

/// Writes every record of `input` as a line (its `Display`) to a new file at `path`;
/// returns how many.
fn write_lines<T: Data + Display>(path: &std::path::Path, input: Batches<T>) -> Result<u64> {
    let file = std::fs::File::create(path).map_err(|e| EmberError::io(path, e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 18, file);
    let mut n = 0u64;
    for b in input {
        let b = b?;
        n += b.len() as u64;
        // Strings (the common case) skip the formatting machinery.
        let any = &b as &dyn std::any::Any;
        if let Some(lines) = any.downcast_ref::<Vec<String>>() {
            write_strs(&mut w, lines).map_err(|e| EmberError::io(path, e))?;
        } else if let Some(lines) = any.downcast_ref::<Vec<CompactString>>() {
            write_strs(&mut w, lines).map_err(|e| EmberError::io(path, e))?;
        } else {
            for x in b {
                writeln!(w, "{x}").map_err(|e| EmberError::io(path, e))?;
            }
        }
    }
    w.flush().map_err(|e| EmberError::io(path, e))?;
    Ok(n)
}

/// Writes each string of `lines` and a newline.
fn write_strs<S: AsRef<str>>(w: &mut impl Write, lines: &[S]) -> std::io::Result<()> {
    for (i, line) in lines.iter().enumerate() {
        // The bytes of sorted lines are scattered over the heap: sort's profile had 8 % of
        // the job waiting on them here, one miss after another. (An inline string's bytes
        // are in the record: the hint then asks for a line that is already there.)
        if let Some(ahead) = lines.get(i + LINE_PREFETCH_DISTANCE) {
            crate::prefetch::line(ahead.as_ref().as_ptr() as usize);
        }
        w.write_all(line.as_ref().as_bytes())?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Options of [`Rdd::save_as_text_file_with`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct SaveOptions {
    /// Replace an existing output directory instead of failing.
    pub overwrite: bool,
}

/// How many times as many partitions as scanned so far `take` tries at most in its next
/// round (Spark's `spark.rdd.limit.scaleUpFactor` default).
const TAKE_SCALE_UP_FACTOR: u64 = 4;

impl<T: Data> Rdd<T> {
    pub(super) fn run_action<R: ResultOp>(
        &self,
        payload: Vec<u8>,
        partitions: Option<Vec<u32>>,
        action: &str,
    ) -> Result<Vec<R::Out>> {
        let f: ResultFn = result_compute::<R>;
        let parts = self
            .ctx
            .run_job(&self.node, f, payload, partitions, action, false)?;
        decode_results(parts)
    }

    /// The records of `partitions` only, one list per partition (one task each).
    pub(crate) fn run_partitions(&self, partitions: &[u32]) -> Result<Vec<Vec<T>>> {
        self.run_action::<Collect<T>>(Vec::new(), Some(partitions.to_vec()), "lookup")
    }

    /// The records a sampling job sees: every record of partitions computed from
    /// shuffles or caches, a spread-out part of those read from text files (for
    /// choosing range bounds, where reading everything would only cost time).
    pub(crate) fn collect_sample(&self) -> Result<Vec<T>> {
        let f: ResultFn = result_compute::<Collect<T>>;
        let parts = self
            .ctx
            .run_job(&self.node, f, Vec::new(), None, "sample", true)?;
        let parts: Vec<Vec<T>> = decode_results(parts)?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// All records, in partition order.
    pub fn collect(&self) -> Result<Vec<T>> {
        let parts = self.run_action::<Collect<T>>(Vec::new(), None, "collect")?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// The records in partition order, computed one partition (one job) at a time as
    /// the iterator reaches it, so the driver holds at most one partition (Spark's
    /// `toLocalIterator`). A failed partition's error is the last item.
    pub fn to_local_iterator(&self) -> impl Iterator<Item = Result<T>> + '_ {
        let mut next_part = 0u32;
        let mut current = Vec::<T>::new().into_iter();
        let mut failed = false;
        std::iter::from_fn(move || loop {
            if let Some(x) = current.next() {
                return Some(Ok(x));
            }
            if failed || next_part >= self.node.num_partitions {
                return None;
            }
            let part = next_part;
            next_part += 1;
            match self.run_action::<Collect<T>>(Vec::new(), Some(vec![part]), "to_local_iterator") {
                Ok(parts) => current = parts.into_iter().flatten().collect::<Vec<T>>().into_iter(),
                Err(e) => {
                    failed = true;
                    return Some(Err(e));
                }
            }
        })
    }

    /// Number of records.
    pub fn count(&self) -> Result<u64> {
        Ok(self
            .run_action::<Count<T>>(Vec::new(), None, "count")?
            .into_iter()
            .sum())
    }

    /// The first `n` records in partition order, scanning as few partitions as it can,
    /// as Spark's `RDD.take` does: one partition first; then, if nothing was found yet,
    /// four times as many as scanned so far (`spark.rdd.limit.scaleUpFactor`), else
    /// `ceil(1.5 * left * scanned / found)` more, where `left` is the number of records
    /// still wanted, capped at four times as many as scanned so far.
    pub fn take(&self, n: usize) -> Result<Vec<T>> {
        let total = self.node.num_partitions;
        let mut out = Vec::new();
        let mut scanned = 0u32;
        let mut batch = 1u32;
        while out.len() < n && scanned < total {
            if scanned > 0 {
                let cap = u64::from(scanned) * TAKE_SCALE_UP_FACTOR;
                batch = if out.is_empty() {
                    cap
                } else {
                    // left > 0, so the estimate is at least 1.
                    let left = (n - out.len()) as f64;
                    let estimate = (1.5 * left * f64::from(scanned) / out.len() as f64).ceil();
                    (estimate as u64).min(cap)
                }
                .min(u64::from(total - scanned)) as u32;
            }
            let upto = (scanned + batch).min(total);
            let want = (n - out.len()) as u64;
            let parts = self.run_action::<Take<T>>(
                encode("take", &want),
                Some((scanned..upto).collect()),
                "take",
            )?;
            for p in parts {
                let room = n - out.len();
                out.extend(p.into_iter().take(room));
            }
            scanned = upto;
        }
        Ok(out)
    }

    /// The first record; an error for an empty RDD.
    pub fn first(&self) -> Result<T> {
        self.take(1)?
            .into_iter()
            .next()
            .ok_or(EmberError::EmptyRdd("first"))
    }

    /// Combines all records with an associative, commutative `f`; an error for an
    /// empty RDD.
    pub fn reduce<F: Fn(T, T) -> T + 'static>(&self, f: F) -> Result<T> {
        let _capture_f = assert_stateless(&f);
        let none: Option<T> = None;
        let parts = self.run_action::<Fold<(), T, F>>(encode("reduce", &none), None, "reduce")?;
        parts
            .into_iter()
            .flatten()
            .reduce(f)
            .ok_or(EmberError::EmptyRdd("reduce"))
    }

    /// Folds each partition starting from `zero`, then folds the partition results
    /// starting from `zero` (as Spark does, so `zero` must be neutral for `f`).
    pub fn fold<F: Fn(T, T) -> T + 'static>(&self, zero: T, f: F) -> Result<T> {
        let _capture_f = assert_stateless(&f);
        let parts =
            self.run_action::<Fold<(), T, F>>(encode("fold", &Some(zero.clone())), None, "fold")?;
        Ok(parts.into_iter().flatten().fold(zero, f))
    }

    /// Aggregates each partition with `seq` from `zero`, then merges the partition
    /// results with `comb` from `zero`.
    pub fn aggregate<U: Data, Seq: Fn(U, T) -> U + 'static, Comb: Fn(U, U) -> U + 'static>(
        &self,
        zero: U,
        seq: Seq,
        comb: Comb,
    ) -> Result<U> {
        let _capture_seq = assert_stateless(&seq);
        let _capture_comb = assert_stateless(&comb);
        let parts = self.run_action::<Aggregate<T, U, Seq, Comb>>(
            encode("aggregate", &zero),
            None,
            "aggregate",
        )?;
        Ok(parts.into_iter().fold(zero, comb))
    }

    /// Spark's `treeAggregate`: the result of [`aggregate`](Self::aggregate) (for an
    /// associative, commutative `comb`, as Spark requires). Spark merges partition
    /// results in `depth` levels of executor tasks to spare its driver; ember's driver
    /// merges them in one level as they arrive (each is one small value), so `depth`
    /// only has to be at least 1.
    pub fn tree_aggregate<U: Data, Seq: Fn(U, T) -> U + 'static, Comb: Fn(U, U) -> U + 'static>(
        &self,
        zero: U,
        seq: Seq,
        comb: Comb,
        depth: u32,
    ) -> Result<U> {
        if depth < 1 {
            return Err(EmberError::InvalidArgument(format!(
                "tree_aggregate depth must be at least 1, got {depth}"
            )));
        }
        self.aggregate(zero, seq, comb)
    }

    /// Spark's `treeReduce`: the result of [`reduce`](Self::reduce); see
    /// [`tree_aggregate`](Self::tree_aggregate) for `depth`.
    pub fn tree_reduce<F: Fn(T, T) -> T + 'static>(&self, f: F, depth: u32) -> Result<T> {
        if depth < 1 {
            return Err(EmberError::InvalidArgument(format!(
                "tree_reduce depth must be at least 1, got {depth}"
            )));
        }
        self.reduce(f).map_err(|e| match e {
            EmberError::EmptyRdd(_) => EmberError::EmptyRdd("tree_reduce"),
            other => other,
        })
    }

    /// Runs `f` on every record, on the executors.
    pub fn foreach<F: Fn(T) + 'static>(&self, f: F) -> Result<()> {
        let _capture_f = assert_stateless(&f);
        self.foreach_with((), move |_: &(), x: T| conjure::<F>()(x))
    }

    /// Runs `f(&state, record)` on every record, on the executors.
    pub fn foreach_with<S: State, F: Fn(&S, T) + 'static>(&self, state: S, f: F) -> Result<()> {
        let _capture_f = assert_stateless(&f);
        self.run_action::<Foreach<S, T, F>>(encode("foreach", &state), None, "foreach")?;
        Ok(())
    }

    /// Number of occurrences of each distinct record.
    #[track_caller]
    pub fn count_by_value(&self) -> Result<std::collections::HashMap<T, u64>>
    where
        T: crate::data::Key,
    {
        Ok(self
            .map(|x: T| (x, 1u64))
            .reduce_by_key(|a: u64, b: u64| a + b)
            .collect()?
            .into_iter()
            .collect())
    }

    /// The `n` smallest records, ascending.
    pub fn take_ordered(&self, n: usize) -> Result<Vec<T>>
    where
        T: Ord,
    {
        let parts = self.run_action::<TakeOrdered<T, false>>(
            encode("take_ordered", &(n as u64)),
            None,
            "take_ordered",
        )?;
        let mut all: Vec<T> = parts.into_iter().flatten().collect();
        keep_best::<T, false>(&mut all, n);
        Ok(all)
    }

    /// The `n` largest records, descending.
    pub fn top(&self, n: usize) -> Result<Vec<T>>
    where
        T: Ord,
    {
        let parts =
            self.run_action::<TakeOrdered<T, true>>(encode("top", &(n as u64)), None, "top")?;
        let mut all: Vec<T> = parts.into_iter().flatten().collect();
        keep_best::<T, true>(&mut all, n);
        Ok(all)
    }

    /// Writes each partition as a text file `part-NNNNN` (one record per line, as
    /// `Display` prints it) into directory `path`, then an empty `_SUCCESS`. Fails if
    /// `path` exists.
    pub fn save_as_text_file(&self, path: impl AsRef<Path>) -> Result<()>
    where
        T: Display,
    {
        self.save_as_text_file_with(path, SaveOptions::default())
    }

    /// [`save_as_text_file`](Self::save_as_text_file) with options.
    ///
    /// Each task writes its part under `_temporary/` with a name unique to the attempt;
    /// only the attempt the scheduler reports for each partition is moved into place,
    /// and `_SUCCESS` is written last. A failed job removes the directory it created, so
    /// no directory that looks complete is left behind.
    pub fn save_as_text_file_with(&self, path: impl AsRef<Path>, opts: SaveOptions) -> Result<()>
    where
        T: Display,
    {
        crate::io::commit::save_files(path.as_ref(), opts.overwrite, "", |tmp| {
            self.run_action::<SaveText<T>>(
                encode("save_as_text_file", &tmp.to_path_buf()),
                None,
                "save_as_text_file",
            )
        })
    }
}
