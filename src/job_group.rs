//! Where a thread's jobs are scheduled and how they are cancelled: Spark's local
//! properties `spark.scheduler.pool` and the job group (`setJobGroup`,
//! `cancelJobGroup`, `cancelAllJobs`), as methods of [`Context`].
//!
//! Invariants: the properties are per thread (an action carries those of the thread
//! that runs it; a thread it spawns starts with none, unlike Spark's inheritable
//! ones); names are bounded by `ember_proto::limits::MAX_JOB_PROPERTY_BYTES` when set,
//! so a plan never carries more; a cancellation reaches only this context's own jobs
//! (its session's, in cluster mode), running or waiting to start, and jobs submitted
//! after it run.

use std::cell::RefCell;
use std::collections::HashMap;

use ember_proto::JobProperties;

use crate::context::Context;
use crate::error::{EmberError, Result};

thread_local! {
    /// This thread's job properties, by context id: gone with the thread.
    static PROPERTIES: RefCell<HashMap<u64, JobProperties>> = RefCell::new(HashMap::new());
}

/// Most bytes of a pool name or job group id (the scheduler's bound).
const MAX_NAME: usize = ember_proto::limits::MAX_JOB_PROPERTY_BYTES;

/// `Err` naming `what` (and quoting its start) if `value` is over `max` bytes.
fn check(what: &str, value: &str, max: usize) -> Result<()> {
    if value.len() > max {
        return Err(EmberError::InvalidArgument(format!(
            "the {what} {} is {} bytes, over the limit of {max}",
            crate::io::excerpt(value),
            value.len()
        )));
    }
    Ok(())
}

impl Context {
    /// Puts the jobs this thread runs from now on into pool `pool` of this session
    /// (Spark's `setLocalProperty("spark.scheduler.pool", pool)`); `""` is the default
    /// pool. Under the driver's `fair` mode a session's pools share its slots by the
    /// weights and min shares of the driver's pool file.
    pub fn set_pool(&self, pool: &str) -> Result<()> {
        check("pool name", pool, MAX_NAME)?;
        self.with_local(|p| p.pool = pool.to_string());
        Ok(())
    }

    /// The pool this thread's jobs go to (`""`: the default pool).
    pub fn pool(&self) -> String {
        self.local_properties().pool
    }

    /// Puts the jobs this thread runs from now on into job group `group_id` (Spark's
    /// `setJobGroup`; `""` clears it), so [`Context::cancel_job_group`] can cancel them
    /// from any thread. Cancelling asks their running tasks to stop at their next batch
    /// (a task inside user code runs that code out, its result dropped); with
    /// `interrupt_on_cancel`, a task still running 250 ms later has its worker process
    /// ended (cluster mode; local mode cannot end a thread).
    pub fn set_job_group(
        &self,
        group_id: &str,
        description: &str,
        interrupt_on_cancel: bool,
    ) -> Result<()> {
        check("job group", group_id, MAX_NAME)?;
        // The description's bound is the plan's description's (the driver's default).
        let max_description = ember_scheduler::PlanLimits::default().max_description_bytes;
        check(
            "job group description",
            description,
            max_description as usize,
        )?;
        self.with_local(|p| {
            p.job_group = group_id.to_string();
            p.job_group_description = description.to_string();
            p.interrupt_on_cancel = interrupt_on_cancel;
        });
        Ok(())
    }

    /// This thread's jobs belong to no job group from now on.
    pub fn clear_job_group(&self) {
        self.with_local(|p| {
            p.job_group.clear();
            p.job_group_description.clear();
            p.interrupt_on_cancel = false;
        });
    }

    /// Cancels this context's running and waiting jobs of job group `group_id`
    /// (callable from any thread): each one's action returns
    /// [`EmberError::Cancelled`] naming the group.
    pub fn cancel_job_group(&self, group_id: &str) -> Result<()> {
        check("job group", group_id, MAX_NAME)?;
        if group_id.is_empty() {
            return Err(EmberError::InvalidArgument(
                "cancel_job_group(\"\"): the empty name is no job group (use cancel_all_jobs)"
                    .into(),
            ));
        }
        self.inner.backend.cancel_jobs(Some(group_id))
    }

    /// Cancels every running and waiting job of this context (callable from any
    /// thread).
    pub fn cancel_all_jobs(&self) -> Result<()> {
        self.inner.backend.cancel_jobs(None)
    }

    /// The properties a job run on this thread now carries.
    pub(crate) fn local_properties(&self) -> JobProperties {
        let id = self.inner.id;
        PROPERTIES.with(|all| all.borrow().get(&id).cloned().unwrap_or_default())
    }

    fn with_local(&self, f: impl FnOnce(&mut JobProperties)) {
        let id = self.inner.id;
        PROPERTIES.with(|all| {
            let mut all = all.borrow_mut();
            let props = all.entry(id).or_default();
            f(props);
            if *props == JobProperties::default() {
                all.remove(&id);
            }
        });
    }
}
