//! Conversions between the scheduler's [`JobEvent`]s and their wire form
//! ([`ember_proto::JobEvent`]), used by the driver daemon to stream a job's events and by
//! the client to turn them back into the same events local mode produces.
//!
//! Invariant: `from_wire(to_wire(e))` is `e` for every event.

use ember_proto as pb;
use ember_proto::job_event::Event as W;

use crate::events::{JobEvent, JobFailure, StageInfo};

fn stage_to_wire(s: StageInfo) -> pb::StageInfo {
    pb::StageInfo {
        stage_id: s.stage_id,
        name: s.name,
        num_tasks: s.num_tasks,
        tasks_to_run: s.tasks_to_run,
        attempt: s.attempt,
    }
}

fn stage_from_wire(s: pb::StageInfo) -> StageInfo {
    StageInfo {
        stage_id: s.stage_id,
        name: s.name,
        num_tasks: s.num_tasks,
        tasks_to_run: s.tasks_to_run,
        attempt: s.attempt,
    }
}

/// The wire form of a scheduler event.
pub fn to_wire(event: JobEvent) -> pb::JobEvent {
    let ev = match event {
        JobEvent::Started {
            job_id,
            number,
            num_stages,
        } => W::Started(pb::JobStarted {
            job_id,
            number,
            num_stages,
        }),
        JobEvent::StageSkipped(s) => W::StageSkipped(stage_to_wire(s)),
        JobEvent::StageSubmitted(s) => W::StageSubmitted(stage_to_wire(s)),
        JobEvent::TaskStarted {
            stage_id,
            partition,
        } => W::TaskStarted(pb::TaskStarted {
            stage_id,
            partition,
        }),
        JobEvent::TaskEnded {
            stage_id,
            partition,
            executor_id,
            metrics,
            succeeded,
            counted,
            accumulators,
        } => W::TaskEnded(pb::TaskEnded {
            stage_id,
            partition,
            executor_id,
            metrics: Some(metrics),
            succeeded,
            counted,
            accumulators,
        }),
        JobEvent::StageCompleted { stage_id } => W::StageCompleted(pb::StageCompleted { stage_id }),
        JobEvent::ExecutorLost {
            executor_id,
            reason,
            outputs_from_storage,
            outputs_from_replicas,
        } => W::ExecutorLost(pb::JobExecutorLost {
            executor_id,
            reason,
            outputs_from_storage,
            outputs_from_replicas,
        }),
        JobEvent::TaskResult { partition, result } => {
            W::TaskResult(pb::TaskResult { partition, result })
        }
        JobEvent::JobSucceeded { job_id } => W::Succeeded(pb::JobSucceeded { job_id }),
        JobEvent::JobFailed { job_id, failure } => {
            use pb::job_failed::Failure as F;
            let failure = match failure {
                JobFailure::TaskFailed {
                    stage_id,
                    stage_name,
                    partition,
                    executor_id,
                    message,
                } => F::TaskFailed(pb::JobTaskFailed {
                    stage_id,
                    stage_name,
                    partition,
                    executor_id,
                    message,
                }),
                JobFailure::StageFailed {
                    stage_id,
                    stage_name,
                    message,
                } => F::StageFailed(pb::JobStageFailed {
                    stage_id,
                    stage_name,
                    message,
                }),
                JobFailure::Cancelled(m) => F::Cancelled(m),
                JobFailure::InvalidPlan(m) => F::InvalidPlan(m),
            };
            W::Failed(pb::JobFailed {
                job_id,
                failure: Some(failure),
            })
        }
    };
    pb::JobEvent { event: Some(ev) }
}

/// The scheduler event a wire event stands for; `Err` names what is missing.
pub fn from_wire(event: pb::JobEvent) -> Result<JobEvent, String> {
    let ev = event.event.ok_or("job event without a body")?;
    Ok(match ev {
        W::Started(s) => JobEvent::Started {
            job_id: s.job_id,
            number: s.number,
            num_stages: s.num_stages,
        },
        W::StageSkipped(s) => JobEvent::StageSkipped(stage_from_wire(s)),
        W::StageSubmitted(s) => JobEvent::StageSubmitted(stage_from_wire(s)),
        W::TaskStarted(t) => JobEvent::TaskStarted {
            stage_id: t.stage_id,
            partition: t.partition,
        },
        W::TaskEnded(t) => JobEvent::TaskEnded {
            stage_id: t.stage_id,
            partition: t.partition,
            executor_id: t.executor_id,
            metrics: t.metrics.unwrap_or_default(),
            succeeded: t.succeeded,
            counted: t.counted,
            accumulators: t.accumulators,
        },
        W::StageCompleted(s) => JobEvent::StageCompleted {
            stage_id: s.stage_id,
        },
        W::ExecutorLost(l) => JobEvent::ExecutorLost {
            executor_id: l.executor_id,
            reason: l.reason,
            outputs_from_storage: l.outputs_from_storage,
            outputs_from_replicas: l.outputs_from_replicas,
        },
        W::TaskResult(r) => JobEvent::TaskResult {
            partition: r.partition,
            result: r.result,
        },
        W::Succeeded(s) => JobEvent::JobSucceeded { job_id: s.job_id },
        W::Failed(f) => {
            use pb::job_failed::Failure as F;
            let failure = match f.failure.ok_or("job failure without a reason")? {
                F::TaskFailed(t) => JobFailure::TaskFailed {
                    stage_id: t.stage_id,
                    stage_name: t.stage_name,
                    partition: t.partition,
                    executor_id: t.executor_id,
                    message: t.message,
                },
                F::StageFailed(s) => JobFailure::StageFailed {
                    stage_id: s.stage_id,
                    stage_name: s.stage_name,
                    message: s.message,
                },
                F::Cancelled(m) => JobFailure::Cancelled(m),
                F::InvalidPlan(m) => JobFailure::InvalidPlan(m),
            };
            JobEvent::JobFailed {
                job_id: f.job_id,
                failure,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: JobEvent) {
        let before = format!("{e:?}");
        let after = format!("{:?}", from_wire(to_wire(e)).unwrap());
        assert_eq!(before, after);
    }

    #[test]
    fn every_event_survives_the_wire() {
        let info = StageInfo {
            stage_id: 3,
            name: "map at x".into(),
            num_tasks: 8,
            tasks_to_run: 2,
            attempt: 1,
        };
        round_trip(JobEvent::Started {
            job_id: 7,
            number: 2,
            num_stages: 2,
        });
        round_trip(JobEvent::StageSkipped(info.clone()));
        round_trip(JobEvent::ExecutorLost {
            executor_id: "exec-2".into(),
            reason: "heartbeats stopped".into(),
            outputs_from_storage: 3,
            outputs_from_replicas: 2,
        });
        round_trip(JobEvent::StageSubmitted(info));
        round_trip(JobEvent::TaskStarted {
            stage_id: 1,
            partition: 4,
        });
        round_trip(JobEvent::TaskEnded {
            stage_id: 1,
            partition: 4,
            executor_id: "executor-2".into(),
            metrics: pb::TaskMetrics {
                records_in: 5,
                ..Default::default()
            },
            succeeded: true,
            counted: true,
            accumulators: vec![pb::AccumulatorUpdate {
                id: 9,
                value: vec![1, 2],
            }],
        });
        round_trip(JobEvent::StageCompleted { stage_id: 1 });
        round_trip(JobEvent::TaskResult {
            partition: 0,
            result: vec![0, 1, 2],
        });
        round_trip(JobEvent::JobSucceeded { job_id: 7 });
        for failure in [
            JobFailure::TaskFailed {
                stage_id: 1,
                stage_name: "s".into(),
                partition: 2,
                executor_id: "e".into(),
                message: "boom".into(),
            },
            JobFailure::StageFailed {
                stage_id: 1,
                stage_name: "s".into(),
                message: "lost".into(),
            },
            JobFailure::Cancelled("client went away".into()),
            JobFailure::InvalidPlan("bad".into()),
        ] {
            round_trip(JobEvent::JobFailed { job_id: 7, failure });
        }
    }

    #[test]
    fn an_empty_event_is_an_error() {
        assert!(from_wire(pb::JobEvent { event: None }).is_err());
    }
}
