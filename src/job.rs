//! Running a job from the client side: submit the plan of an action, follow its
//! events (progress bar, accumulator updates, per-stage metrics), gather the result of
//! each partition, and turn a failure into an [`EmberError`] that names stage,
//! partition and executor.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ember_proto::TaskMetrics;
use ember_scheduler::{JobEvent, JobFailure};
use tracing::{info, warn};

use crate::conf::{Master, ShuffleDurability};
use crate::context::Context;
use crate::error::{EmberError, Result};
use crate::plan::build_plan;
use crate::plan::op::OpRef;
use crate::plan::LineageNode;
use crate::progress::ProgressBar;
use crate::task::ResultFn;

#[derive(Default)]
struct StageSummary {
    name: String,
    tasks: u32,
    failed: u32,
    metrics: TaskMetrics,
    started: Option<Instant>,
    elapsed: Duration,
    skipped: bool,
}

fn add(m: &mut TaskMetrics, t: &TaskMetrics) {
    m.records_in += t.records_in;
    m.records_out += t.records_out;
    m.shuffle_bytes_written += t.shuffle_bytes_written;
    m.shuffle_bytes_read += t.shuffle_bytes_read;
    m.shuffle_records_written += t.shuffle_records_written;
    m.shuffle_records_read += t.shuffle_records_read;
    m.bytes_spilled += t.bytes_spilled;
    m.spill_count += t.spill_count;
    m.run_time_micros += t.run_time_micros;
}

/// Totals of a finished job, for tests and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct JobMetrics {
    pub stages_run: u32,
    pub stages_skipped: u32,
    pub tasks: u32,
    pub totals: TaskMetrics,
}

impl Context {
    /// Runs `result_fn` on `partitions` (all if `None`) of `node`; returns each
    /// partition's serialised result, in partition order. With `sample_sources` it is a
    /// sampling job, whose result tasks may read only part of their text input (see
    /// `Plan::sample_sources`).
    pub(crate) fn run_job(
        &self,
        node: &std::sync::Arc<LineageNode>,
        result_fn: ResultFn,
        payload: Vec<u8>,
        partitions: Option<Vec<u32>>,
        action: &str,
        sample_sources: bool,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        let description = format!("{action} of {}", node.name);
        let mut plan = build_plan(
            node,
            result_fn.to_offset(),
            payload,
            partitions.unwrap_or_default(),
            description.clone(),
            self.inner.binary_id.clone(),
        )?;
        plan.sample_sources = sample_sources;
        let properties = self.local_properties();
        if properties != ember_proto::JobProperties::default() {
            plan.properties = Some(properties);
        }
        if let Some(dir) = &self.inner.shuffle_store {
            set_stored_dir(&mut plan, dir);
        }
        if let (ShuffleDurability::Replicated(n), Master::Cluster(_)) =
            (&self.inner.conf.shuffle_durability, &self.inner.conf.master)
        {
            set_replicas(&mut plan, *n);
        }
        let events = self
            .inner
            .backend
            .submit(plan, &self.inner.broadcasts.lock());
        let mut progress = ProgressBar::new(self.inner.conf.progress);
        let mut stages: BTreeMap<u32, StageSummary> = BTreeMap::new();
        let mut results: Vec<(u32, Vec<u8>)> = Vec::new();
        let started = Instant::now();
        let mut job = None;
        // The first counted accumulator update that did not decode: the job fails
        // with it rather than report an undercounted value.
        let mut accumulator_error: Option<EmberError> = None;
        let outcome = loop {
            // A quiet moment redraws what a burst of events left undrawn (the line is
            // redrawn at most ten times a second), so it shows every running task.
            let ev = match events.recv_timeout(std::time::Duration::from_millis(100)) {
                Ok(ev) => ev,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    progress.tick();
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    break Err(EmberError::Cancelled("the scheduler stopped".into()));
                }
            };
            match ev {
                JobEvent::Started { job_id, number, .. } => job = Some((job_id, number)),
                JobEvent::ExecutorLost {
                    executor_id,
                    reason,
                    outputs_from_storage,
                    outputs_from_replicas,
                } => {
                    // The console says so at once: the stages that run again follow.
                    warn!(
                        "{}",
                        lost_executor_message(
                            &executor_id,
                            &reason,
                            outputs_from_storage,
                            outputs_from_replicas
                        )
                    );
                }
                JobEvent::StageSkipped(info) => {
                    let s = stages.entry(info.stage_id).or_default();
                    s.name = info.name;
                    s.skipped = true;
                }
                JobEvent::StageSubmitted(info) => {
                    if info.attempt > 1 {
                        // Its input was lost (an executor died, a shuffle block could not
                        // be read): say so on the console, not only in the summary.
                        warn!(
                            "stage {} ({}) runs again, attempt {}: {} of its {} tasks, \
                             for output that was lost",
                            info.stage_id,
                            info.name,
                            info.attempt,
                            info.tasks_to_run,
                            info.num_tasks
                        );
                    }
                    let s = stages.entry(info.stage_id).or_default();
                    s.name = info.name.clone();
                    s.skipped = false;
                    s.started.get_or_insert_with(Instant::now);
                    progress.stage_submitted(info.stage_id, info.tasks_to_run);
                }
                JobEvent::TaskStarted { stage_id, .. } => progress.task_started(stage_id),
                JobEvent::TaskEnded {
                    stage_id,
                    partition,
                    metrics,
                    succeeded,
                    counted,
                    accumulators,
                    ..
                } => {
                    progress.task_ended(stage_id, succeeded);
                    let s = stages.entry(stage_id).or_default();
                    if succeeded {
                        s.tasks += 1;
                        add(&mut s.metrics, &metrics);
                    } else {
                        s.failed += 1;
                    }
                    if counted {
                        let accs = self.inner.accumulators.lock();
                        for u in accumulators {
                            let Some(acc) = accs.get(&u.id) else {
                                continue; // an accumulator of another context
                            };
                            if let Err(message) = acc.merge_encoded(&u.value) {
                                accumulator_error.get_or_insert(EmberError::Serialization {
                                    what: format!(
                                        "the update of accumulator {} ({}) from stage {stage_id} partition {partition}",
                                        u.id,
                                        acc.name()
                                    ),
                                    message,
                                });
                            }
                        }
                    }
                }
                JobEvent::StageCompleted { stage_id } => {
                    if let Some(s) = stages.get_mut(&stage_id) {
                        if let Some(t) = s.started {
                            s.elapsed = t.elapsed();
                        }
                    }
                    progress.stage_completed(stage_id);
                }
                JobEvent::TaskResult { partition, result } => results.push((partition, result)),
                JobEvent::JobSucceeded { .. } => break Ok(()),
                JobEvent::JobFailed { failure, .. } => break Err(failure_to_error(failure)),
            }
        };
        progress.finish();
        let elapsed = started.elapsed();
        let job_label = job.map_or_else(|| "-".to_string(), |(_, n)| n.to_string());
        let mut totals = JobMetrics::default();
        for (id, s) in &stages {
            if s.skipped {
                totals.stages_skipped += 1;
                info!(
                    "job {job_label} stage {id} ({}): skipped, its shuffle output exists",
                    s.name
                );
                continue;
            }
            totals.stages_run += 1;
            totals.tasks += s.tasks;
            add(&mut totals.totals, &s.metrics);
            let m = &s.metrics;
            info!(
                "job {job_label} stage {id} ({}): {} tasks{}, records in {} out {}, shuffle written {} B ({} records), read {} B ({} records), spilled {} B in {} spills, {:.3} s",
                s.name,
                s.tasks,
                if s.failed > 0 { format!(" ({} failed attempts)", s.failed) } else { String::new() },
                m.records_in,
                m.records_out,
                m.shuffle_bytes_written,
                m.shuffle_records_written,
                m.shuffle_bytes_read,
                m.shuffle_records_read,
                m.bytes_spilled,
                m.spill_count,
                s.elapsed.as_secs_f64()
            );
        }
        *self.inner.last_job.lock() = Some(totals);
        let outcome = match (outcome, accumulator_error) {
            (Ok(()), Some(e)) => Err(e),
            (outcome, _) => outcome,
        };
        match outcome {
            Ok(()) => {
                info!(
                    "job {job_label} ({description}) finished in {:.3} s",
                    elapsed.as_secs_f64()
                );
                results.sort_unstable_by_key(|(p, _)| *p);
                Ok(results)
            }
            Err(e) => {
                // A job failing because an interrupt is removing its files: the
                // process is about to end by the signal; do not report the failure.
                crate::interrupt::wait_if_interrupted();
                // Only a job that started has an id of its own to cancel.
                if let Some((job_id, _)) = job {
                    self.inner.backend.cancel(job_id, "job failed");
                }
                Err(e)
            }
        }
    }

    /// Metrics of the most recent job run by this context.
    pub fn last_job_metrics(&self) -> Option<JobMetrics> {
        self.inner.last_job.lock().clone()
    }
}

fn failure_to_error(f: JobFailure) -> EmberError {
    match f {
        JobFailure::TaskFailed {
            stage_id,
            stage_name,
            partition,
            executor_id,
            message,
        } => EmberError::TaskFailed {
            stage_id,
            stage_name,
            partition,
            executor_id,
            message,
        },
        JobFailure::StageFailed {
            stage_id,
            stage_name,
            message,
        } => EmberError::StageFailed {
            stage_id,
            stage_name,
            message,
        },
        JobFailure::Cancelled(m) => EmberError::Cancelled(m),
        JobFailure::InvalidPlan(m) => EmberError::Plan(m),
    }
}

/// Decodes per-partition results.
pub(crate) fn decode_results<R: serde::de::DeserializeOwned>(
    parts: Vec<(u32, Vec<u8>)>,
) -> Result<Vec<R>> {
    parts
        .into_iter()
        .map(|(p, bytes)| {
            postcard::from_bytes(&bytes)
                .map_err(|e| EmberError::ser(format!("result of partition {p}"), e))
        })
        .collect()
}

/// What the console says when an executor a job used is lost: which of its map outputs
/// are kept (served by replicas, read from storage) and that the rest is recomputed.
fn lost_executor_message(executor_id: &str, reason: &str, storage: u32, replicas: u32) -> String {
    if reason == "decommissioned" {
        // It left gracefully (SIGTERM, or the operator): its outputs were moved first.
        return format!(
            "executor {executor_id} was decommissioned; its {replicas} map output(s) moved to \
             other executors, what else it ran or kept there is recomputed"
        );
    }
    let mut kept = Vec::new();
    if replicas > 0 {
        kept.push(format!(
            "its {replicas} map output(s) are served by replicas on other executors"
        ));
    }
    if storage > 0 {
        kept.push(format!("its {storage} map output(s) are read from storage"));
    }
    if kept.is_empty() {
        format!(
            "lost executor {executor_id}: {reason}; what this job ran or kept there is recomputed"
        )
    } else {
        format!(
            "lost executor {executor_id}: {reason}; {}, what else it ran or kept there is \
             recomputed",
            kept.join(", ")
        )
    }
}

/// Marks every shuffle of `plan` as replicated `n` times (`replicated:N` durability):
/// the driver names `n` other executors each map task's output is pushed to.
fn set_replicas(plan: &mut ember_proto::Plan, n: u32) {
    for node in &mut plan.nodes {
        for dep in &mut node.deps {
            if let Some(ember_proto::dependency::Kind::Shuffle(s)) = dep.kind.as_mut() {
                s.replicas = n;
            }
        }
    }
}

/// Marks every shuffle of `plan` as stored in `dir` (`storage:` durability): its map
/// tasks commit a copy there, and its reducers read a lost executor's outputs from it.
fn set_stored_dir(plan: &mut ember_proto::Plan, dir: &std::path::Path) {
    let dir = dir.to_string_lossy().into_owned();
    for node in &mut plan.nodes {
        for dep in &mut node.deps {
            if let Some(ember_proto::dependency::Kind::Shuffle(s)) = dep.kind.as_mut() {
                s.stored_dir.clone_from(&dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_failure_is_its_own_error_naming_no_partition_or_executor() {
        let err = failure_to_error(JobFailure::StageFailed {
            stage_id: 3,
            stage_name: "map at src/main.rs:12".into(),
            message: "stage failed 4 consecutive attempts".into(),
        });
        assert!(matches!(err, EmberError::StageFailed { stage_id: 3, .. }));
        assert_eq!(
            err.to_string(),
            "job aborted: stage 3 (map at src/main.rs:12) failed: stage failed 4 consecutive attempts"
        );
    }
}
