//! The driver's sessions as the web UI sees them ([`ember_ui::Sessions`]): which
//! application a session token opens, and killing a job through the same cancel a
//! client disconnect uses, and asking an executor to decommission (the operator's).
//!
//! Invariants: holds the driver state weakly (the UI never keeps a stopped driver
//! alive); a token is compared with every open session's in constant time and never
//! logged; a kill reaches only a job of the caller's application (any, for the
//! operator).

use std::sync::{Arc, Weak};

use super::DriverState;
use ember_scheduler::events::SchedulerEvent;

/// [`ember_ui::Sessions`] over a driver's session registry.
pub(crate) struct UiSessions(pub Weak<DriverState>);

impl ember_ui::Sessions for UiSessions {
    fn application(&self, token: &str) -> Option<String> {
        let state: Arc<DriverState> = self.0.upgrade()?;
        state.sessions.application_of_token(token)
    }

    fn kill_job(&self, job_id: u64, application: Option<&str>, reason: &str) -> bool {
        let Some(state) = self.0.upgrade() else {
            return false;
        };
        state
            .sessions
            .cancel_running_job(job_id, application, reason, &state.to_scheduler)
    }

    fn kill_stage(&self, stage_id: u32, application: Option<&str>, reason: &str) -> bool {
        let Some(state) = self.0.upgrade() else {
            return false;
        };
        let _ = state.to_scheduler.send(SchedulerEvent::CancelStage {
            stage_id,
            application: application.map(str::to_string),
            reason: reason.to_string(),
        });
        true
    }

    fn decommission_executor(&self, executor_id: &str) -> bool {
        let Some(state) = self.0.upgrade() else {
            return false;
        };
        super::decommission::request(&state, executor_id)
    }
}
