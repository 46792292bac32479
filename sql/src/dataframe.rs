//! [`DataFrame`]: a query over registered tables, built with DataFusion's expressions
//! (Spark's DataFrame operators by their Spark names where they differ) and run on
//! ember's stages when collected, shown or written.
//!
//! Building a DataFrame only plans: nothing runs until [`DataFrame::collect`],
//! [`DataFrame::show`], [`DataFrame::write_csv`] or [`DataFrame::write_parquet`], each of
//! which is one query (one or more ember jobs' worth of stages).

use std::io::Write as _;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::JoinType;
use datafusion::logical_expr::SortExpr;
use datafusion::prelude::Expr;
use ember::Records;

use crate::context::SqlContext;
use crate::error::{Result, SqlError};

/// A planned query (see the module docs).
pub struct DataFrame<'a> {
    sql: &'a SqlContext,
    df: datafusion::dataframe::DataFrame,
}

/// A DataFrame grouped by some expressions, waiting for its aggregates.
pub struct GroupedData<'a> {
    df: DataFrame<'a>,
    keys: Vec<Expr>,
}

impl<'a> GroupedData<'a> {
    /// One row per group: the keys, then each aggregate (Spark's `groupBy(..).agg(..)`).
    pub fn agg(self, aggregates: Vec<Expr>) -> Result<DataFrame<'a>> {
        let sql = self.df.sql;
        Ok(DataFrame::new(
            sql,
            self.df.df.aggregate(self.keys, aggregates)?,
        ))
    }
}

impl<'a> DataFrame<'a> {
    pub(crate) fn new(sql: &'a SqlContext, df: datafusion::dataframe::DataFrame) -> Self {
        DataFrame { sql, df }
    }

    fn then(self, df: datafusion::error::Result<datafusion::dataframe::DataFrame>) -> Result<Self> {
        Ok(DataFrame::new(self.sql, df?))
    }

    /// The DataFusion DataFrame underneath (its full API). Running it with DataFusion's
    /// own `collect` runs it in this process, not on ember's stages.
    pub fn inner(&self) -> &datafusion::dataframe::DataFrame {
        &self.df
    }

    /// The result's columns.
    pub fn schema(&self) -> SchemaRef {
        self.df.schema().inner().clone()
    }

    /// The columns named, in that order.
    pub fn select_columns(self, names: &[&str]) -> Result<Self> {
        let df = self.df.clone().select_columns(names);
        self.then(df)
    }

    /// The expressions (columns, computed values, window functions), in that order.
    pub fn select(self, exprs: Vec<Expr>) -> Result<Self> {
        let df = self.df.clone().select(exprs);
        self.then(df)
    }

    /// The rows for which `predicate` is true (Spark's `filter` / `where`).
    pub fn filter(self, predicate: Expr) -> Result<Self> {
        let df = self.df.clone().filter(predicate);
        self.then(df)
    }

    /// Adds (or replaces) column `name` computed by `expr`.
    pub fn with_column(self, name: &str, expr: Expr) -> Result<Self> {
        let df = self.df.clone().with_column(name, expr);
        self.then(df)
    }

    /// Groups by `keys`; finish with [`GroupedData::agg`].
    pub fn group_by(self, keys: Vec<Expr>) -> GroupedData<'a> {
        GroupedData { df: self, keys }
    }

    /// Joins with `right` on equal columns (`left_on[i] = right_on[i]`); `how` is
    /// inner, left, right, full, left semi or left anti.
    pub fn join(
        self,
        right: DataFrame<'_>,
        how: JoinType,
        left_on: &[&str],
        right_on: &[&str],
    ) -> Result<Self> {
        let df = self.df.clone().join(right.df, how, left_on, right_on, None);
        self.then(df)
    }

    /// Sorted by `by` (Spark's `orderBy`): `col("x").sort(ascending, nulls_first)`.
    pub fn order_by(self, by: Vec<SortExpr>) -> Result<Self> {
        let df = self.df.clone().sort(by);
        self.then(df)
    }

    /// At most `n` rows (the first `n` in order, if ordered).
    pub fn limit(self, n: usize) -> Result<Self> {
        let df = self.df.clone().limit(0, Some(n));
        self.then(df)
    }

    /// Rows once each.
    pub fn distinct(self) -> Result<Self> {
        let df = self.df.clone().distinct();
        self.then(df)
    }

    /// The rows of both (Spark's `union`: duplicates kept, columns by position).
    pub fn union(self, other: DataFrame<'_>) -> Result<Self> {
        let df = self.df.clone().union(other.df);
        self.then(df)
    }

    async fn physical(
        &self,
    ) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>
    {
        self.df.clone().create_physical_plan().await
    }

    /// Runs the query on ember's stages; its batches (rows in the query's order when it
    /// has one).
    pub fn collect(&self) -> Result<Vec<RecordBatch>> {
        let plan = self.sql.block_on(self.physical())?;
        self.sql.run(plan)
    }

    /// Runs the query; its rows as records of type `T` (fields by column name, as
    /// `Context::read_parquet` maps them; rows in the query's order when it has one).
    /// A row that does not decode as `T` fails the query, naming the type.
    pub fn collect_as<T: ember::Data>(&self) -> Result<Vec<T>> {
        let plan = self.sql.block_on(self.physical())?;
        Ok(self.sql.result_rdd(plan)?.to_records::<T>().collect()?)
    }

    /// The result as a text table (at most `n` rows), as Spark's `show` prints it.
    pub fn show_string(&self, n: usize) -> Result<String> {
        let batches = self.clone_df().limit(n)?.collect()?;
        Ok(
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .map_err(datafusion::error::DataFusionError::from)?
                .to_string(),
        )
    }

    /// Prints the first 20 rows as a table on standard output (Spark's `show()`).
    pub fn show(&self) -> Result<()> {
        let table = self.show_string(20)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{table}").map_err(|e| SqlError::Output(format!("standard output: {e}")))
    }

    fn clone_df(&self) -> DataFrame<'a> {
        DataFrame::new(self.sql, self.df.clone())
    }

    /// The logical plan, DataFusion's physical plan, and the ember stages it runs as.
    pub fn explain(&self) -> Result<String> {
        let plan = self.sql.block_on(self.physical())?;
        let logical = self.df.logical_plan().display_indent().to_string();
        let physical = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        let stages = self.sql.stages(plan)?;
        let mut s = format!(
            "== Logical plan ==\n{logical}\n== Physical plan ==\n{physical}== ember stages ==\n"
        );
        for (i, st) in stages.iter().enumerate() {
            s += &format!(
                "stage {i}: {} task(s), inputs from stages {:?}, output {:?}\n{}",
                st.partitions,
                st.inputs,
                st.route,
                datafusion::physical_plan::displayable(st.plan.as_ref()).indent(true)
            );
        }
        Ok(s)
    }

    /// Writes the result as CSV files under `path` (`part-*` files and `_SUCCESS`, by
    /// ember's output commit): a header line in every part file, floats as shortest
    /// round-trip decimals, dates as YYYY-MM-DD, NULL as an empty field.
    pub fn write_csv(&self, path: &str) -> Result<()> {
        let plan = self.sql.block_on(self.physical())?;
        let header = plan
            .schema()
            .fields()
            .iter()
            .map(|f| csv_field(f.name()))
            .collect::<Vec<_>>()
            .join(",");
        self.sql
            .result_rdd(plan)?
            .map_partitions_with_index_with(header, csv_part)
            .save_as_text_file(path)?;
        Ok(())
    }

    /// Writes the result as Parquet files under `path` (ember's Parquet sink).
    pub fn write_parquet(&self, path: &str) -> Result<()> {
        let plan = self.sql.block_on(self.physical())?;
        self.sql
            .result_rdd(plan)?
            .save_batches_as_parquet(path, ember::ParquetWriteOptions::default())?;
        Ok(())
    }
}

/// A header name as a CSV field (quoted if it must be).
fn csv_field(name: &str) -> String {
    if name.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", name.replace('"', "\"\""))
    } else {
        name.to_string()
    }
}

/// One part file's text: the header, then each batch as CSV rows.
#[allow(clippy::ptr_arg)] // `&S` of the operator's state, a `String`
fn csv_part(header: &String, _partition: u32, batches: Records<ember::ArrowBatch>) -> Vec<String> {
    let mut out = vec![header.clone()];
    for b in batches {
        let mut buf = Vec::new();
        {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(false)
                .with_date_format("%Y-%m-%d".into())
                .build(&mut buf);
            if let Err(e) = w.write(&b.0) {
                panic!("writing a batch as CSV: {e}");
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        if !text.is_empty() {
            out.push(text.to_string());
        }
    }
    out
}
