//! What a decommissioning executor says on its channel (`Decommissioning` phases and
//! `MigratedOutputs`: map outputs and cached blocks), handed to the scheduler, and
//! asking an executor to decommission (an operator's REST call or UI action).
//!
//! Invariants: only the executor's own channel moves it through its phases (the id is
//! the channel's, never one the message names); a `MigratedOutputs` longer than
//! `MAX_MIGRATIONS_PER_MESSAGE` loses the executor, as any oversized batch does; an
//! executor that says `DONE` is lost at once with the reason [`DECOMMISSIONED`] (so the
//! console and UI say why its outputs moved), which ends its channel: what it waits for
//! before it exits.

use ember_proto::decommissioning::Phase;
use ember_proto::{driver_message, limits, Decommission, Decommissioning, MigratedOutputs};
use ember_scheduler::SchedulerEvent;
use tracing::{info, warn};

use super::DriverState;

/// The reason a decommissioned executor is lost with (the client's console knows it).
pub(crate) const DECOMMISSIONED: &str = "decommissioned";

/// What the channel reader does after a decommissioning message.
pub(crate) enum Next {
    /// Keep reading.
    Read,
    /// The executor finished decommissioning: lose it (its outputs moved).
    Done,
    /// The executor broke the protocol (the reason): lose it.
    Lose(String),
}

/// A phase reported by executor `id`.
pub(crate) fn phase(state: &DriverState, id: &str, d: Decommissioning) -> Next {
    match Phase::try_from(d.phase) {
        Ok(Phase::Draining) => {
            info!(executor = %id, "executor decommissioning: no more tasks go to it");
            state
                .scheduler
                .send(SchedulerEvent::ExecutorDecommissioning {
                    executor_id: id.to_string(),
                    drained: false,
                });
            Next::Read
        }
        Ok(Phase::Drained) => {
            state
                .scheduler
                .send(SchedulerEvent::ExecutorDecommissioning {
                    executor_id: id.to_string(),
                    drained: true,
                });
            Next::Read
        }
        Ok(Phase::Done) => {
            info!(executor = %id, "executor decommissioned");
            Next::Done
        }
        _ => {
            warn!(executor = %id, phase = d.phase, "unknown decommissioning phase; ignored");
            Next::Read
        }
    }
}

/// Map outputs executor `id` moved to peers.
pub(crate) fn migrated(state: &DriverState, id: &str, m: MigratedOutputs) -> Next {
    let named = m.outputs.len() + m.blocks.len();
    if named > limits::MAX_MIGRATIONS_PER_MESSAGE {
        return Next::Lose(format!(
            "{id} reported {named} moved map outputs and cached blocks in one message, more \
             than the {} allowed",
            limits::MAX_MIGRATIONS_PER_MESSAGE
        ));
    }
    let outputs = m
        .outputs
        .into_iter()
        .filter_map(|o| Some((o.shuffle_id, o.map_partition, o.target?)))
        .collect();
    let blocks = m
        .blocks
        .into_iter()
        .filter_map(|b| Some((b.rdd_id, b.partition, b.target?, b.bytes)))
        .collect();
    state.scheduler.send(SchedulerEvent::OutputsMigrated {
        executor_id: id.to_string(),
        outputs,
        blocks,
    });
    Next::Read
}

/// Asks executor `id` to decommission itself; false if it is not registered.
pub(crate) fn request(state: &DriverState, id: &str) -> bool {
    let known = state.executors.is_registered(id);
    if known {
        info!(executor = %id, "asking the executor to decommission");
        state
            .executors
            .send(id, driver_message::Msg::Decommission(Decommission {}));
    }
    known
}
