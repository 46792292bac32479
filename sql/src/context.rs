//! [`SqlContext`]: tables and SQL over an ember [`Context`]. DataFusion parses, plans and
//! optimises; ember runs the plan's stages ([`crate::stages`], [`crate::run`]).
//!
//! The DataFusion session is configured so that each partition can run alone in its own
//! task (as ember runs them): no file work stealing between sibling partitions, no
//! dynamic filters shared between partitions, no round-robin repartition after scans
//! (parallelism comes from splitting the files), strings read as plain `Utf8` (so a
//! shuffled batch carries only its own bytes), and `target_partitions` from ember's
//! default parallelism.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig, SessionContext};
use ember::Context;

use std::cell::RefCell;

use datafusion::arrow::datatypes::SchemaRef;
use ember::{ArrowBatch, Data, Rdd};

use crate::dataframe::DataFrame;
use crate::error::{Result, SqlError};

/// The DataFusion settings every partition of a plan running alone needs.
pub(crate) fn task_config() -> SessionConfig {
    SessionConfig::new()
        .with_round_robin_repartition(false)
        .set_bool(
            "datafusion.execution.enable_file_stream_work_stealing",
            false,
        )
        .set_bool("datafusion.optimizer.enable_dynamic_filter_pushdown", false)
        // Strings as plain Utf8, not views: a view array's batch shares its data
        // buffers with every batch cut from the same page, and an Arrow IPC record (a
        // shuffled batch) carries all of them.
        .set_bool(
            "datafusion.execution.parquet.schema_force_view_types",
            false,
        )
        .set_bool(
            "datafusion.optimizer.enable_join_dynamic_filter_pushdown",
            false,
        )
}

/// Spark's `spark.sql.autoBroadcastJoinThreshold` default: 10 MiB.
pub const DEFAULT_BROADCAST_JOIN_THRESHOLD: usize = 10 << 20;

/// DataFusion also bounds a broadcast side by its estimated rows: the byte threshold
/// over this many bytes a row (1 M rows for 10 MiB).
const BYTES_PER_ESTIMATED_ROW: usize = 10;

/// The largest join side (estimated bytes) broadcast to every task of the other side:
/// `EMBER_AUTO_BROADCAST_JOIN_THRESHOLD` (Spark's `autoBroadcastJoinThreshold`; `0` or
/// `-1` turns broadcasting off), else [`DEFAULT_BROADCAST_JOIN_THRESHOLD`].
pub fn broadcast_threshold() -> Result<usize> {
    let name = "EMBER_AUTO_BROADCAST_JOIN_THRESHOLD";
    match std::env::var(name) {
        Err(_) => Ok(DEFAULT_BROADCAST_JOIN_THRESHOLD),
        Ok(v) if v.trim() == "-1" => Ok(0),
        Ok(v) => v.trim().parse::<usize>().map_err(|_| {
            SqlError::Config(format!(
                "{name}: expected a number of bytes (or -1 for none), got {}",
                ember::io::excerpt(&v)
            ))
        }),
    }
}

/// Tables and SQL over an ember context.
pub struct SqlContext {
    ember: Context,
    df: SessionContext,
    rt: tokio::runtime::Runtime,
    /// Registered RDDs, by table id ([`crate::rdd_table`]).
    rdds: RefCell<Vec<Rdd<ArrowBatch>>>,
}

impl SqlContext {
    /// A SQL context running its queries on `ember`'s executors (or in local mode).
    pub fn new(ember: &Context) -> Result<Self> {
        let partitions = ember.default_parallelism().max(1);
        let broadcast = broadcast_threshold()?;
        let config = task_config()
            .with_target_partitions(partitions)
            // A join side estimated under it is collected and sent whole to every task
            // of the other side, which is then not shuffled (Spark's broadcast join).
            .set_usize(
                "datafusion.optimizer.hash_join_single_partition_threshold",
                broadcast,
            )
            .set_usize(
                "datafusion.optimizer.hash_join_single_partition_threshold_rows",
                broadcast / BYTES_PER_ESTIMATED_ROW,
            );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| {
                crate::error::SqlError::Output(format!("cannot start the SQL runtime: {e}"))
            })?;
        Ok(SqlContext {
            ember: ember.clone(),
            df: SessionContext::new_with_config(config),
            rt,
            rdds: RefCell::new(Vec::new()),
        })
    }

    /// The ember context queries run on.
    pub fn ember(&self) -> &Context {
        &self.ember
    }

    /// DataFusion's session (its catalog, functions and configuration).
    pub fn session(&self) -> &SessionContext {
        &self.df
    }

    /// Registers the Parquet files at `path` (a file, a directory or a glob) as `name`.
    pub fn register_parquet(&self, name: &str, path: &str) -> Result<()> {
        self.rt.block_on(
            self.df
                .register_parquet(name, path, ParquetReadOptions::default()),
        )?;
        Ok(())
    }

    /// Registers the CSV files (with a header line) at `path` as `name`.
    pub fn register_csv(&self, name: &str, path: &str) -> Result<()> {
        // A file is read whatever its name; a directory's files ending in `.csv`.
        let file = std::path::Path::new(path);
        let ext = if file.is_file() {
            file.extension()
                .map_or(String::new(), |e| format!(".{}", e.to_string_lossy()))
        } else {
            ".csv".to_string()
        };
        let options = CsvReadOptions::new().has_header(true).file_extension(&ext);
        self.rt
            .block_on(self.df.register_csv(name, path, options))?;
        Ok(())
    }

    /// Registers `rdd`'s records as table `name`: one column per field of `T` (a struct
    /// of numbers, bools, strings, `Option`s, `Vec`s and nested structs, as ember's
    /// Parquet sink maps them). Queries read the RDD through its lineage.
    pub fn register_rdd<T: Data>(&self, name: &str, rdd: &Rdd<T>) -> Result<()> {
        let fields = ember::io::parquet::schema::record_fields::<T>()?;
        let schema = ember::io::parquet::schema::schema_of(&fields);
        self.register_batches(name, &rdd.to_batches(), schema)
    }

    /// Registers an RDD of Arrow batches, each of `schema`, as table `name`.
    pub fn register_batches(
        &self,
        name: &str,
        rdd: &Rdd<ArrowBatch>,
        schema: SchemaRef,
    ) -> Result<()> {
        let mut rdds = self.rdds.borrow_mut();
        let table = crate::rdd_table::RddTable {
            id: rdds.len() as u32,
            schema,
            partitions: rdd.num_partitions(),
        };
        rdds.push(rdd.clone());
        self.df.register_table(name, Arc::new(table))?;
        Ok(())
    }

    /// Registered RDD `id`.
    pub(crate) fn rdd(&self, id: u32) -> Result<Rdd<ArrowBatch>> {
        self.rdds
            .borrow()
            .get(id as usize)
            .cloned()
            .ok_or_else(|| SqlError::Unsupported(format!("no registered RDD {id}")))
    }

    /// The query's result, planned now and run when collected or written.
    pub fn sql(&self, query: &str) -> Result<DataFrame<'_>> {
        let df = self.rt.block_on(self.df.sql(query))?;
        Ok(DataFrame::new(self, df))
    }

    /// The registered table `name`.
    pub fn table(&self, name: &str) -> Result<DataFrame<'_>> {
        let df = self.rt.block_on(self.df.table(name))?;
        Ok(DataFrame::new(self, df))
    }

    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs a physical plan on ember's stages; its batches, in partition order.
    pub(crate) fn run(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Vec<RecordBatch>> {
        let rdd = self.result_rdd(plan)?;
        Ok(rdd.collect()?.into_iter().map(|b| b.0).collect())
    }

    /// A physical plan's result as an RDD of its batches, on ember's stages.
    pub(crate) fn result_rdd(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Rdd<ArrowBatch>> {
        crate::run::result_rdd(self, &self.stages(plan)?)
    }

    /// The stages `plan` runs as, for `explain`.
    /// Scalar subqueries run first ([`crate::subquery`]).
    pub(crate) fn stages(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Vec<crate::stages::Stage>> {
        crate::stages::cut(crate::subquery::resolve(self, plan)?)
    }
}
