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
//! Closures handed to operators must not capture variables (this is checked when the
//! job compiles); pass state with the `*_with(state, f)` variants or a [`Broadcast`].

mod accumulator;
mod block_store;
mod broadcast;
pub mod capture;
mod cleaner;
mod cluster;
mod conf;
mod context;
mod data;
mod env;
mod error;
mod interrupt;
pub mod io;
mod job;
mod local;
#[cfg(feature = "ui")]
mod local_ui;
mod logging;
pub mod memory;
mod output;
mod plan;
mod progress;
mod rdd;
pub mod shuffle;
pub mod spill;
mod task;
pub mod text;

pub use accumulator::{Accumulator, AccumulatorValue};
pub use broadcast::Broadcast;
pub use conf::{job_args, Conf, Master, DEFAULT_EXECUTOR_MEMORY};
pub use context::Context;
pub use data::{Data, Key};
pub use ember_proto::TaskMetrics;
pub use error::{EmberError, Result};
pub use io::arrow_batch::ArrowBatch;
pub use io::csv::CsvOptions;
pub use io::parquet::{CompareOp, RowFilter, Scalar};
pub use io::parquet::{ParquetCompression, ParquetWriteOptions};
pub use job::JobMetrics;
pub use rdd::Records;
pub use rdd::{
    Emit, Groups, Groups3, Groups4, LinePosition, OuterPair, PipeOptions, Rdd, SaveOptions,
    StatCounter, StorageLevel, INHERITED_PIPE_ENV,
};
pub use shuffle::{KeyPartitioner, Partitioner, PartitionerKind};
/// The Arrow crates ember's batch API speaks (so a job uses the same versions).
pub use {arrow_array, arrow_schema};
