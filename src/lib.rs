//! # ember
//!
//! A Spark-like dataflow engine. A job is an ordinary Rust program against a typed
//! DSL: [`Rdd<T>`] with narrow transformations (map, filter, flat_map, ...), key-wise
//! shuffles (reduce_by_key, group_by_key, join, sort_by_key, ...) and actions (collect,
//! count, save_as_text_file, ...). An action compiles the lineage into a plan; the
//! driver's scheduler cuts it into stages at shuffle boundaries and runs one task per
//! partition; shuffles go through compressed, checksummed files on local disk, and
//! every buffering operator spills to disk when its memory reservation is refused.
//!
//! ```no_run
//! fn main() -> Result<(), ember::EmberError> {
//!     let ctx = ember::Context::from_env()?; // first thing: workers enter worker mode here
//!     let counts = ctx
//!         .text_file("input.txt", 4)?
//!         .flat_map(|line: String| line.split_whitespace().map(str::to_string).collect::<Vec<_>>())
//!         .map(|w: String| (w, 1u64))
//!         .reduce_by_key(|a, b| a + b)
//!         .collect()?;
//!     println!("{} distinct words", counts.len());
//!     Ok(())
//! }
//! ```
//!
//! ## Closures and outer values
//!
//! A closure handed to an operator runs in whatever process runs the task, and a plan
//! names it by its code alone, so it must capture nothing. Name the outer values it
//! uses in [`capture!`]: they are serialised with the plan and given back to the closure
//! in every task (`Copy` values by value, others by reference; the parameters need
//! their types). An operator's `*_with(state, f)` variant passes one serialisable state
//! explicitly, and a [`Broadcast`] ships a large value once per executor.
//!
//! ```
//! let ctx = ember::Context::local(2)?;
//! let nums = ctx.parallelize((1..=10u64).collect(), 2);
//!
//! let k: u64 = 3;
//! let stop = vec![4u64, 5];
//! // `nums.filter(move |x| *x > k)` does not build: name k (and stop) in capture!.
//! let kept = nums.filter(ember::capture!(k, stop => |x: &u64| *x > k && !stop.contains(x)));
//! assert_eq!(kept.collect()?, vec![6, 7, 8, 9, 10]);
//!
//! let scaled = nums.map_with(k, |k: &u64, x: u64| x * k); // explicit state
//! assert_eq!(scaled.take(2)?, vec![3, 6]);
//!
//! let names = ctx.broadcast(vec!["zero".to_string(), "one".into(), "two".into()]);
//! let named = nums
//!     .filter(|x: &u64| *x < 3)
//!     .map_with(names, |names: &ember::Broadcast<Vec<String>>, x: u64| names.value()[x as usize].clone());
//! assert_eq!(named.collect()?, vec!["one", "two"]);
//! # Ok::<(), ember::EmberError>(())
//! ```
//!
//! When a closure that captures is caught: `|x| *x > k` (borrowing `k`) by `cargo
//! check` (rustc's E0373, whose advice to add `move` leads to the next case); `move |x|
//! *x > k`, whatever `k`'s type, only by `cargo build`, with ember's message (error
//! E0080; the note under it names the closure: `OperatorClosure::<{closure@src/main.rs:
//! LINE:COL ...}>`): a closure's size, which tells a closure that captures from one
//! that does not, is known only once the operator is compiled for it. Mistakes inside
//! `capture!` (a variable used but not named, a value that is not serialisable) fail
//! `cargo check`.
//!
//! ## In your own crate
//!
//! ember is not on crates.io: depend on a clone (`ember = { path = "../ember" }` or
//! `{ git = "..." }`), and copy the `[profile.dev]` settings of the README's section
//! "Use ember in your own crate" (a crate does not inherit ember's profiles). Records
//! are serde types: derive with the serde ember re-exports, [`serde`], and
//! `#[serde(crate = "ember::serde")]`:
//!
//! ```
//! use ember::serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
//! #[serde(crate = "ember::serde")]
//! struct Reading {
//!     city: String,
//!     celsius: f64,
//! }
//!
//! let ctx = ember::Context::local(1)?;
//! let r = Reading { city: "Oslo".into(), celsius: 3.5 };
//! assert_eq!(ctx.parallelize(vec![r.clone()], 1).collect()?, vec![r]);
//! # Ok::<(), ember::EmberError>(())
//! ```
//!
//! Cargo features (README.md, "Features"): `ui` (local mode's web UI), `csv`
//! (`read_csv`, `save_as_csv`) and `parquet` (`read_parquet*`, `save_as_parquet*`,
//! `ArrowBatch`) are on by default; `s3` (`s3://` paths) is off. An API whose feature
//! is off is absent, and its docs name the feature.

mod accumulator;
mod backend;
mod barrier;
mod block_store;
mod broadcast;
pub mod capture;
mod cleaner;
mod closure;
mod cluster;
mod conf;
mod connect;
mod context;
mod data;
mod env;
mod error;
mod interrupt;
pub mod io;
mod job;
mod job_group;
mod local;
#[cfg(feature = "ui")]
mod local_ui;
mod logging;
pub mod memory;
mod plan;
mod prefetch;
mod progress;
mod rdd;
pub mod shuffle;
pub mod spill;
mod task;
pub mod text;

pub use accumulator::{Accumulator, AccumulatorValue};
pub use barrier::{BarrierContext, Element, RddBarrier, ReduceOp};
pub use broadcast::Broadcast;
/// A string of up to 24 bytes held inline (no heap allocation), serialised exactly as a
/// `String`: short text values (a line of a key-value file, a word) that are sorted or
/// shuffled move with their record instead of pointing elsewhere on the heap, and
/// `save_as_text_file` writes them as it writes `String`s.
pub use compact_str::CompactString;
pub use conf::{job_args, Conf, Master, ShuffleDurability, DEFAULT_EXECUTOR_MEMORY};
pub use context::Context;
pub use data::{Data, Key};
pub use ember_proto::TaskMetrics;
pub use ember_scheduler::pools::SchedulingMode;
pub use error::{EmberError, Result};
#[cfg(feature = "parquet")]
pub use io::arrow_batch::ArrowBatch;
#[cfg(feature = "csv")]
pub use io::csv::CsvOptions;
#[cfg(feature = "parquet")]
pub use io::parquet::{CompareOp, ParquetCompression, ParquetWriteOptions, RowFilter, Scalar};
pub use job::JobMetrics;
pub use rdd::Records;
pub use rdd::{
    Emit, Groups, Groups3, Groups4, LinePosition, OuterPair, PipeOptions, Rdd, SaveOptions,
    StatCounter, StorageLevel, INHERITED_PIPE_ENV,
};
/// The serde ember's records are serialised with, derive macros included, so a job
/// derives `Serialize`/`Deserialize` without depending on serde itself: add
/// `#[serde(crate = "ember::serde")]` next to the derive.
pub use serde;
pub use shuffle::{KeyPartitioner, Partitioner, PartitionerKind};
/// The Arrow crates ember's batch API speaks (so a job uses the same versions).
#[cfg(feature = "parquet")]
pub use {arrow_array, arrow_schema};
