//! The driver's totals: running jobs per session and overall (more wait in a bounded
//! per-session queue, refused only past it), tasks waiting for a slot, and the sizes of
//! descriptions and names, each refused with an error naming its flag.

mod common;

use common::*;
use ember_driver::server::ServerLimits;
use ember_proto::{JobEvents, Plan, SessionOpened, SubmitJobRequest};
use ember_scheduler::JobEvent;
use tonic::{Code, Streaming};

fn submit(opened: &SessionOpened, plan: Plan) -> tonic::Request<SubmitJobRequest> {
    let req = SubmitJobRequest {
        session_id: opened.session_id,
        plan: Some(plan),
        new_broadcasts: vec![],
    };
    ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token).unwrap()
}

async fn submit_ok(c: &mut Client, opened: &SessionOpened, plan: Plan) -> Streaming<JobEvents> {
    c.submit_job(submit(opened, plan))
        .await
        .expect("job accepted")
        .into_inner()
}

/// Runs the next launched task to success with `result`, and returns its job's events.
async fn finish_next(exec: &mut FakeExecutor, job: &mut Streaming<JobEvents>, result: u8) {
    let task = exec.launched().await.task.expect("task");
    exec.succeed(&task, vec![result]).await;
    let events = job_events(job).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, JobEvent::TaskResult { result: r, .. } if r == &[result])),
        "{events:?}"
    );
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
}

/// Waits until the driver reports `n` running jobs.
async fn running_jobs_become(driver: &TestDriver, n: u32) {
    let deadline = std::time::Instant::now() + WAIT;
    while driver.daemon.status().running_jobs != n {
        assert!(
            std::time::Instant::now() < deadline,
            "running jobs: {} (want {n})",
            driver.daemon.status().running_jobs
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_job_over_its_sessions_running_bound_waits_and_past_the_queue_is_refused() {
    let (driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_running_jobs_per_session: 1,
            max_queued_jobs_per_session: 1,
            ..ServerLimits::default()
        },
        4,
    )
    .await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let plan = || tiny_plan(opened.id_base, 1, &sha);

    let mut first = submit_ok(&mut c, &opened, plan()).await;
    let mut second = submit_ok(&mut c, &opened, plan()).await; // waits
    let err = c.submit_job(submit(&opened, plan())).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        format!(
            "session {} has 1 jobs running and 1 waiting to start, the limit of waiting jobs \
             (--max-queued-jobs-per-session 1); jobs start as running ones end (at most 1 \
             per session, --max-running-jobs-per-session, and 256 on the driver, \
             --max-running-jobs)",
            opened.session_id
        )
    );
    running_jobs_become(&driver, 1).await;
    // The first job's task is the only one launched; once it ends, the second starts.
    finish_next(&mut exec, &mut first, 1).await;
    finish_next(&mut exec, &mut second, 2).await;
    // The queue has room again.
    let mut third = submit_ok(&mut c, &opened, plan()).await;
    // The fourth waits; its client leaves: it never starts, and its place in the queue
    // frees up (once the driver has seen the stream go).
    let fourth = submit_ok(&mut c, &opened, plan()).await;
    drop(fourth);
    let deadline = std::time::Instant::now() + WAIT;
    let mut fifth = loop {
        match c.submit_job(submit(&opened, plan())).await {
            Ok(job) => break job.into_inner(),
            Err(e) if e.code() == Code::ResourceExhausted => {
                assert!(std::time::Instant::now() < deadline, "{e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    finish_next(&mut exec, &mut third, 3).await;
    finish_next(&mut exec, &mut fifth, 5).await;
}

#[tokio::test]
async fn a_job_over_the_drivers_running_bound_waits_for_another_sessions_job() {
    let (driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_running_jobs: 1,
            ..ServerLimits::default()
        },
        4,
    )
    .await;
    let (one, _s1) = open_session(&mut c, &sha).await;
    let (two, _s2) = open_session(&mut c, &sha).await;
    let mut first = submit_ok(&mut c, &one, tiny_plan(one.id_base, 1, &sha)).await;
    let mut second = submit_ok(&mut c, &two, tiny_plan(two.id_base, 1, &sha)).await;
    let launch = exec.launched().await;
    assert_eq!(
        node_of(&launch),
        one.id_base,
        "the first session's job runs"
    );
    // The second session's job waits: no event of it while the first runs (were it
    // started, its `Started` would come within milliseconds).
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), second.message());
    assert!(
        early.await.is_err(),
        "the second job started beside the first"
    );
    assert_eq!(driver.daemon.status().running_jobs, 1);
    exec.succeed(&launch.task.expect("task"), vec![1]).await;
    let events = job_events(&mut first).await;
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
    let launch = exec.launched().await;
    assert_eq!(node_of(&launch), two.id_base, "then the second session's");
    exec.succeed(&launch.task.expect("task"), vec![2]).await;
    let events = job_events(&mut second).await;
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
}

/// The first node of the stage plan a launch carries (the plan goes with a stage's
/// first launch to an executor).
fn node_of(launch: &ember_proto::LaunchTask) -> u32 {
    let plan = launch.plan.as_ref().and_then(|p| p.plan.as_ref());
    plan.expect("a stage plan with the launch").nodes[0].id
}

#[tokio::test]
async fn descriptions_and_names_over_their_bounds_are_refused_before_the_driver_keeps_them() {
    let (driver, mut c, mut exec, sha) = ready(ServerLimits::default(), 1).await;
    let (opened, _session) = open_session(&mut c, &sha).await;

    let mut long_description = tiny_plan(opened.id_base, 1, &sha);
    long_description.description = "d".repeat((64 << 10) + 1);
    let err = c
        .submit_job(submit(&opened, long_description))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        format!(
            "the byte length of the job's description ({}...) is 65537, over the limit of \
             65536 (--max-description-bytes)",
            "d".repeat(60)
        )
    );
    let mut long_name = tiny_plan(opened.id_base, 1, &sha);
    long_name.nodes[0].name = "n".repeat((4 << 10) + 1);
    let err = c.submit_job(submit(&opened, long_name)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        format!(
            "the byte length of the name of node {} ({}...) is 4097, over the limit of 4096 \
             (--max-node-name-bytes)",
            opened.id_base,
            "n".repeat(60)
        )
    );
    // Nothing of them is running; a job within the bounds runs.
    assert_eq!(driver.daemon.status().running_jobs, 0);
    let mut ok = tiny_plan(opened.id_base, 1, &sha);
    ok.description = "d".repeat(64 << 10);
    let mut job = submit_ok(&mut c, &opened, ok).await;
    finish_next(&mut exec, &mut job, 7).await;
}

#[tokio::test]
async fn a_job_whose_tasks_would_pass_the_queued_task_bound_is_refused() {
    let (_driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_queued_tasks: 5,
            ..ServerLimits::default()
        },
        1,
    )
    .await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    // Alone, a job of 10 tasks goes in: one runs, nine wait for the slot.
    let mut big = submit_ok(&mut c, &opened, tiny_plan(opened.id_base, 10, &sha)).await;
    let first = exec.launched().await.task.expect("task");
    let err = c
        .submit_job(submit(&opened, tiny_plan(opened.id_base, 1, &sha)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "the driver has 9 tasks waiting (9 for a slot, 0 in jobs waiting to start); this job's \
         1 more would pass the limit of 5 (--max-queued-tasks)"
    );
    exec.succeed(&first, vec![0]).await;
    for _ in 1..10 {
        let task = exec.launched().await.task.expect("task");
        exec.succeed(&task, vec![0]).await;
    }
    let events = job_events(&mut big).await;
    assert!(matches!(events.last(), Some(JobEvent::JobSucceeded { .. })));
}

#[tokio::test]
async fn a_freed_slot_goes_to_the_oldest_waiting_job_not_to_the_session_that_freed_it() {
    let (driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_running_jobs: 2,
            max_running_jobs_per_session: 1,
            ..ServerLimits::default()
        },
        4,
    )
    .await;
    let (a, _sa) = open_session(&mut c, &sha).await;
    let (b, _sb) = open_session(&mut c, &sha).await;
    let (cc, _sc) = open_session(&mut c, &sha).await;
    let mut a1 = submit_ok(&mut c, &a, tiny_plan(a.id_base, 1, &sha)).await;
    let mut b1 = submit_ok(&mut c, &b, tiny_plan(b.id_base, 1, &sha)).await;
    // The driver is full: these wait, in this order.
    let mut c1 = submit_ok(&mut c, &cc, tiny_plan(cc.id_base, 1, &sha)).await;
    let mut a2 = submit_ok(&mut c, &a, tiny_plan(a.id_base, 1, &sha)).await;
    let mut b2 = submit_ok(&mut c, &b, tiny_plan(b.id_base, 1, &sha)).await;
    running_jobs_become(&driver, 2).await;
    let mut launched = std::collections::HashMap::new();
    for _ in 0..2 {
        let launch = exec.launched().await;
        launched.insert(node_of(&launch), launch.task.expect("task"));
    }
    let (a1_task, b1_task) = (&launched[&a.id_base], &launched[&b.id_base]);
    // A's first job ends: the slot goes to C's job (submitted before A's second).
    exec.succeed(a1_task, vec![1]).await;
    assert!(matches!(
        job_events(&mut a1).await.last(),
        Some(JobEvent::JobSucceeded { .. })
    ));
    let launch = exec.launched().await;
    assert_eq!(node_of(&launch), cc.id_base, "C's waiting job starts first");
    let c1_task = launch.task.expect("task");
    // B's first job ends: A's second job (submitted before B's second) starts.
    exec.succeed(b1_task, vec![2]).await;
    assert!(matches!(
        job_events(&mut b1).await.last(),
        Some(JobEvent::JobSucceeded { .. })
    ));
    let launch = exec.launched().await;
    assert_eq!(node_of(&launch), a.id_base, "then A's second job");
    exec.succeed(&launch.task.expect("task"), vec![4]).await;
    finish_launched(&mut a2).await;
    exec.succeed(&c1_task, vec![3]).await;
    finish_launched(&mut c1).await;
    finish_next(&mut exec, &mut b2, 5).await;
}

/// Waits for `job`'s events and checks it succeeded.
async fn finish_launched(job: &mut Streaming<JobEvents>) {
    let events = job_events(job).await;
    assert!(
        matches!(events.last(), Some(JobEvent::JobSucceeded { .. })),
        "{events:?}"
    );
}

#[tokio::test]
async fn tasks_of_jobs_waiting_in_session_queues_count_against_the_queued_task_bound() {
    let (_driver, mut c, mut exec, sha) = ready(
        ServerLimits {
            max_queued_tasks: 5,
            max_running_jobs_per_session: 1,
            ..ServerLimits::default()
        },
        1,
    )
    .await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let plan = |tasks| tiny_plan(opened.id_base, tasks, &sha);
    let mut running = submit_ok(&mut c, &opened, plan(1)).await;
    let first = exec.launched().await.task.expect("task");
    // Waits in the session's queue: its 4 tasks are not with the scheduler yet.
    let mut waiting = submit_ok(&mut c, &opened, plan(4)).await;
    let err = c.submit_job(submit(&opened, plan(2))).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(
        err.message(),
        "the driver has 4 tasks waiting (0 for a slot, 4 in jobs waiting to start); this \
         job's 2 more would pass the limit of 5 (--max-queued-tasks)"
    );
    // Once the waiting job starts, its tasks leave the queue's count: 3 wait for the
    // slot, and a job of 2 more fits.
    exec.succeed(&first, vec![0]).await;
    finish_launched(&mut running).await;
    let second = exec.launched().await.task.expect("task");
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = loop {
        match c.submit_job(submit(&opened, plan(2))).await {
            Ok(job) => break job.into_inner(),
            // Until the scheduler has counted the started job's tasks as queued.
            Err(e) if e.code() == Code::ResourceExhausted => {
                assert!(std::time::Instant::now() < deadline, "{e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    exec.succeed(&second, vec![0]).await;
    for _ in 1..4 {
        let task = exec.launched().await.task.expect("task");
        exec.succeed(&task, vec![0]).await;
    }
    finish_launched(&mut waiting).await;
    for _ in 0..2 {
        let task = exec.launched().await.task.expect("task");
        exec.succeed(&task, vec![0]).await;
    }
    finish_launched(&mut last).await;
}
