//! Where a context's jobs run, as the context and its cleaner see it: the [`Backend`]
//! trait, implemented by local mode (`local.rs`: an in-process scheduler and executor)
//! and by a cluster session (`cluster/client.rs`). The context holds a
//! `Box<dyn Backend>` and never names either, so the arrows run from `local` and
//! `cluster` up to here, not from the context down to them (`connect.rs`, at the top,
//! picks one).
//!
//! Invariants: every submitted plan's event stream ends in the job's success or
//! failure (or the stream closes, which the job reads as a lost connection);
//! `shutdown` is called once, when the context drops, after its cleaner has stopped.

use std::collections::HashMap;
use std::path::PathBuf;

use crossbeam_channel::Receiver;
use ember_scheduler::JobEvent;

use crate::cleaner::ReleaseTarget;

/// A context's jobs' runner: local mode or a cluster session.
pub(crate) trait Backend: Send + Sync {
    /// Submits a plan with the context's broadcast values; its events arrive on the
    /// returned channel, ending in success or failure.
    fn submit(
        &self,
        plan: ember_proto::Plan,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Receiver<JobEvent>;

    /// Gives up on a running job.
    fn cancel(&self, job_id: u64, reason: &str);

    /// Cancels the context's jobs of job group `group` (all of them with `None`),
    /// running or waiting to start.
    fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()>;

    /// Drops the cached blocks of an RDD wherever they are (before returning, so a job
    /// submitted afterwards cannot find them).
    fn unpersist(&self, rdd_id: u32);

    /// What the context's cleaner releases shuffles and cached blocks through.
    fn release_target(&self) -> Box<dyn ReleaseTarget>;

    /// Local mode's work dir (removed with the context); `None` in cluster mode.
    fn local_work_dir(&self) -> Option<PathBuf> {
        None
    }

    /// A cluster session's token for the driver's web UI; `None` in local mode.
    fn session_token(&self) -> Option<String> {
        None
    }

    /// Where local mode serves its web UI, as `http://127.0.0.1:PORT`, if it does.
    fn ui_url(&self) -> Option<String> {
        None
    }

    /// Ends the backend when the context drops (local mode: stops the scheduler and
    /// joins the task threads).
    fn shutdown(&mut self) {}
}
