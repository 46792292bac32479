//! Decommissioning this executor (SIGTERM, or the driver's `Decommission`): it takes no
//! more tasks, lets its running ones end (killing what is left at
//! `--decommission-timeout`), pushes its map outputs and the cached blocks it holds alone
//! to the peers the driver names (a block is first written out by the worker holding it,
//! then pushed as a file the peer's worker adopts), and ends its registration so the
//! daemon exits 0.
//!
//! Invariants:
//! * The phases go out in order, each once: `DRAINING` when it starts, `DRAINED` once no
//!   task runs here (the driver then sends the plan), `DONE` after every move the plan
//!   asked for ended and the confirmed ones were reported (`MigratedOutputs`, at most
//!   `MAX_MIGRATIONS_PER_MESSAGE` outputs and blocks per message).
//! * While draining it refuses every launch (reported lost with the executor, so the task
//!   runs elsewhere): launches the driver sent before it knew.
//! * Nothing waits forever: running tasks get the timeout, then are killed, and
//!   [`KILL_GRACE`] later the executor goes on without them; a plan that
//!   does not come within the timeout after `DRAINED` ends the decommissioning with
//!   nothing moved (lineage is the fallback); the workers' export of the cached blocks
//!   gets the timeout too; each push has its own deadline (`crate::replicate`).
//! * A move that fails is not reported: the driver records only confirmed copies.

use std::time::Duration;

use ember_proto::decommissioning::Phase;
use ember_proto::{
    executor_message, limits, Decommissioning, ExecutorMessage, ExportedBlock, KillTask,
    MigratedBlock, MigratedOutput, MigratedOutputs,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::blocks::SessionKeys;
use crate::replicate::Replication;
use crate::workers::Workers;

/// Moves pushed at once while migrating.
pub const PARALLEL_MOVES: usize = 4;
/// How long killed tasks get to end before a draining executor leaves them (a task in
/// user code that ignores its kill ends with the executor's workers).
pub const KILL_GRACE: Duration = Duration::from_secs(10);
/// How often a draining executor looks whether its tasks have ended.
pub const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Where this registration is in its decommissioning.
#[derive(Default)]
pub enum Decommission {
    /// Taking tasks as usual.
    #[default]
    Serving,
    /// No more tasks; waiting for the running ones until `deadline`, then killing them
    /// (`killed`: when), then, past [`KILL_GRACE`] more, leaving whatever still runs.
    Draining {
        deadline: Instant,
        killed: Option<Instant>,
    },
    /// Told the driver; collecting its plan until `deadline`.
    Drained {
        deadline: Instant,
        plan: Vec<MigratedOutput>,
        blocks: Vec<MigratedBlock>,
    },
    /// Pushing; `done` fires when every move ended and `DONE` went out.
    Moving { done: oneshot::Receiver<()> },
}

impl Decommission {
    pub fn is_serving(&self) -> bool {
        matches!(self, Decommission::Serving)
    }

    /// Starts decommissioning: tells the driver no more tasks may come.
    pub async fn start(&mut self, tx: &mpsc::Sender<ExecutorMessage>, timeout: Duration) {
        if !self.is_serving() {
            return;
        }
        tracing::info!(
            timeout_s = timeout.as_secs(),
            "decommissioning: no more tasks; running ones get the timeout to end"
        );
        send_phase(tx, Phase::Draining).await;
        *self = Decommission::Draining {
            deadline: Instant::now() + timeout,
            killed: None,
        };
    }

    /// While draining: once no task runs, says `DRAINED`; past the deadline, kills what
    /// still runs. While waiting for the plan: past the deadline, gives up moving and
    /// says `DONE` (true: the registration may end).
    pub async fn poll(
        &mut self,
        workers: &mut Workers,
        tx: &mpsc::Sender<ExecutorMessage>,
        timeout: Duration,
    ) -> bool {
        match self {
            Decommission::Draining { deadline, killed } => {
                let running = workers.running_tasks();
                let now = Instant::now();
                let given_up = killed.is_some_and(|at| now >= at + KILL_GRACE);
                if running.is_empty() || given_up {
                    if given_up {
                        tracing::warn!(
                            tasks = running.len(),
                            "decommissioning: tasks still run after the kill; leaving them"
                        );
                    }
                    tracing::info!("decommissioning: no task runs here; moving the map outputs");
                    send_phase(tx, Phase::Drained).await;
                    *self = Decommission::Drained {
                        deadline: now + timeout,
                        plan: Vec::new(),
                        blocks: Vec::new(),
                    };
                } else if now >= *deadline && killed.is_none() {
                    tracing::warn!(
                        tasks = running.len(),
                        "decommissioning: killing the tasks still running at the timeout"
                    );
                    for task_id in running {
                        workers.kill(KillTask {
                            task_id,
                            reason: "its executor is decommissioning and the timeout passed".into(),
                            interrupt: false,
                        });
                    }
                    *killed = Some(now);
                }
                false
            }
            Decommission::Drained { deadline, .. } if Instant::now() >= *deadline => {
                tracing::warn!("decommissioning: the driver sent no plan in time; leaving without moving outputs");
                send_phase(tx, Phase::Done).await;
                true
            }
            _ => false,
        }
    }

    /// A part of the driver's plan; on its last part the moves start (the workers are
    /// asked to write out the blocks to move, each given `timeout`).
    pub fn plan(
        &mut self,
        part: MigratedOutputs,
        workers: &mut Workers,
        keys: SessionKeys,
        tx: mpsc::Sender<ExecutorMessage>,
        timeout: Duration,
    ) {
        let Decommission::Drained { plan, blocks, .. } = self else {
            tracing::warn!("the driver sent a migration plan to an executor not drained; ignored");
            return;
        };
        plan.extend(part.outputs);
        blocks.extend(part.blocks);
        if !part.last {
            return;
        }
        let (plan, blocks) = (std::mem::take(plan), std::mem::take(blocks));
        let ids: Vec<(u32, u32)> = blocks.iter().map(|b| (b.rdd_id, b.partition)).collect();
        let exported = workers.export_blocks(&ids, timeout);
        let replication = workers.replication();
        let (done_tx, done) = oneshot::channel();
        tokio::spawn(async move {
            let moved = move_outputs(plan, &replication, &keys).await;
            tracing::info!(outputs = moved.len(), "decommissioning: map outputs moved");
            let exported = exported.await;
            let moved_blocks = move_blocks(blocks, exported, &replication, &keys).await;
            tracing::info!(
                blocks = moved_blocks.len(),
                "decommissioning: cached blocks moved"
            );
            for msg in limits::migration_messages(moved, moved_blocks) {
                let _ = tx
                    .send(ExecutorMessage {
                        msg: Some(executor_message::Msg::OutputsMigrated(msg)),
                    })
                    .await;
            }
            send_phase(&tx, Phase::Done).await;
            let _ = done_tx.send(());
        });
        *self = Decommission::Moving { done };
    }

    /// Resolves when the moves ended (never before they started).
    pub async fn moved(&mut self) {
        match self {
            Decommission::Moving { done } => {
                let _ = done.await;
            }
            _ => std::future::pending().await,
        }
    }
}

/// Pushes each output of `plan` to its target, a few at a time; the confirmed ones.
async fn move_outputs(
    plan: Vec<MigratedOutput>,
    replication: &Replication,
    keys: &SessionKeys,
) -> Vec<MigratedOutput> {
    use futures_util::stream::StreamExt;
    futures_util::stream::iter(plan)
        .map(|m| async move {
            let target = m.target.clone()?;
            let Some(key) = keys.key_of(m.shuffle_id) else {
                tracing::warn!(
                    shuffle_id = m.shuffle_id,
                    "cannot move a map output of a session this executor holds no key of"
                );
                return None;
            };
            let confirmed = replication
                .push_output(
                    m.shuffle_id,
                    m.map_partition,
                    &key,
                    std::slice::from_ref(&target),
                )
                .await;
            (!confirmed.is_empty()).then_some(m)
        })
        .buffer_unordered(PARALLEL_MOVES)
        .filter_map(|m| async move { m })
        .collect()
        .await
}

/// Pushes each block of `plan` the workers wrote out (`exported`) to its target, a few
/// at a time; the confirmed ones, with the size stored.
async fn move_blocks(
    plan: Vec<MigratedBlock>,
    exported: Vec<ExportedBlock>,
    replication: &Replication,
    keys: &SessionKeys,
) -> Vec<MigratedBlock> {
    use futures_util::stream::StreamExt;
    // Written out by a worker now, or moved here earlier and not read by any task yet
    // (no worker holds it; its file is already what a move sends).
    let mut written: std::collections::HashSet<(u32, u32)> =
        exported.iter().map(|b| (b.rdd_id, b.partition)).collect();
    for b in &plan {
        if !written.contains(&(b.rdd_id, b.partition))
            && replication.block_file(b.rdd_id, b.partition).is_file()
        {
            written.insert((b.rdd_id, b.partition));
        }
    }
    let missing = plan
        .iter()
        .filter(|b| !written.contains(&(b.rdd_id, b.partition)))
        .count();
    if missing > 0 {
        tracing::warn!(
            blocks = missing,
            "cached blocks the driver counted here are held by no worker; not moved (lineage recomputes them)"
        );
    }
    futures_util::stream::iter(plan)
        .filter(|b| std::future::ready(written.contains(&(b.rdd_id, b.partition))))
        .map(|mut b| async move {
            let target = b.target.clone()?;
            let Some(key) = keys.key_of(b.rdd_id) else {
                tracing::warn!(rdd_id = b.rdd_id, "cannot move a cached block of a session this executor holds no key of");
                return None;
            };
            match replication
                .push_block(b.rdd_id, b.partition, &key, &target)
                .await
            {
                Ok(bytes) => {
                    b.bytes = bytes;
                    Some(b)
                }
                Err(e) => {
                    tracing::warn!(
                        target = %String::from_utf8_lossy(&target.executor_id),
                        "cached partition {} of RDD {} was not moved there (lineage recomputes it): {e}",
                        b.partition,
                        b.rdd_id
                    );
                    None
                }
            }
        })
        .buffer_unordered(PARALLEL_MOVES)
        .filter_map(|b| async move { b })
        .collect()
        .await
}

async fn send_phase(tx: &mpsc::Sender<ExecutorMessage>, phase: Phase) {
    let msg = ExecutorMessage {
        msg: Some(executor_message::Msg::Decommissioning(Decommissioning {
            phase: phase as i32,
        })),
    };
    let _ = tx.send(msg).await;
}
