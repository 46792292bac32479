//! The events the UI is built from, in the form the event log stores them: one JSON
//! object per line, tagged by `"event"`, converted from the scheduler's
//! [`ListenerEvent`](ember_scheduler::ListenerEvent)s.
//!
//! Invariant: converting loses nothing the status store uses, so a store replayed from
//! a log equals the live one it was written from.
//!
//! What a writer does to an event before it stores or serves it (its tag, texts cut to
//! a bound, credentials redacted) is `written.rs`'s.

use ember_proto::TaskMetrics;
use ember_scheduler::{ListenerEvent, StageDesc};
use serde::{Deserialize, Serialize};

mod written; // an event as a log writes it: tag, bounded texts, redaction

/// A task's metrics, as the UI shows and the log stores them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    pub records_in: u64,
    pub records_out: u64,
    pub shuffle_bytes_written: u64,
    pub shuffle_bytes_read: u64,
    pub shuffle_records_written: u64,
    pub shuffle_records_read: u64,
    pub bytes_spilled: u64,
    pub spill_count: u64,
    pub run_time_micros: u64,
}

impl From<&TaskMetrics> for Metrics {
    fn from(m: &TaskMetrics) -> Self {
        Metrics {
            records_in: m.records_in,
            records_out: m.records_out,
            shuffle_bytes_written: m.shuffle_bytes_written,
            shuffle_bytes_read: m.shuffle_bytes_read,
            shuffle_records_written: m.shuffle_records_written,
            shuffle_records_read: m.shuffle_records_read,
            bytes_spilled: m.bytes_spilled,
            spill_count: m.spill_count,
            run_time_micros: m.run_time_micros,
        }
    }
}

impl Metrics {
    /// Adds `other` into `self` (saturating).
    pub fn add(&mut self, o: &Metrics) {
        self.records_in = self.records_in.saturating_add(o.records_in);
        self.records_out = self.records_out.saturating_add(o.records_out);
        self.shuffle_bytes_written = self
            .shuffle_bytes_written
            .saturating_add(o.shuffle_bytes_written);
        self.shuffle_bytes_read = self.shuffle_bytes_read.saturating_add(o.shuffle_bytes_read);
        self.shuffle_records_written = self
            .shuffle_records_written
            .saturating_add(o.shuffle_records_written);
        self.shuffle_records_read = self
            .shuffle_records_read
            .saturating_add(o.shuffle_records_read);
        self.bytes_spilled = self.bytes_spilled.saturating_add(o.bytes_spilled);
        self.spill_count = self.spill_count.saturating_add(o.spill_count);
        self.run_time_micros = self.run_time_micros.saturating_add(o.run_time_micros);
    }
}

/// One collective call of a barrier task: the compute before it, the time in it
/// (moving data and waiting for slower ranks), and the bytes it moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuperstepInfo {
    pub op: String,
    pub compute_micros: u64,
    pub wait_micros: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl From<&ember_proto::Superstep> for SuperstepInfo {
    fn from(s: &ember_proto::Superstep) -> Self {
        SuperstepInfo {
            op: s.op.clone(),
            compute_micros: s.compute_micros,
            wait_micros: s.wait_micros,
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
        }
    }
}

/// A stage of a job's DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRef {
    pub stage_id: u32,
    /// Its number within its application (absent in logs of older versions: the id).
    #[serde(default)]
    pub number: Option<u32>,
    pub name: String,
    pub num_tasks: u32,
    pub parents: Vec<u32>,
    pub shuffle_id: Option<u32>,
    /// The RDD operators it runs, parents first (absent in logs of older versions).
    #[serde(default)]
    pub operators: Vec<OperatorRef>,
    /// Operators beyond those listed (a stage lists at most
    /// [`ember_scheduler::MAX_STAGE_OPERATORS`]).
    #[serde(default)]
    pub more_operators: u32,
}

/// One RDD operator of a stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorRef {
    pub rdd_id: u32,
    pub name: String,
    /// Persisted (its partitions are cached where computed).
    #[serde(default)]
    pub cached: bool,
}

impl From<&StageDesc> for StageRef {
    fn from(s: &StageDesc) -> Self {
        StageRef {
            stage_id: s.stage_id,
            number: Some(s.number),
            name: s.name.clone(),
            num_tasks: s.num_tasks,
            parents: s.parents.clone(),
            shuffle_id: s.shuffle_id,
            operators: (s.operators.iter())
                .map(|o| OperatorRef {
                    rdd_id: o.rdd_id,
                    name: o.name.clone(),
                    cached: o.cached,
                })
                .collect(),
            more_operators: s.more_operators,
        }
    }
}

/// One event of an application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AppEvent {
    /// The first line of a log: which application it is.
    AppStarted {
        name: String,
        time_ms: u64,
    },
    JobSubmitted {
        job_id: u64,
        /// The application (client session) it belongs to; empty in local mode.
        #[serde(default)]
        application: String,
        /// Its number within the application (absent in logs of older versions).
        #[serde(default)]
        number: Option<u64>,
        description: String,
        stages: Vec<StageRef>,
        /// Its scheduling pool and job group (absent in logs of older versions).
        #[serde(default)]
        pool: String,
        #[serde(default)]
        job_group: String,
        /// How its pool shares slots (`ListenerEvent::JobSubmitted::pool_share`).
        #[serde(default)]
        pool_share: String,
        time_ms: u64,
    },
    StageSkipped {
        job_id: u64,
        stage_id: u32,
    },
    StageSubmitted {
        stage_id: u32,
        attempt: u32,
        tasks: u32,
        time_ms: u64,
    },
    StageCompleted {
        stage_id: u32,
        time_ms: u64,
    },
    StageFailed {
        stage_id: u32,
        reason: String,
        time_ms: u64,
    },
    TaskStarted {
        task_id: u64,
        stage_id: u32,
        stage_attempt: u32,
        partition: u32,
        attempt: u32,
        executor_id: String,
        speculative: bool,
        time_ms: u64,
    },
    TaskEnded {
        task_id: u64,
        stage_id: u32,
        partition: u32,
        attempt: u32,
        executor_id: String,
        metrics: Metrics,
        succeeded: bool,
        failure: Option<String>,
        time_ms: u64,
    },
    /// A barrier task's collectives, in call order (sent before its `TaskEnded`).
    TaskSupersteps {
        task_id: u64,
        stage_id: u32,
        stage_attempt: u32,
        partition: u32,
        executor_id: String,
        supersteps: Vec<SuperstepInfo>,
        dropped: u64,
        resumed_after: Option<u64>,
        time_ms: u64,
    },
    JobEnded {
        job_id: u64,
        succeeded: bool,
        failure: Option<String>,
        time_ms: u64,
    },
    ExecutorAdded {
        executor_id: String,
        slots: u32,
        time_ms: u64,
    },
    ExecutorLost {
        executor_id: String,
        reason: String,
        /// Its map outputs read from storage instead of recomputed (0 in logs written
        /// before the field).
        #[serde(default)]
        outputs_from_storage: u32,
        /// Its map outputs served by replicas on other executors instead of recomputed
        /// (0 in logs written before the field).
        #[serde(default)]
        outputs_from_replicas: u32,
        time_ms: u64,
    },
    /// What the driver knows of an executor beyond the scheduler: its host, memory
    /// offered and in use (from its heartbeats).
    ExecutorResources {
        executor_id: String,
        host: String,
        memory_limit_bytes: u64,
        memory_used_bytes: u64,
        time_ms: u64,
    },
    /// A partition of a persisted RDD was stored on an executor (see the scheduler's
    /// `ListenerEvent::BlockCached`).
    BlockCached {
        /// The application whose plan persists it; empty in local mode.
        #[serde(default)]
        application: String,
        rdd_id: u32,
        rdd_name: String,
        num_partitions: u32,
        /// `ember_proto::StorageLevel` as its number (1 memory, 2 disk, 3 both).
        storage: i32,
        partition: u32,
        executor_id: String,
        memory_bytes: u64,
        disk_bytes: u64,
        /// The decommissioned executor it was moved from; empty when computed there.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        moved_from: String,
        time_ms: u64,
    },
    /// Map outputs of a shuffle-map stage recovered from executors' reports after a
    /// driver restart (see the scheduler's `ListenerEvent::OutputsRecovered`).
    OutputsRecovered {
        stage_id: u32,
        shuffle_id: u32,
        outputs: u32,
        executors: Vec<String>,
        time_ms: u64,
    },
    /// Every cached block of RDDs `rdd_lo..rdd_hi` is gone.
    BlocksRemoved {
        rdd_lo: u32,
        rdd_hi: u32,
        time_ms: u64,
    },
    /// Configuration the Environment page shows: one section (e.g. the driver's flags,
    /// or an application's configuration) of `(name, value)` entries, secrets already
    /// redacted by whoever sent it (and again by the store: see `store::environment`).
    Environment {
        /// The application it belongs to; empty for the driver's or local mode's.
        #[serde(default)]
        application: String,
        section: String,
        entries: Vec<(String, String)>,
        time_ms: u64,
    },
}

impl From<&ListenerEvent> for AppEvent {
    fn from(e: &ListenerEvent) -> Self {
        use ListenerEvent as L;
        match e.clone() {
            L::JobSubmitted {
                job_id,
                application,
                number,
                description,
                stages,
                pool,
                job_group,
                pool_share,
                time_ms,
            } => AppEvent::JobSubmitted {
                job_id,
                application,
                number: Some(number),
                description,
                stages: stages.iter().map(StageRef::from).collect(),
                pool,
                job_group,
                pool_share,
                time_ms,
            },
            L::StageSkipped { job_id, stage_id } => AppEvent::StageSkipped { job_id, stage_id },
            L::StageSubmitted {
                stage_id,
                attempt,
                tasks,
                time_ms,
            } => AppEvent::StageSubmitted {
                stage_id,
                attempt,
                tasks,
                time_ms,
            },
            L::StageCompleted { stage_id, time_ms } => {
                AppEvent::StageCompleted { stage_id, time_ms }
            }
            L::StageFailed {
                stage_id,
                reason,
                time_ms,
            } => AppEvent::StageFailed {
                stage_id,
                reason,
                time_ms,
            },
            L::TaskStarted {
                task_id,
                stage_id,
                stage_attempt,
                partition,
                attempt,
                executor_id,
                speculative,
                time_ms,
            } => AppEvent::TaskStarted {
                task_id,
                stage_id,
                stage_attempt,
                partition,
                attempt,
                executor_id,
                speculative,
                time_ms,
            },
            L::TaskEnded {
                task_id,
                stage_id,
                partition,
                attempt,
                executor_id,
                metrics,
                succeeded,
                failure,
                time_ms,
            } => AppEvent::TaskEnded {
                task_id,
                stage_id,
                partition,
                attempt,
                executor_id,
                metrics: Metrics::from(&metrics),
                succeeded,
                failure,
                time_ms,
            },
            L::TaskSupersteps {
                task_id,
                stage_id,
                stage_attempt,
                partition,
                executor_id,
                supersteps,
                dropped,
                resumed_after,
                time_ms,
            } => AppEvent::TaskSupersteps {
                task_id,
                stage_id,
                stage_attempt,
                partition,
                executor_id,
                supersteps: supersteps.iter().map(SuperstepInfo::from).collect(),
                dropped,
                resumed_after,
                time_ms,
            },
            L::JobEnded {
                job_id,
                succeeded,
                failure,
                time_ms,
            } => AppEvent::JobEnded {
                job_id,
                succeeded,
                failure,
                time_ms,
            },
            L::ExecutorAdded {
                executor_id,
                slots,
                time_ms,
            } => AppEvent::ExecutorAdded {
                executor_id,
                slots,
                time_ms,
            },
            L::ExecutorLost {
                executor_id,
                reason,
                outputs_from_storage,
                outputs_from_replicas,
                time_ms,
            } => AppEvent::ExecutorLost {
                executor_id,
                reason,
                outputs_from_storage,
                outputs_from_replicas,
                time_ms,
            },
            L::BlockCached {
                application,
                rdd_id,
                rdd_name,
                num_partitions,
                storage,
                partition,
                executor_id,
                memory_bytes,
                disk_bytes,
                moved_from,
                time_ms,
            } => AppEvent::BlockCached {
                application,
                rdd_id,
                rdd_name,
                num_partitions,
                storage,
                partition,
                executor_id,
                memory_bytes,
                disk_bytes,
                moved_from,
                time_ms,
            },
            L::OutputsRecovered {
                stage_id,
                shuffle_id,
                outputs,
                executors,
                time_ms,
            } => AppEvent::OutputsRecovered {
                stage_id,
                shuffle_id,
                outputs,
                executors,
                time_ms,
            },
            L::BlocksRemoved {
                rdd_lo,
                rdd_hi,
                time_ms,
            } => AppEvent::BlocksRemoved {
                rdd_lo,
                rdd_hi,
                time_ms,
            },
        }
    }
}
