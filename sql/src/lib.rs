//! ember-sql: DataFrames and SQL on ember's stages.
//!
//! DataFusion parses SQL, plans and optimises it, and evaluates every operator of a
//! partition; ember runs the plan: [`stages`] cuts DataFusion's physical plan into ember
//! stages at its exchanges (repartitions and gathers), [`run`] ships each stage's plan
//! fragment to ember tasks (DataFusion's protobuf codec, [`input_exec::StageCodec`] for
//! the stage inputs), moves the batches between stages through ember's shuffle (Arrow
//! IPC records), and so a lost executor's partitions are recomputed from lineage as any
//! RDD's are.
//!
//! ```no_run
//! use ember_sql::{avg, col, lit, max, min};
//! let ctx = ember::Context::from_env()?;
//! let sql = ember_sql::SqlContext::new(&ctx)?;
//! sql.register_parquet("trips", "/data/trips")?;
//! let df = sql
//!     .table("trips")?
//!     .filter(col("fare").gt(lit(0.0)))?
//!     .group_by(vec![col("city")])
//!     .agg(vec![min(col("fare")), avg(col("fare")), max(col("fare"))])?;
//! df.show()?;
//! sql.sql("SELECT city, count(*) FROM trips GROUP BY city")?
//!     .write_csv("/tmp/out")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A crate of its own: jobs that use only RDDs neither compile nor link DataFusion.

mod compact;
mod context;
mod dataframe;
mod error;
pub mod input_exec;
pub mod rdd_table;
pub mod run;
pub mod stages;
pub mod subquery;

pub use context::SqlContext;
pub use dataframe::{DataFrame, GroupedData};
pub use datafusion;
pub use datafusion::common::JoinType;
pub use datafusion::functions_aggregate::expr_fn::{avg, count, max, min, sum};
pub use datafusion::prelude::{col, lit};
pub use error::{Result, SqlError};
