//! [`StageInputExec`]: the leaf a stage's plan fragment reads another stage's output
//! through, in place of the exchange the cut removed, and [`StageCodec`], which carries
//! it through DataFusion's protobuf plan codec to the tasks.
//!
//! A task receives its partition of every input as ember shuffle records tagged
//! (input, source partition, batch) and binds them to the fragment's input leaves
//! ([`bind`]). An input is read one of two ways:
//! * `Hash`: it replaced a hash (or round-robin) repartition into `n` partitions; the
//!   task running partition `i` received exactly partition `i`'s rows, so `execute(i)`
//!   yields all of them.
//! * `All`: it replaced a gather (a coalesce or a sort-preserving merge over `m` input
//!   partitions, or the collected side of a join); every task received every batch,
//!   tagged with the partition it came from, and `execute(p)` yields source partition
//!   `p`'s batches in the order that partition produced them.
//!
//! Invariant: an unbound leaf (a plan not bound to a task's inputs) fails when executed,
//! naming itself; it is never silently empty.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

/// How a stage input's batches were routed to this stage's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMode {
    /// Each task got its own partition of the input.
    Hash,
    /// Each task got every batch, tagged with its source partition.
    All,
}

/// The batches of one task's inputs: by input number, each batch with its source
/// partition, in arrival order.
#[derive(Debug, Default)]
pub struct TaskInputs {
    pub by_input: HashMap<u32, Vec<(u32, RecordBatch)>>,
}

/// A leaf reading input `input` of the stage (see the module docs).
#[derive(Debug)]
pub struct StageInputExec {
    input: u32,
    mode: InputMode,
    partitions: usize,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    bound: Option<Arc<TaskInputs>>,
}

/// The properties of a leaf of this crate: `partitions` partitions of `schema`, in no
/// known partitioning or order, bounded.
pub(crate) fn leaf_properties(schema: &SchemaRef, partitions: usize) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema.clone()),
        Partitioning::UnknownPartitioning(partitions),
        EmissionType::Incremental,
        Boundedness::Bounded,
    ))
}

/// The `ExecutionPlan` methods every leaf of this crate has alike (its properties in a
/// `props` field, no children, no expressions); `$name` names it in errors.
macro_rules! leaf_plan_methods {
    ($name:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn properties(&self) -> &Arc<PlanProperties> {
            &self.props
        }

        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            Vec::new()
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
        ) -> Result<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }

        #[allow(deprecated)]
        fn with_new_children(
            self: Arc<Self>,
            children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            if children.is_empty() {
                Ok(self)
            } else {
                Err(DataFusionError::Internal(format!(
                    "{} is a leaf: it takes no children",
                    $name
                )))
            }
        }
    };
}
pub(crate) use leaf_plan_methods;

impl StageInputExec {
    pub fn new(input: u32, mode: InputMode, partitions: usize, schema: SchemaRef) -> Self {
        StageInputExec {
            input,
            mode,
            partitions,
            props: leaf_properties(&schema, partitions),
            schema,
            bound: None,
        }
    }

    fn bound_to(&self, inputs: Arc<TaskInputs>) -> Self {
        StageInputExec {
            input: self.input,
            mode: self.mode,
            partitions: self.partitions,
            schema: self.schema.clone(),
            props: self.props.clone(),
            bound: Some(inputs),
        }
    }
}

impl DisplayAs for StageInputExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "StageInputExec: input={}, mode={:?}, partitions={}",
            self.input, self.mode, self.partitions
        )
    }
}

impl ExecutionPlan for StageInputExec {
    leaf_plan_methods!("StageInputExec");

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(inputs) = &self.bound else {
            return Err(DataFusionError::Internal(format!(
                "stage input {} was executed outside an ember task (not bound to its batches)",
                self.input
            )));
        };
        let all = inputs.by_input.get(&self.input);
        let batches: Vec<RecordBatch> = match self.mode {
            InputMode::Hash => {
                all.map_or_else(Vec::new, |v| v.iter().map(|(_, b)| b.clone()).collect())
            }
            InputMode::All => all.map_or_else(Vec::new, |v| {
                v.iter()
                    .filter(|(src, _)| *src as usize == partition)
                    .map(|(_, b)| b.clone())
                    .collect()
            }),
        };
        Ok(Box::pin(MemoryStream::try_new(
            batches,
            self.schema.clone(),
            None,
        )?))
    }
}

/// `plan` with every stage input leaf bound to `inputs`.
pub fn bind(
    plan: Arc<dyn ExecutionPlan>,
    inputs: Arc<TaskInputs>,
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .transform_up(|node: Arc<dyn ExecutionPlan>| {
            if let Some(leaf) = node.downcast_ref::<StageInputExec>() {
                let bound: Arc<dyn ExecutionPlan> = Arc::new(leaf.bound_to(inputs.clone()));
                Ok(Transformed::yes(bound))
            } else {
                Ok(Transformed::no(node))
            }
        })?
        .data)
}

/// The codec of ember's plan nodes (the stage input leaf) for DataFusion's protobuf
/// plans; every other node is DataFusion's own.
#[derive(Debug, Default)]
pub struct StageCodec;

impl PhysicalExtensionCodec for StageCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let bad =
            |what: &str| DataFusionError::Internal(format!("undecodable stage input: {what}"));
        if !inputs.is_empty() {
            return Err(bad("it has children"));
        }
        if buf.len() < 9 {
            return Err(bad("too short"));
        }
        let input = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        let mode = match buf[4] {
            0 => InputMode::Hash,
            1 => InputMode::All,
            _ => return Err(bad("unknown mode")),
        };
        let partitions = u32::from_le_bytes(buf[5..9].try_into().expect("4 bytes")) as usize;
        let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(
            std::io::Cursor::new(&buf[9..]),
            None,
        )?;
        let schema = reader.schema();
        Ok(Arc::new(StageInputExec::new(
            input, mode, partitions, schema,
        )))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(leaf) = node.downcast_ref::<StageInputExec>() else {
            return Err(DataFusionError::NotImplemented(format!(
                "ember cannot ship the plan node {} to its tasks",
                node.name()
            )));
        };
        buf.extend_from_slice(&leaf.input.to_le_bytes());
        buf.push(match leaf.mode {
            InputMode::Hash => 0,
            InputMode::All => 1,
        });
        buf.extend_from_slice(&(leaf.partitions as u32).to_le_bytes());
        let mut w = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut *buf, &leaf.schema)?;
        w.finish()?;
        Ok(())
    }
}
