//! An event as a writer stores or serves it: the tag the log writes, every text cut
//! to a bound, and credentials in an `environment` event redacted.
//!
//! Invariants: a cut text ends with `…` and stays within its bound on a character
//! boundary; redaction replaces the values of exactly the entries
//! [`is_secret_name`](crate::store::environment::is_secret_name) names.

use super::AppEvent;

impl AppEvent {
    /// The event's tag as the log writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            AppEvent::AppStarted { .. } => "app_started",
            AppEvent::JobSubmitted { .. } => "job_submitted",
            AppEvent::StageSkipped { .. } => "stage_skipped",
            AppEvent::StageSubmitted { .. } => "stage_submitted",
            AppEvent::StageCompleted { .. } => "stage_completed",
            AppEvent::StageFailed { .. } => "stage_failed",
            AppEvent::TaskStarted { .. } => "task_started",
            AppEvent::TaskEnded { .. } => "task_ended",
            AppEvent::TaskSupersteps { .. } => "task_supersteps",
            AppEvent::JobEnded { .. } => "job_ended",
            AppEvent::ExecutorAdded { .. } => "executor_added",
            AppEvent::ExecutorLost { .. } => "executor_lost",
            AppEvent::ExecutorResources { .. } => "executor_resources",
            AppEvent::BlockCached { .. } => "block_cached",
            AppEvent::BlocksRemoved { .. } => "blocks_removed",
            AppEvent::OutputsRecovered { .. } => "outputs_recovered",
            AppEvent::Environment { .. } => "environment",
        }
    }

    /// Cuts every text of the event (names, descriptions, reasons) to at most `max`
    /// bytes on a character boundary, ending a cut one with `…`.
    pub fn cut_texts(&mut self, max: usize) {
        let mut texts: Vec<&mut String> = Vec::new();
        match self {
            AppEvent::AppStarted { name, .. } => texts.push(name),
            AppEvent::JobSubmitted {
                application,
                description,
                stages,
                pool,
                job_group,
                pool_share,
                ..
            } => {
                texts.push(application);
                texts.push(description);
                texts.push(pool);
                texts.push(job_group);
                texts.push(pool_share);
                for s in stages.iter_mut() {
                    texts.push(&mut s.name);
                    texts.extend(s.operators.iter_mut().map(|o| &mut o.name));
                }
            }
            AppEvent::StageFailed { reason, .. } => texts.push(reason),
            AppEvent::TaskStarted { executor_id, .. } => texts.push(executor_id),
            AppEvent::TaskEnded {
                executor_id,
                failure,
                ..
            } => {
                texts.push(executor_id);
                texts.extend(failure.as_mut());
            }
            AppEvent::TaskSupersteps {
                executor_id,
                supersteps,
                ..
            } => {
                texts.push(executor_id);
                texts.extend(supersteps.iter_mut().map(|s| &mut s.op));
            }
            AppEvent::JobEnded { failure, .. } => texts.extend(failure.as_mut()),
            AppEvent::ExecutorAdded { executor_id, .. } => texts.push(executor_id),
            AppEvent::ExecutorLost {
                executor_id,
                reason,
                ..
            } => {
                texts.push(executor_id);
                texts.push(reason);
            }
            AppEvent::ExecutorResources {
                executor_id, host, ..
            } => {
                texts.push(executor_id);
                texts.push(host);
            }
            AppEvent::BlockCached {
                application,
                rdd_name,
                executor_id,
                moved_from,
                ..
            } => {
                texts.push(application);
                texts.push(rdd_name);
                texts.push(executor_id);
                texts.push(moved_from);
            }
            AppEvent::OutputsRecovered { executors, .. } => texts.extend(executors.iter_mut()),
            AppEvent::Environment {
                application,
                section,
                entries,
                ..
            } => {
                texts.push(application);
                texts.push(section);
                for (k, v) in entries.iter_mut() {
                    texts.push(k);
                    texts.push(v);
                }
            }
            AppEvent::BlocksRemoved { .. }
            | AppEvent::StageSkipped { .. }
            | AppEvent::StageSubmitted { .. }
            | AppEvent::StageCompleted { .. } => {}
        }
        for t in texts {
            cut_text(t, max);
        }
    }

    /// An `environment` event with every credential's value replaced by
    /// [`REDACTED`](crate::store::environment::REDACTED) (see
    /// [`is_secret_name`](crate::store::environment::is_secret_name)); `None` for any
    /// other event, or one with nothing to redact.
    pub fn redacted(&self) -> Option<AppEvent> {
        use crate::store::environment::{is_secret_name, REDACTED};
        let AppEvent::Environment { entries, .. } = self else {
            return None;
        };
        let secret = |(k, v): &(String, String)| is_secret_name(k) && v != REDACTED;
        if !entries.iter().any(secret) {
            return None;
        }
        let mut out = self.clone();
        if let AppEvent::Environment { entries, .. } = &mut out {
            for (k, v) in entries.iter_mut() {
                if is_secret_name(k) {
                    *v = REDACTED.to_string();
                }
            }
        }
        Some(out)
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary, ending it with `…`.
fn cut_text(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    s.truncate(s.floor_char_boundary(max.saturating_sub('…'.len_utf8())));
    s.push('…');
}
