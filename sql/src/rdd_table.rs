//! ember RDDs as tables: an `Rdd<T>` of serde records (its columns from `T`'s fields, as
//! ember's Parquet sink derives them) or an `Rdd<ArrowBatch>` (with its schema), queried
//! by SQL or DataFrames like any table.
//!
//! The table's scan is an [`RddScanExec`] leaf naming the RDD; it is never executed: the
//! cut ([`crate::stages`]) makes it a stage input whose producer is the RDD itself (each
//! of its partitions' batches, projected to the columns the query reads, to the task of
//! the same partition). So the RDD's lineage is the query's: a lost partition is
//! recomputed by ember like any other.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

/// A registered RDD's table: its id in its [`crate::SqlContext`], schema and partitions.
#[derive(Debug)]
pub struct RddTable {
    pub(crate) id: u32,
    pub(crate) schema: SchemaRef,
    pub(crate) partitions: usize,
}

#[async_trait]
impl TableProvider for RddTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection = projection.cloned();
        let schema = match &projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        Ok(Arc::new(RddScanExec::new(
            self.id,
            schema,
            self.partitions,
            projection,
        )))
    }
}

/// The scan of a registered RDD (see the module docs): cut into a stage input.
#[derive(Debug)]
pub struct RddScanExec {
    pub(crate) id: u32,
    pub(crate) schema: SchemaRef,
    pub(crate) partitions: usize,
    /// The RDD's columns the query reads, if not all.
    pub(crate) projection: Option<Vec<usize>>,
    props: Arc<PlanProperties>,
}

impl RddScanExec {
    fn new(id: u32, schema: SchemaRef, partitions: usize, projection: Option<Vec<usize>>) -> Self {
        RddScanExec {
            id,
            props: crate::input_exec::leaf_properties(&schema, partitions),
            schema,
            partitions,
            projection,
        }
    }
}

impl DisplayAs for RddScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "RddScanExec: rdd table {}, partitions={}, projection={:?}",
            self.id, self.partitions, self.projection
        )
    }
}

impl ExecutionPlan for RddScanExec {
    crate::input_exec::leaf_plan_methods!("RddScanExec");

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "an RDD's table is read through ember's stages, never executed in place".into(),
        ))
    }
}
