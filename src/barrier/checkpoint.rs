//! Superstep checkpoints of a barrier stage: [`BarrierContext::checkpoint_state`] every
//! k supersteps, [`BarrierContext::restore_state`] at a task's start, so a rerun of the
//! stage (after a rank failed or its executor was lost) resumes from the last superstep
//! every rank committed instead of from step 0.
//!
//! Layout, under the context's checkpoint directory (Spark's `setCheckpointDir`; in local
//! mode the work dir): `barrier-<node>-s<stage>/step-<S>/rank-<r>` holds rank r's state
//! after superstep S, and `step-<S>/COMMITTED` (written by rank 0 after a barrier that
//! every rank reaches only once its file is durable) marks the step complete. Files are
//! written to a temporary name, synced and renamed, so a reader never sees a partial
//! one; once a step is committed, rank 0 removes the older steps.
//!
//! Invariants: a step counts only with its `COMMITTED` marker (all ranks or none); a
//! restore reads the newest committed step written by a world of the same size, and
//! checks that the file is this rank's of that step; the directory is per barrier node
//! and scheduler stage, so another job over the same RDD starts from step 0. In a
//! cluster the directory must be shared storage, as Spark's checkpoint directory is.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::BarrierContext;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::rdd::make_private_dir;

const COMMITTED: &str = "COMMITTED";

/// What a rank's checkpoint file holds besides the state.
#[derive(Serialize, serde::Deserialize)]
struct Header {
    step: u64,
    rank: u32,
    world: u32,
}

impl BarrierContext {
    /// The directory of this stage's superstep checkpoints.
    fn checkpoints(&self, what: &str) -> Result<PathBuf> {
        match self.checkpoint_dir() {
            Some(dir) => Ok(dir),
            None => Err(EmberError::InvalidArgument(format!(
                "{what}: no checkpoint directory: call Context::set_checkpoint_dir with a \
                 directory every executor can reach"
            ))),
        }
    }

    /// Saves `state` as this rank's state after superstep `step`, and returns once every
    /// rank has saved its own (a collective: every rank calls it with the same `step`).
    /// Superstep `step` then counts as committed; older ones are removed.
    pub fn checkpoint_state<S: Serialize>(&self, step: u64, state: &S) -> Result<()> {
        let dir = self.checkpoints("checkpoint_state")?;
        let step_dir = dir.join(format!("step-{step}"));
        make_private_dir(&dir)?;
        make_private_dir(&step_dir)?;
        let header = Header {
            step,
            rank: self.rank() as u32,
            world: self.world() as u32,
        };
        let mut bytes = encode("checkpoint header", &header);
        bytes.extend(encode("checkpoint_state", state));
        write_durably(&step_dir.join(format!("rank-{}", self.rank())), &bytes)?;
        // Every rank's file is durable before anyone passes this barrier.
        self.barrier()?;
        if self.rank() == 0 {
            write_durably(&step_dir.join(COMMITTED), &encode("commit", &header))?;
            remove_older(&dir, step);
        }
        tracing::debug!(step, rank = self.rank(), "superstep checkpoint committed");
        Ok(())
    }

    /// The newest superstep every rank committed and this rank's state after it, or
    /// `None` when there is none (the stage's first attempt).
    pub fn restore_state<S: DeserializeOwned>(&self) -> Result<Option<(u64, S)>> {
        let dir = self.checkpoints("restore_state")?;
        let Some(step) = newest_committed(&dir, self.world() as u32)? else {
            return Ok(None);
        };
        let path = dir
            .join(format!("step-{step}"))
            .join(format!("rank-{}", self.rank()));
        let bytes = fs::read(&path).map_err(|e| EmberError::io(&path, e))?;
        let what = format!("superstep checkpoint {}", path.display());
        let (header, rest): (Header, &[u8]) =
            postcard::take_from_bytes(&bytes).map_err(|e| EmberError::ser(&what, e))?;
        if header.step != step || header.rank != self.rank() as u32 {
            return Err(EmberError::Corrupt {
                what,
                message: format!(
                    "holds rank {} of step {}, expected rank {} of step {step}",
                    header.rank,
                    header.step,
                    self.rank()
                ),
            });
        }
        let state = decode(&what, rest)?;
        self.gang().note_resumed(step);
        tracing::info!(
            step,
            rank = self.rank(),
            "resuming from a superstep checkpoint"
        );
        Ok(Some((step, state)))
    }
}

/// The newest step under `dir` with a commit marker written by a world of `world`.
fn newest_committed(dir: &Path, world: u32) -> Result<Option<u64>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EmberError::io(dir, e)),
    };
    let mut best = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(step) = name
            .to_str()
            .and_then(|n| n.strip_prefix("step-"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let marker = entry.path().join(COMMITTED);
        let Ok(bytes) = fs::read(&marker) else {
            continue;
        };
        match postcard::from_bytes::<Header>(&bytes) {
            Ok(h) if h.step == step && h.world == world => {
                best = best.max(Some(step));
            }
            _ => {
                tracing::warn!(path = %marker.display(), "ignoring an unreadable or foreign commit marker")
            }
        }
    }
    Ok(best)
}

/// Removes the step directories older than `step` (best effort).
fn remove_older(dir: &Path, step: u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let older = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("step-"))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|s| s < step);
        if older {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Writes `bytes` to `path` through a synced temporary file and a rename (mode 0600).
fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| EmberError::io(&tmp, e))?;
    file.write_all(bytes).map_err(|e| EmberError::io(&tmp, e))?;
    file.sync_all().map_err(|e| EmberError::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| EmberError::io(path, e))?;
    if let Some(parent) = path.parent() {
        if let Ok(d) = fs::File::open(parent) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
