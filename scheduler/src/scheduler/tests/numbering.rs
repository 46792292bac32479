//! Jobs and stages are numbered per application (`Plan.application`), as Spark numbers
//! them per `SparkContext`: a driver serving several clients gives each client's first
//! job and stage the number 0, in its job events and in its listener events, while its
//! own ids stay unique. An executor's loss is told to the jobs it affects.

use std::collections::HashMap;
use std::time::Duration;

use ember_proto::{dependency::Kind, Plan};

use super::{two_stage_plan, Harness};
use crate::{JobEvent, ListenerEvent, SchedulerConfig, SchedulerEvent};

/// `two_stage_plan` with its RDD and shuffle ids moved by `base`, in `application`.
fn plan_of(application: &str, base: u32) -> Plan {
    let mut plan = two_stage_plan();
    for n in &mut plan.nodes {
        n.id += base;
        for d in &mut n.deps {
            if let Some(Kind::Shuffle(s)) = &mut d.kind {
                s.shuffle_id += base;
                s.parent += base;
            }
        }
    }
    plan.final_rdd += base;
    plan.application = application.into();
    plan
}

/// Runs a job of two stages to its end; returns its events.
fn run(h: &Harness, plan: Plan) -> Vec<JobEvent> {
    let events = h.sched.submit(plan, HashMap::new());
    for _ in 0..4 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    let mut out = Vec::new();
    loop {
        let e = events
            .recv_timeout(Duration::from_secs(5))
            .expect("job event");
        let end = e.ends_job();
        out.push(e);
        if end {
            return out;
        }
    }
}

/// (job id, job number, stage numbers submitted) of a job's events.
fn numbers(events: &[JobEvent]) -> (u64, u64, Vec<u32>) {
    let JobEvent::Started { job_id, number, .. } = &events[0] else {
        panic!("first event: {:?}", events[0]);
    };
    let stages = events
        .iter()
        .filter_map(|e| match e {
            JobEvent::StageSubmitted(s) => Some(s.stage_id),
            _ => None,
        })
        .collect();
    (*job_id, *number, stages)
}

/// A `JobSubmitted`: job id, application, number, (stage id, stage number)s.
type Submitted = (u64, String, u64, Vec<(u32, u32)>);

#[test]
fn each_application_numbers_its_jobs_and_stages_from_zero() {
    let h = Harness::new(&[("e1", 2)], SchedulerConfig::default());
    let rx = h.sched.listen();
    let a0 = numbers(&run(&h, plan_of("etl #1", 0)));
    let b0 = numbers(&run(&h, plan_of("report #2", 10)));
    let a1 = numbers(&run(&h, plan_of("etl #1", 20)));
    assert_eq!(a0, (0, 0, vec![0, 1]));
    assert_eq!(b0, (1, 0, vec![0, 1]), "the second client starts at 0 too");
    assert_eq!(a1, (2, 1, vec![2, 3]), "the first client's numbers go on");

    // Listeners get the scheduler's unique ids with the application and numbers.
    let submitted: Vec<Submitted> = rx
        .try_iter()
        .filter_map(|e| match e {
            ListenerEvent::JobSubmitted {
                job_id,
                application,
                number,
                stages,
                ..
            } => Some((
                job_id,
                application,
                number,
                stages.iter().map(|s| (s.stage_id, s.number)).collect(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        submitted,
        [
            (0, "etl #1".to_string(), 0, vec![(1, 0), (0, 1)]),
            (1, "report #2".to_string(), 0, vec![(3, 0), (2, 1)]),
            (2, "etl #1".to_string(), 1, vec![(5, 2), (4, 3)]),
        ]
    );

    // An application that ended starts again from 0 if its name comes back.
    h.sched.send(SchedulerEvent::ApplicationEnded {
        application: "report #2".into(),
    });
    let b_again = numbers(&run(&h, plan_of("report #2", 30)));
    assert_eq!((b_again.1, b_again.2), (0, vec![0, 1]));
}

#[test]
fn a_failed_task_names_its_stage_by_its_number() {
    let h = Harness::new(
        &[("e1", 2)],
        SchedulerConfig {
            max_task_attempts: 1,
            ..SchedulerConfig::default()
        },
    );
    let _ = run(&h, plan_of("etl #1", 0));
    let events = h.sched.submit(plan_of("report #2", 10), HashMap::new());
    let (ex, t) = h.next_task();
    h.fail(
        &ex,
        &t,
        ember_proto::task_failure::Reason::UserError("boom".into()),
    );
    let failure = loop {
        match events.recv_timeout(Duration::from_secs(5)).expect("event") {
            JobEvent::JobFailed { failure, .. } => break failure,
            _ => continue,
        }
    };
    let crate::JobFailure::TaskFailed { stage_id, .. } = failure else {
        panic!("{failure:?}");
    };
    assert_eq!(stage_id, 0, "report's first stage, the driver's stage 2");
}

#[test]
fn a_lost_executor_is_told_to_the_jobs_it_ran_tasks_for() {
    let h = Harness::new(&[("e1", 1), ("e2", 1)], SchedulerConfig::default());
    let events = h.sched.submit(plan_of("etl #1", 0), HashMap::new());
    let (ex1, t1) = h.next_task();
    let (ex2, _t2) = h.next_task();
    assert_ne!(ex1, ex2);
    h.succeed(&ex1, &t1);
    h.sched.send(SchedulerEvent::ExecutorLost {
        executor_id: ex2.clone(),
        reason: "heartbeats stopped".into(),
    });
    let mut seen = Vec::new();
    loop {
        let e = events.recv_timeout(Duration::from_secs(5)).expect("event");
        if let JobEvent::ExecutorLost {
            executor_id,
            reason,
            ..
        } = &e
        {
            assert_eq!((executor_id, reason.as_str()), (&ex2, "heartbeats stopped"));
            break;
        }
        seen.push(e);
    }
    // The lost task runs again, and the job still ends well.
    for _ in 0..3 {
        let (ex, t) = h.next_task();
        h.succeed(&ex, &t);
    }
    loop {
        match events.recv_timeout(Duration::from_secs(5)).expect("event") {
            JobEvent::JobSucceeded { .. } => break,
            JobEvent::JobFailed { failure, .. } => panic!("{failure:?}"),
            _ => {}
        }
    }
}
