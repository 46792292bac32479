//! The context cleaner (Spark's `ContextCleaner`): forgets shuffles and cached blocks
//! that no live RDD of the context can reach any more, so that a long-lived context
//! (a service running jobs all day) keeps bounded disk use.
//!
//! What triggers it:
//! - **Shuffles.** Every [`ShuffleSpec`](crate::plan::ShuffleSpec) holds a
//!   [`ShuffleRelease`] wrapping this module's notice. When the last `Arc` of the spec goes (no lineage node depends
//!   on that shuffle any more), the release's `Drop` sends the shuffle id on an
//!   unbounded channel: it never blocks, never panics, and is a no-op once the
//!   context is gone (the send just fails).
//! - **Cached blocks.** `persist` registers the node here by a `Weak`; the cleaner
//!   checks those `Weak`s whenever it wakes (on every released shuffle, and every
//!   [`PERSIST_POLL`] while any persisted node is tracked) and unpersists the dead
//!   ones. (A `Weak` rather than a `Drop` message keeps `LineageNode` free of an extra
//!   field; the price is a poll while something is persisted.)
//!
//! Where it goes: a thread owned by the context (`ember-cleaner`) batches the ids
//! and asks the backend to forget them, on the roads `unpersist` uses:
//! - local mode: [`SchedulerEvent::RemoveShuffles`] to the in-process scheduler, which
//!   forgets stage and map outputs once no live job reads the shuffle, then has its
//!   launcher delete the shuffle's data, index and temporary files from the local
//!   executor's shuffle directory; cached blocks go as `unpersist` does (scheduler
//!   event + block store);
//! - cluster mode: the `ReleaseShuffles` RPC (at most
//!   [`MAX_RELEASED_SHUFFLES`](ember_proto::limits::MAX_RELEASED_SHUFFLES) ids per
//!   call) and the `Unpersist` RPC. The driver checks the ids against the session's
//!   id range, tells its scheduler, and the scheduler (once no job reads them) has
//!   every executor delete that shuffle's files.
//!
//! A thread rather than work at the next job submission, so that an idle context
//! also shrinks, and a drop never waits for I/O or the network. It stops when the
//! context ends (`Stop`, then joined); whatever is still queued then is moot: local
//! mode removes its whole work directory, and a cluster session's end deletes all of
//! its files.
//!
//! Invariants (why a live RDD's data is never removed):
//! - A shuffle id is sent only when its spec is dropped, i.e. when no lineage node,
//!   hence no `Rdd`, no plan being built and no job being submitted from this
//!   context, reaches it; ids are never reused within a context (or a session).
//! - A job in flight keeps its lineage alive from the submitting code, and the
//!   scheduler additionally refuses to forget a shuffle that a live job uses (it
//!   defers the removal until that job ends), so no running task loses its input.
//! - An RDD is unpersisted here only when its node is dead; spill files are not
//!   this module's business: they live only as long as the task that wrote them.
//! - Cleanup is eventually consistent: files disappear shortly after the drop, not at
//!   the moment of it.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use ember_proto::limits::MAX_RELEASED_SHUFFLES;
use parking_lot::Mutex;
use tracing::{debug, warn};

use crate::plan::LineageNode;
use crate::plan::ShuffleRelease;

/// How often dead persisted nodes are looked for while any is tracked.
pub(crate) const PERSIST_POLL: Duration = Duration::from_millis(250);

/// Most ids handled in one wake-up (the rest wait for the next round).
const MAX_BATCH: usize = 4 * MAX_RELEASED_SHUFFLES;

/// What the cleaner thread is told.
enum Notice {
    /// No live lineage reaches this shuffle any more.
    Shuffle(u32),
    /// Look at the persisted nodes (one was just registered).
    Wake,
    /// The context ends.
    Stop,
}

/// What a [`ShuffleSpec`](crate::plan::ShuffleSpec)'s [`ShuffleRelease`] holds for the
/// cleaner: tells it when the spec is dropped.
struct ReleaseNotice {
    shuffle_id: u32,
    tx: Sender<Notice>,
}

impl Drop for ReleaseNotice {
    fn drop(&mut self) {
        // Unbounded: never blocks; fails (ignored) once the cleaner is gone.
        let _ = self.tx.send(Notice::Shuffle(self.shuffle_id));
    }
}

/// Who forgets what the cleaner found: the context's backend (local mode's scheduler
/// and block store, or the session's driver), which implements this.
pub(crate) trait ReleaseTarget: Send + 'static {
    /// Forgets these shuffles (their map outputs and files).
    fn release_shuffles(&self, ids: &[u32]);
    /// Drops the cached blocks of an RDD.
    fn unpersist(&self, rdd_id: u32);
}

/// `target`, which also removes released shuffles' stored copies from `dir`
/// (`storage:` durability) before passing the release on.
pub(crate) fn removing_stored(
    target: Box<dyn ReleaseTarget>,
    dir: std::path::PathBuf,
) -> Box<dyn ReleaseTarget> {
    struct RemovingStored {
        target: Box<dyn ReleaseTarget>,
        dir: std::path::PathBuf,
    }
    impl ReleaseTarget for RemovingStored {
        fn release_shuffles(&self, ids: &[u32]) {
            let removed = crate::shuffle::stored::remove_copies(&self.dir, ids);
            tracing::debug!(?ids, removed, "removed stored shuffle outputs");
            self.target.release_shuffles(ids);
        }
        fn unpersist(&self, rdd_id: u32) {
            self.target.unpersist(rdd_id);
        }
    }
    Box::new(RemovingStored { target, dir })
}

/// Persisted nodes by RDD id, alive while their `Weak` upgrades.
type Persisted = Arc<Mutex<HashMap<u32, Weak<LineageNode>>>>;

/// A context's cleaner: its channel, the persisted nodes it watches, its thread.
pub(crate) struct Cleaner {
    tx: Sender<Notice>,
    persisted: Persisted,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Cleaner {
    /// Starts the cleaner thread for `target`. Without a thread (the OS refused one)
    /// nothing is cleaned before the context ends; jobs still run.
    pub(crate) fn start(target: Box<dyn ReleaseTarget>) -> Cleaner {
        let (tx, rx) = crossbeam_channel::unbounded();
        let persisted: Persisted = Arc::default();
        let watched = persisted.clone();
        let thread = std::thread::Builder::new()
            .name("ember-cleaner".into())
            .spawn(move || run(&rx, &*target, &watched))
            .map_err(|e| warn!("cannot start the cleaner thread: {e}; nothing is cleaned"))
            .ok();
        Cleaner {
            tx,
            persisted,
            thread: Mutex::new(thread),
        }
    }

    /// The release a new shuffle's spec holds.
    pub(crate) fn release_on_drop(&self, shuffle_id: u32) -> ShuffleRelease {
        ShuffleRelease::new(ReleaseNotice {
            shuffle_id,
            tx: self.tx.clone(),
        })
    }

    /// Watches a node that was just persisted: its blocks go when it dies.
    pub(crate) fn track_persisted(&self, node: &Arc<LineageNode>) {
        let fresh = self
            .persisted
            .lock()
            .insert(node.id, Arc::downgrade(node))
            .is_none();
        if fresh {
            let _ = self.tx.send(Notice::Wake);
        }
    }

    /// Stops watching `rdd_id` (it was unpersisted explicitly).
    pub(crate) fn untrack(&self, rdd_id: u32) {
        self.persisted.lock().remove(&rdd_id);
    }

    /// Stops the thread and waits for it (it finishes the call it is in).
    pub(crate) fn stop(&self) {
        let _ = self.tx.send(Notice::Stop);
        if let Some(t) = self.thread.lock().take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Cleaner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The cleaner thread: waits for notices, then forgets dead persisted nodes and the
/// released shuffles, in batches; returns on `Stop`.
fn run(rx: &Receiver<Notice>, target: &dyn ReleaseTarget, persisted: &Persisted) {
    loop {
        let watching = !persisted.lock().is_empty();
        let first = if watching {
            rx.recv_timeout(PERSIST_POLL)
        } else {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        let mut shuffles = Vec::new();
        match first {
            Ok(Notice::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(Notice::Shuffle(id)) => shuffles.push(id),
            Ok(Notice::Wake) | Err(RecvTimeoutError::Timeout) => {}
        }
        for notice in rx.try_iter().take(MAX_BATCH) {
            match notice {
                Notice::Stop => return,
                Notice::Shuffle(id) => shuffles.push(id),
                Notice::Wake => {}
            }
        }
        let dead: Vec<u32> = {
            let mut p = persisted.lock();
            let dead: Vec<u32> = p
                .iter()
                .filter(|(_, node)| node.strong_count() == 0)
                .map(|(id, _)| *id)
                .collect();
            for id in &dead {
                p.remove(id);
            }
            dead
        };
        for rdd_id in dead {
            debug!(
                rdd = rdd_id,
                "no live RDD reaches this persisted RDD; unpersisting"
            );
            target.unpersist(rdd_id);
        }
        if !shuffles.is_empty() {
            debug!(
                count = shuffles.len(),
                "releasing shuffles no live RDD reaches"
            );
            for chunk in shuffles.chunks(MAX_RELEASED_SHUFFLES) {
                target.release_shuffles(chunk);
            }
        }
    }
}
