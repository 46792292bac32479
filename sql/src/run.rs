//! Running cut stages ([`crate::stages`]) as ember RDDs, and what one ember task of a
//! stage does.
//!
//! A stage's input is one ember shuffle: the union of its child stages' routed outputs,
//! records `(target partition, (input number, source partition, batch))` routed by
//! identity into the stage's partitions; a stage with no inputs reads none (an empty
//! source of its partition count). Each task decodes the stage's fragment (DataFusion's
//! protobuf plan, [`StageCodec`] for the input leaves), binds its input batches to the
//! leaves, executes its partition on a runtime of its own thread, and routes the output:
//! by the fragment's root repartition (DataFusion's `BatchPartitioner`, so hash rows go
//! where DataFusion puts them and round robin depends only on the batch's position), to
//! every consumer task, or, for the result stage, as the result's batches; each batch
//! with its view columns compacted first ([`crate::compact`]).
//!
//! Invariant: a task's output depends only on its partition's inputs and the fragment, so
//! ember recomputing a lost partition from lineage gives the same batches; a task that
//! fails (a DataFusion error, an undecodable fragment) fails with DataFusion's message.

use std::cell::RefCell;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::Time;
use datafusion::physical_plan::repartition::{BatchPartitioner, RepartitionExec};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::SessionContext;
use ember::{ArrowBatch, Context, KeyPartitioner, Rdd, Records};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::compact::compact;
use crate::context::SqlContext;
use crate::error::{Result, SqlError};
use crate::input_exec::{bind, StageCodec, TaskInputs};
use crate::stages::{Route, Source, Stage};

/// A batch on its way to a stage: (input number, source partition, batch).
pub type Tagged = (u32, u32, ArrowBatch);

/// Routes a record to the partition its key names.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identity(pub u32);

impl KeyPartitioner<u32> for Identity {
    fn num_partitions(&self) -> u32 {
        self.0
    }
    fn partition(&self, key: &u32) -> u32 {
        *key
    }
}

/// What one stage's tasks need: its fragment, its route and its number among its
/// consumer's inputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageTask {
    plan: Vec<u8>,
    /// 0: result, 1: repartition, 2: to all `all_n` consumer tasks.
    route: u8,
    all_n: u32,
    input_no: u32,
    partitions: u32,
    /// A repartition's partition `k` goes to the consumer's task `offset + k`.
    offset: u32,
}

/// How a registered RDD's partitions reach the stage reading them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RddRoute {
    input_no: u32,
    projection: Option<Vec<usize>>,
    offset: u32,
}

/// The batches of the result stage (the last of `stages`), as an RDD.
pub fn result_rdd(sql: &SqlContext, stages: &[Stage]) -> Result<Rdd<ArrowBatch>> {
    let last = stages.len() - 1;
    let task = stage_task(&stages[last], 0)?;
    Ok(input_rdd(sql, stages, last)?
        .map_partitions_with_index_with(task, run_result)
        .named(&stage_name(stages, last)))
}

/// What the web UI, the console and the event log call SQL stage `id`'s RDD: its number
/// and its fragment's operators from the root down (a few, depth first), e.g. `SQL stage
/// 3: RepartitionExec, HashJoinExec, StageInputExec, StageInputExec`.
fn stage_name(stages: &[Stage], id: usize) -> String {
    const SHOWN: usize = 6;
    let mut names = Vec::new();
    let mut todo = vec![stages[id].plan.clone()];
    while let Some(p) = todo.pop() {
        if names.len() == SHOWN {
            names.push("…".to_string());
            break;
        }
        names.push(p.name().to_string());
        todo.extend(p.children().into_iter().rev().cloned());
    }
    format!("SQL stage {id}: {}", names.join(", "))
}

fn stage_task(stage: &Stage, input_no: u32) -> Result<StageTask> {
    let plan = datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(
        stage.plan.clone(),
        &StageCodec,
    )?;
    let (route, all_n, offset) = match stage.route {
        Route::Result => (0, 0, 0),
        Route::Repartition { offset, .. } => (1, 0, offset as u32),
        Route::All { n } => (2, n as u32, 0),
        Route::Partition { .. } => {
            return Err(SqlError::Unsupported(
                "an RDD's stage runs no plan fragment".into(),
            ))
        }
    };
    Ok(StageTask {
        plan: plan.to_vec(),
        route,
        all_n,
        input_no,
        partitions: stage.partitions as u32,
        offset,
    })
}

/// Stage `id`'s input: its children's routed outputs in one shuffle, or an empty source.
fn input_rdd(sql: &SqlContext, stages: &[Stage], id: usize) -> Result<Rdd<(u32, Tagged)>> {
    let ctx: &Context = sql.ember();
    let st = &stages[id];
    let n = st.partitions.max(1);
    if st.inputs.is_empty() {
        return Ok(ctx.parallelize(Vec::<(u32, Tagged)>::new(), n));
    }
    let mut parts = Vec::with_capacity(st.inputs.len());
    for (j, child) in st.inputs.iter().enumerate() {
        let c = &stages[*child];
        let routed = match (&c.source, c.route) {
            (Source::Rdd { id, projection }, Route::Partition { offset }) => {
                let route = RddRoute {
                    input_no: j as u32,
                    projection: projection.clone(),
                    offset: offset as u32,
                };
                sql.rdd(*id)?
                    .map_partitions_with_index_with(route, route_rdd)
                    .named(&format!("SQL stage {child}: a registered RDD's batches"))
            }
            _ => {
                let task = stage_task(c, j as u32)?;
                input_rdd(sql, stages, *child)?
                    .map_partitions_with_index_with(task, run_routed)
                    .named(&stage_name(stages, *child))
            }
        };
        parts.push(routed);
    }
    let children: Vec<String> = st.inputs.iter().map(|c| c.to_string()).collect();
    let union = match parts.len() {
        1 => parts
            .pop()
            .unwrap_or_else(|| ctx.parallelize(Vec::new(), n)),
        _ => ctx
            .union(&parts)
            .named(&format!("SQL stages {} to stage {id}", children.join(", "))),
    };
    Ok(union.partition_by_with(Identity(n as u32)))
}

/// A registered RDD's partition, its batches projected, to the consumer's task of the
/// same partition (shifted by the route's offset).
fn route_rdd(route: &RddRoute, partition: u32, batches: Records<ArrowBatch>) -> Vec<(u32, Tagged)> {
    let target = route.offset + partition;
    batches
        .filter(|b| b.0.num_rows() > 0)
        .map(|b| {
            let batch = match &route.projection {
                Some(p) => {
                    b.0.project(p)
                        .unwrap_or_else(|e| panic!("projecting a table's batch: {e}"))
                }
                None => b.0,
            };
            (target, (route.input_no, partition, ArrowBatch(batch)))
        })
        .collect()
}

thread_local! {
    /// A task thread's runtime and DataFusion context (made once per thread).
    static RUNTIME: RefCell<Option<(tokio::runtime::Runtime, SessionContext)>> = const { RefCell::new(None) };
}

/// The DataFusion session of a task thread. Every task of this process draws on one
/// runtime: operators that buffer (sorts, aggregations, joins' build sides) share one
/// pool of the executor's memory (`EMBER_EXECUTOR_MEMORY`, ember's default if unset),
/// fairly between the running tasks, and those that can spill do so, to the worker's
/// scratch directory (`EMBER_WORKER_DIR`, else the system's temporary directory), when
/// it runs short; a hash join's build side cannot, and fails its task naming the pool.
fn task_session() -> SessionContext {
    static RUNTIME_ENV: std::sync::OnceLock<Option<Arc<RuntimeEnv>>> = std::sync::OnceLock::new();
    let env = RUNTIME_ENV.get_or_init(|| {
        let memory = std::env::var("EMBER_EXECUTOR_MEMORY")
            .ok()
            .and_then(|m| ember::memory::parse_memory_size(&m).ok())
            .unwrap_or(ember::DEFAULT_EXECUTOR_MEMORY);
        let mut runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(memory as usize)));
        if let Some(dir) = std::env::var_os("EMBER_WORKER_DIR") {
            runtime = runtime.with_temp_file_path(std::path::PathBuf::from(dir).join("sql-spill"));
        }
        match runtime.build_arc() {
            Ok(rt) => Some(rt),
            Err(e) => {
                tracing::warn!(
                    "no memory-bounded DataFusion runtime for SQL tasks ({e}); using the default"
                );
                None
            }
        }
    });
    match env {
        Some(rt) => SessionContext::new_with_config_rt(crate::context::task_config(), rt.clone()),
        None => SessionContext::new_with_config(crate::context::task_config()),
    }
}

/// Runs `f` with this thread's runtime and task context.
fn with_runtime<R>(f: impl FnOnce(&tokio::runtime::Runtime, Arc<TaskContext>) -> R) -> R {
    RUNTIME.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (rt, ctx) = cell.get_or_insert_with(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a task's DataFusion runtime");
            (rt, task_session())
        });
        f(rt, ctx.task_ctx())
    })
}

/// Runs `task`'s fragment for `partition` over its input records; the output batches.
fn execute(
    task: &StageTask,
    partition: u32,
    records: Records<(u32, Tagged)>,
) -> Result<(Arc<dyn ExecutionPlan>, Vec<RecordBatch>)> {
    let mut inputs = TaskInputs::default();
    for (_, (input, src, batch)) in records {
        inputs
            .by_input
            .entry(input)
            .or_default()
            .push((src, batch.0));
    }
    with_runtime(|rt, tctx| {
        let plan = datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
            &task.plan,
            &tctx,
            &StageCodec,
        )?;
        let plan = bind(plan, Arc::new(inputs))?;
        let run = if task.route == 1 {
            let Some(r) = plan.downcast_ref::<RepartitionExec>() else {
                return Err(SqlError::Unsupported(
                    "a repartitioned stage whose root is not a repartition".into(),
                ));
            };
            r.input().clone()
        } else {
            plan.clone()
        };
        if partition as usize >= run.output_partitioning().partition_count() {
            // A stage of no partitions runs one task, which has nothing to do.
            return Ok((plan, Vec::new()));
        }
        let batches: Vec<RecordBatch> = rt.block_on(async {
            let stream = run.execute(partition as usize, tctx.clone())?;
            stream.try_collect::<Vec<_>>().await
        })?;
        Ok((plan, batches))
    })
}

/// A result stage's task: its output batches.
fn run_result(
    task: &StageTask,
    partition: u32,
    records: Records<(u32, Tagged)>,
) -> Vec<ArrowBatch> {
    match execute(task, partition, records) {
        Ok((_, batches)) => batches
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| ArrowBatch(compact(b)))
            .collect(),
        Err(e) => panic!("query stage, partition {partition}: {e}"),
    }
}

/// A child stage's task: its output batches routed to the consumer's tasks.
fn run_routed(
    task: &StageTask,
    partition: u32,
    records: Records<(u32, Tagged)>,
) -> Vec<(u32, Tagged)> {
    match route(task, partition, records) {
        Ok(out) => out,
        Err(e) => panic!("query stage, partition {partition}: {e}"),
    }
}

fn route(
    task: &StageTask,
    partition: u32,
    records: Records<(u32, Tagged)>,
) -> Result<Vec<(u32, Tagged)>> {
    let (plan, batches) = execute(task, partition, records)?;
    let mut out = Vec::new();
    let tag = |b: RecordBatch| (task.input_no, partition, ArrowBatch(b));
    match task.route {
        1 => {
            let Some(r) = plan.downcast_ref::<RepartitionExec>() else {
                return Err(SqlError::Unsupported("a repartition root".into()));
            };
            let mut p = BatchPartitioner::try_new(
                r.partitioning().clone(),
                Time::new(),
                partition as usize,
                task.partitions as usize,
            )?;
            for b in batches {
                if b.num_rows() == 0 {
                    continue;
                }
                p.partition(b, |target, part| {
                    if part.num_rows() > 0 {
                        out.push((task.offset + target as u32, tag(compact(part))));
                    }
                    Ok(())
                })?;
            }
        }
        _ => {
            for b in batches
                .into_iter()
                .filter(|b| b.num_rows() > 0)
                .map(compact)
            {
                for target in 0..task.all_n.max(1) {
                    out.push((target, tag(b.clone())));
                }
            }
        }
    }
    Ok(out)
}
