//! What a running job costs the driver: no thread of its own (251 jobs made 256
//! threads) and no copy of its session's broadcasts (one 200 MiB broadcast and 8 jobs
//! took 1.8 GB). Alone in its test binary: it counts the process's threads and live
//! heap bytes.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use ember_proto::{BroadcastValue, SubmitJobRequest};

/// The system allocator, counting the bytes live on the heap.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .expect("a Threads line")
        .trim()
        .parse()
        .expect("a thread count")
}

// Under the test client's 4 MiB message limit (the launch carries it).
const BROADCAST: usize = 2 << 20;
const JOBS: u32 = 8;

#[tokio::test]
async fn running_jobs_cost_neither_a_thread_nor_a_copy_of_their_sessions_broadcasts() {
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    // One slot: the first job's task holds it, the others' tasks wait; every job runs.
    let mut exec = FakeExecutor::register(&mut c, 1).await;
    let sha = upload(&mut c, b"bin").await;
    let (opened, _session) = open_session(&mut c, &sha).await;
    let submit = |new_broadcasts: Vec<BroadcastValue>| {
        let req = SubmitJobRequest {
            session_id: opened.session_id,
            plan: Some(tiny_plan(opened.id_base, 1, &sha)),
            new_broadcasts,
        };
        ember_proto::auth::with_session_token(tonic::Request::new(req), &opened.session_token)
            .unwrap()
    };
    let big = BroadcastValue {
        id: opened.broadcast_base,
        value: vec![7; BROADCAST].into(),
    };
    let mut jobs = vec![c.submit_job(submit(vec![big])).await.unwrap().into_inner()];
    // The broadcast went to the executor with the first launch; dropped here.
    let launch = exec.launched().await;
    assert_eq!(launch.broadcasts.len(), 1);
    assert_eq!(launch.broadcasts[0].value.len(), BROADCAST);
    drop(launch);
    wait_running(&driver, 1).await;
    let (threads_before, live_before) = (threads(), LIVE.load(Ordering::Relaxed));

    for _ in 0..JOBS {
        jobs.push(c.submit_job(submit(vec![])).await.unwrap().into_inner());
    }
    wait_running(&driver, 1 + JOBS).await;
    let (threads_after, live_after) = (threads(), LIVE.load(Ordering::Relaxed));

    let mut costs = Vec::new();
    if threads_after >= threads_before + JOBS as usize / 2 {
        costs.push(format!(
            "{JOBS} more running jobs: {threads_before} -> {threads_after} threads"
        ));
    }
    let grown = live_after.saturating_sub(live_before);
    if grown >= BROADCAST {
        costs.push(format!(
            "{JOBS} more jobs of a session holding a {BROADCAST}-byte broadcast: the heap \
             grew by {grown} bytes"
        ));
    }
    assert!(costs.is_empty(), "{costs:#?}");
    drop(jobs);
}

async fn wait_running(driver: &TestDriver, n: u32) {
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
