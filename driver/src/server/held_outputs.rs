//! What an executor says it holds when it registers: the map outputs kept from before
//! (its driver restarted, or its channel broke), read before the executor is added so
//! the scheduler knows them before it places a task there.
//!
//! Invariants: every message is bounded (outputs and block sizes per message, outputs
//! and sessions in all) before it is kept; an output is kept only if the session owning
//! its id range here has the shuffle key the executor holds it under (compared by
//! digest); the executor is told to clean up every other range it reported.

use std::time::Duration;

use ember_proto::{driver_message, executor_message, limits, DriverMessage, ExecutorMessage};
use tonic::Streaming;
use tracing::info;

use super::executors::Outbound;
use super::DriverState;

/// How long a registered executor has to report the map outputs it holds.
const HELD_OUTPUTS_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the `HeldOutputs` messages an executor sends right after `Registered` (until
/// the one marked last), each within the message bounds, and keeps the outputs of
/// sessions this driver has (live or recovered from its state directory) under the
/// same shuffle key; the executor is told to clean up the id ranges it holds other
/// outputs of (a session gone, or an earlier session of a range a new one took: all
/// its files there are under the one key it reported).
pub(super) async fn read(
    state: &DriverState,
    id: &str,
    tx: &Outbound,
    inbound: &mut Streaming<ExecutorMessage>,
) -> Result<Vec<ember_proto::HeldOutput>, String> {
    let mut held = Vec::new();
    let mut keys: std::collections::HashMap<u32, String> = Default::default();
    let deadline = tokio::time::Instant::now() + HELD_OUTPUTS_TIMEOUT;
    loop {
        let msg = tokio::time::timeout_at(deadline, inbound.message())
            .await
            .map_err(|_| {
                format!(
                    "{id} did not report its map outputs within {} s of registering",
                    HELD_OUTPUTS_TIMEOUT.as_secs()
                )
            })?
            .map_err(|s| format!("{id}'s channel failed: {}", s.message()))?
            .ok_or_else(|| format!("{id} ended its channel before reporting its outputs"))?;
        let Some(executor_message::Msg::HeldOutputs(batch)) = msg.msg else {
            return Err(format!(
                "{id} sent another message before reporting the map outputs it holds"
            ));
        };
        let sizes: usize = batch.outputs.iter().map(|o| o.block_sizes.len()).sum();
        if batch.outputs.len() > limits::MAX_HELD_OUTPUTS_PER_MESSAGE
            || (batch.outputs.len() > 1 && sizes > limits::MAX_HELD_BLOCK_SIZES_PER_MESSAGE)
        {
            return Err(format!(
                "{id} reported {} held outputs with {sizes} block sizes in one message, more \
                 than the {} outputs / {} sizes allowed",
                batch.outputs.len(),
                limits::MAX_HELD_OUTPUTS_PER_MESSAGE,
                limits::MAX_HELD_BLOCK_SIZES_PER_MESSAGE
            ));
        }
        if held.len() + batch.outputs.len() > limits::MAX_HELD_OUTPUTS {
            return Err(format!(
                "{id} reported more than {} held map outputs",
                limits::MAX_HELD_OUTPUTS
            ));
        }
        if keys.len() + batch.sessions.len() > ember_proto::IdRange::MAX_INDEX as usize {
            return Err(format!(
                "{id} reported more sessions than there are id ranges"
            ));
        }
        keys.extend((batch.sessions.into_iter()).map(|s| (s.range, s.shuffle_key_sha256)));
        held.extend(batch.outputs);
        if batch.last {
            break;
        }
    }
    // Outputs of sessions that are gone (their client left while the driver was
    // down): the executor deletes them.
    let mut orphaned = std::collections::BTreeSet::new();
    let mut owned = std::collections::HashMap::new();
    held.retain(|o| {
        let range = ember_proto::IdRange::of_id(o.shuffle_id);
        let ours = *owned.entry(range).or_insert_with(|| {
            (keys.get(&range.index())).is_some_and(|k| state.sessions.owns(range, k))
        });
        if !ours {
            orphaned.insert(range);
        }
        ours
    });
    for range in orphaned {
        info!(executor = %id, id_range = range.index(), "an executor holds outputs of a session this driver does not have (or of an earlier session of its id range): cleaning them up");
        let cleanup = driver_message::Msg::Cleanup(super::sessions::cleanup_of(range));
        let _ = tx.send(Ok(DriverMessage { msg: Some(cleanup) }));
    }
    Ok(held)
}
