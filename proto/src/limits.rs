//! Bounds on what a worker or executor puts on the wire for one task: failure messages
//! are cut to [`MAX_ERROR_MESSAGE_BYTES`], and a task status too large for one message
//! becomes a failure of that task naming the sizes ([`fit_status`]). One release of
//! shuffles names at most [`MAX_RELEASED_SHUFFLES`] ids. Batches of launches and of
//! statuses, and of a job's events to its client, are bounded in count and bytes
//! ([`MAX_LAUNCH_BATCH`], [`MAX_STATUS_BATCH`], [`MAX_EVENT_BATCH`], [`BATCH_BYTES`]),
//! and so are the stage plans an executor holds for the driver ([`MAX_HELD_PLANS`],
//! [`MAX_HELD_PLAN_BYTES`]). One `FetchBlocks` request asks for at most
//! [`MAX_FETCH_REQUEST_BYTES`] of blocks unless it asks for a single block, and its answer
//! comes in messages of at most [`MAX_CHUNKS_PER_MESSAGE`] chunks. A barrier
//! task's rendezvous address is at most [`MAX_BARRIER_ADDRESS_BYTES`]. A map output has
//! at most [`MAX_SHUFFLE_REPLICAS`] replicas, each pushed file at most
//! [`MAX_PUSHED_OUTPUT_BYTES`]. A job's pool and group
//! names are at most [`MAX_JOB_PROPERTY_BYTES`].
//!
//! Invariant: a status that went through [`fit_status`] with limit `L` encodes to at
//! most `L - HEADROOM_BYTES` bytes, so wrapping it (in an `ExecutorMessage`, or the
//! driver's `JobEvent`) never exceeds a channel's message limit; one task's oversized
//! output or error fails that task only, never its worker, executor or channel.

use prost::Message;

use crate::{task_failure, task_status, TaskFailure, TaskStatus};

/// Most shuffle ids one `ReleaseShufflesRequest` or `RemoveShuffles` may carry: the
/// client splits bigger releases, the driver refuses bigger requests.
pub const MAX_RELEASED_SHUFFLES: usize = 1024;

/// Most replicas of one map output (`replicated:N` shuffle durability): the most a
/// client may ask for, and the most copies the driver records for one output.
pub const MAX_SHUFFLE_REPLICAS: usize = 4;

/// Most bytes of a job's pool name, job group id and job group description
/// (`JobProperties`), and of the group a `CancelJobs` names.
pub const MAX_JOB_PROPERTY_BYTES: usize = 1024;

/// Largest map output file one `PushMapOutput` may carry (64 GiB): bounds the disk a
/// push may take before its length is checked at the end.
pub const MAX_PUSHED_OUTPUT_BYTES: u64 = 64 << 30;

/// The longest a push of a `file_len`-byte file may take, on either side: 30 s, plus one
/// second per 16 MiB. The pusher gives up after it; the receiver drops the push (and its
/// temporary), so a peer sending a byte now and then holds nothing for long.
pub fn push_time_limit(file_len: u64) -> std::time::Duration {
    std::time::Duration::from_secs(30 + (file_len >> 24))
}

/// Most map outputs and cached blocks, together, one `MigratedOutputs` message names (a
/// decommissioning executor's plan, or what it moved, goes in as many messages as it
/// takes).
pub const MAX_MIGRATIONS_PER_MESSAGE: usize = 4096;

/// `outputs` and `blocks` (a decommissioning executor's plan, or what it moved) as
/// messages of at most [`MAX_MIGRATIONS_PER_MESSAGE`] of them together, outputs first;
/// none for none. `last` is left for the sender to set.
pub fn migration_messages(
    outputs: Vec<crate::MigratedOutput>,
    blocks: Vec<crate::MigratedBlock>,
) -> Vec<crate::MigratedOutputs> {
    let mut out = Vec::new();
    let mut current = crate::MigratedOutputs::default();
    let full =
        |m: &crate::MigratedOutputs| m.outputs.len() + m.blocks.len() == MAX_MIGRATIONS_PER_MESSAGE;
    for o in outputs {
        if full(&current) {
            out.push(std::mem::take(&mut current));
        }
        current.outputs.push(o);
    }
    for b in blocks {
        if full(&current) {
            out.push(std::mem::take(&mut current));
        }
        current.blocks.push(b);
    }
    if !current.outputs.is_empty() || !current.blocks.is_empty() {
        out.push(current);
    }
    out
}

/// Most map outputs an executor reports holding when it registers (over all its
/// `HeldOutputs` messages): it reports the first found, the driver refuses more.
pub const MAX_HELD_OUTPUTS: usize = 1 << 20;

/// Most map outputs in one `HeldOutputs` message.
pub const MAX_HELD_OUTPUTS_PER_MESSAGE: usize = 4096;

/// Most block sizes (over its outputs) in one `HeldOutputs` message: 8 MiB of them at
/// most, well inside a message's bound.
pub const MAX_HELD_BLOCK_SIZES_PER_MESSAGE: usize = 1 << 20;

/// `outputs` (what an executor holds from before its registration) as `HeldOutputs`
/// messages within [`MAX_HELD_OUTPUTS_PER_MESSAGE`] and
/// [`MAX_HELD_BLOCK_SIZES_PER_MESSAGE`] (an output wider than the latter travels
/// alone), `sessions` on the first, the last marked; one message for none.
pub fn held_output_messages(
    outputs: Vec<crate::HeldOutput>,
    sessions: Vec<crate::HeldSession>,
) -> Vec<crate::HeldOutputs> {
    let mut out = Vec::new();
    let mut current = crate::HeldOutputs {
        sessions,
        ..Default::default()
    };
    let mut sizes = 0usize;
    for o in outputs {
        let n = o.block_sizes.len();
        if !current.outputs.is_empty()
            && (current.outputs.len() == MAX_HELD_OUTPUTS_PER_MESSAGE
                || sizes + n > MAX_HELD_BLOCK_SIZES_PER_MESSAGE)
        {
            out.push(std::mem::take(&mut current));
            sizes = 0;
        }
        sizes += n;
        current.outputs.push(o);
    }
    current.last = true;
    out.push(current);
    out
}

/// Most launches in one `LaunchTasks` message.
pub const MAX_LAUNCH_BATCH: usize = 1024;

/// Most statuses in one `TaskStatuses` message.
pub const MAX_STATUS_BATCH: usize = 1024;

/// Most job events in one `JobEvents` message.
pub const MAX_EVENT_BATCH: usize = 1024;

/// A batch (of launches, statuses or job events) grows past one item only while its
/// encoded size stays under this many bytes; a bigger item travels alone.
pub const BATCH_BYTES: usize = 4 << 20;

/// Most stage plans the driver keeps on one executor (and the executor on its
/// workers): past it, the oldest is forgotten, and a later task of its stage comes
/// with it again.
pub const MAX_HELD_PLANS: usize = 64;

/// Most bytes of stage plans (encoded) held as [`MAX_HELD_PLANS`] says; the newest
/// plan is held whatever its size.
pub const MAX_HELD_PLAN_BYTES: usize = 64 << 20;

/// Most bytes of blocks (the sum of the index lengths of the blocks asked) one
/// `FetchBlocks` request may ask for, unless it asks for one block only (a block is
/// always served whole, whatever its size). Reducers split their fetches from one
/// executor into requests under it by the block sizes their task carries.
pub const MAX_FETCH_REQUEST_BYTES: u64 = 1 << 30;

/// Most block chunks one `BlockChunks` message of a block stream carries.
pub const MAX_CHUNKS_PER_MESSAGE: usize = 4096;
/// Most data (over its chunks) in one `BlockChunks` message: a message takes no chunk
/// that would carry it past this, and a chunk itself is at most this long.
pub const CHUNKS_MESSAGE_BYTES: usize = 1024 * 1024;

/// Longest rendezvous address a barrier task may report (`BarrierAddress.address`), in
/// bytes: the scheduler refuses a longer one, so a stage's `BarrierPeers` stays within
/// `world` x this.
pub const MAX_BARRIER_ADDRESS_BYTES: usize = 512;

/// Collective calls a barrier task's status lists (`BarrierMetrics.supersteps`); later
/// ones are only counted. Also what the scheduler passes on, whatever a status says.
pub const MAX_SUPERSTEPS: usize = 10_000;

/// Longest collective name in a `Superstep`, in bytes.
pub const MAX_SUPERSTEP_OP_BYTES: usize = 32;

/// Longest failure message sent, in bytes (plus the truncation suffix).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

/// Room left for the envelopes a status travels in.
pub const HEADROOM_BYTES: usize = 1024;

/// Environment variable lowering the largest task status a worker or executor sends.
pub const MAX_MESSAGE_ENV: &str = "EMBER_MAX_MESSAGE_BYTES";

/// The largest message the executor and its workers send for one task: `EMBER_MAX_MESSAGE_BYTES`
/// if set (at least 64 KiB), at most [`crate::auth::MAX_MESSAGE_BYTES`] (the default).
pub fn max_message_bytes() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(MAX_MESSAGE_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(crate::auth::MAX_MESSAGE_BYTES, |n| {
                n.clamp(64 << 10, crate::auth::MAX_MESSAGE_BYTES)
            })
    })
}

/// Room for the `… (N bytes more)` suffix: a message at most this much longer than
/// [`MAX_ERROR_MESSAGE_BYTES`] is left alone, so cutting twice (worker, then executor)
/// changes nothing the second time.
const SUFFIX_ROOM: usize = 64;

/// Cuts `msg` to [`MAX_ERROR_MESSAGE_BYTES`] on a char boundary, saying how much went.
pub fn bound_message(msg: &mut String) {
    if msg.len() <= MAX_ERROR_MESSAGE_BYTES + SUFFIX_ROOM {
        return;
    }
    let cut = msg.floor_char_boundary(MAX_ERROR_MESSAGE_BYTES);
    let more = msg.len() - cut;
    msg.truncate(cut);
    msg.push_str(&format!("… ({more} bytes more)"));
}

/// `status` bounded for the wire: its failure message cut (see [`bound_message`]), and,
/// if it still encodes to more than `limit - HEADROOM_BYTES` bytes, replaced by a
/// failure of the task naming its size and the limit.
pub fn fit_status(mut status: TaskStatus, limit: usize) -> TaskStatus {
    if let Some(task_status::Outcome::Failure(TaskFailure {
        reason: Some(reason),
    })) = &mut status.outcome
    {
        match reason {
            task_failure::Reason::UserError(m)
            | task_failure::Reason::ExecutorLost(m)
            | task_failure::Reason::Killed(m)
            | task_failure::Reason::WorkerEnded(m) => bound_message(m),
            task_failure::Reason::FetchFailed(f) => {
                bound_message(&mut f.message);
                bound_message(&mut f.executor_id);
            }
        }
    }
    let len = status.encoded_len();
    if len + HEADROOM_BYTES <= limit {
        return status;
    }
    let message = format!(
        "task result of {len} bytes exceeds the {limit}-byte limit of one message \
         ({MAX_MESSAGE_ENV}, at most {}); return less per task (more partitions, or \
         save_as_text_file instead of collect)",
        crate::auth::MAX_MESSAGE_BYTES
    );
    status.outcome = Some(task_status::Outcome::Failure(TaskFailure {
        reason: Some(task_failure::Reason::UserError(message)),
    }));
    status
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_go_in_messages_of_at_most_the_bound_outputs_first() {
        let outputs: Vec<crate::MigratedOutput> = (0..MAX_MIGRATIONS_PER_MESSAGE as u32 + 10)
            .map(|m| crate::MigratedOutput {
                map_partition: m,
                ..Default::default()
            })
            .collect();
        let blocks: Vec<crate::MigratedBlock> = (0..MAX_MIGRATIONS_PER_MESSAGE as u32)
            .map(|p| crate::MigratedBlock {
                partition: p,
                ..Default::default()
            })
            .collect();
        let msgs = migration_messages(outputs, blocks);
        let sizes: Vec<(usize, usize)> = msgs
            .iter()
            .map(|m| (m.outputs.len(), m.blocks.len()))
            .collect();
        let max = MAX_MIGRATIONS_PER_MESSAGE;
        assert_eq!(sizes, vec![(max, 0), (10, max - 10), (0, 10)]);
        assert!(msgs.iter().all(|m| !m.last));
        assert_eq!(msgs[1].blocks[0].partition, 0);
        assert_eq!(msgs[2].blocks[9].partition, max as u32 - 1);
        assert!(migration_messages(Vec::new(), Vec::new()).is_empty());
    }

    use super::*;
    use crate::{task_success, TaskSuccess};

    #[test]
    fn held_outputs_go_in_bounded_messages_the_last_marked() {
        let held = |m: u32, width: usize| crate::HeldOutput {
            shuffle_id: 7,
            map_partition: m,
            block_sizes: vec![1; width],
        };
        let max = MAX_HELD_OUTPUTS_PER_MESSAGE;
        let outputs: Vec<_> = (0..max as u32 + 3).map(|m| held(m, 1)).collect();
        let key = crate::HeldSession {
            range: 1,
            shuffle_key_sha256: "a".repeat(64),
        };
        let msgs = held_output_messages(outputs, vec![key.clone()]);
        assert_eq!(msgs[0].sessions, vec![key]);
        assert!(msgs[1].sessions.is_empty());
        let counts: Vec<usize> = msgs.iter().map(|m| m.outputs.len()).collect();
        assert_eq!(counts, vec![max, 3]);
        assert_eq!(
            msgs.iter().map(|m| m.last).collect::<Vec<_>>(),
            vec![false, true]
        );
        // By block sizes: two half-bound outputs fit, the third starts a message; one
        // wider than the bound travels alone.
        let half = MAX_HELD_BLOCK_SIZES_PER_MESSAGE / 2;
        let wide = MAX_HELD_BLOCK_SIZES_PER_MESSAGE + 1;
        let msgs = held_output_messages(
            vec![held(0, half), held(1, half), held(2, 1), held(3, wide)],
            Vec::new(),
        );
        let maps: Vec<Vec<u32>> = msgs
            .iter()
            .map(|m| m.outputs.iter().map(|o| o.map_partition).collect())
            .collect();
        assert_eq!(maps, vec![vec![0, 1], vec![2], vec![3]]);
        let none = held_output_messages(Vec::new(), Vec::new());
        assert_eq!(none.len(), 1);
        assert!(none[0].last && none[0].outputs.is_empty());
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let mut short = "fine".to_string();
        bound_message(&mut short);
        assert_eq!(short, "fine");
        let mut long = "é".repeat(3000); // 6000 bytes, 2-byte chars
        bound_message(&mut long);
        assert_eq!(long, format!("{}… (1904 bytes more)", "é".repeat(2048)));
        let once = long.clone();
        bound_message(&mut long);
        assert_eq!(long, once, "cutting again changes nothing");
    }

    #[test]
    fn an_oversized_result_fails_the_task_with_its_size() {
        let status = |bytes: usize| TaskStatus {
            task_id: 9,
            outcome: Some(task_status::Outcome::Success(TaskSuccess {
                output: Some(task_success::Output::Result(vec![1; bytes])),
                ..Default::default()
            })),
            ..Default::default()
        };
        let small = fit_status(status(1000), 64 << 10);
        assert!(matches!(
            small.outcome,
            Some(task_status::Outcome::Success(_))
        ));
        let big = fit_status(status(100_000), 64 << 10);
        let Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::UserError(m)),
        })) = &big.outcome
        else {
            panic!("{big:?}")
        };
        assert!(
            m.starts_with("task result of 100010 bytes exceeds the 65536-byte limit"),
            "{m}"
        );
        assert_eq!(big.task_id, 9);
    }
}
