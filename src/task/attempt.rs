//! A sink task's attempt file, named after the task: where [`io::commit`]
//! (crate::io::commit)'s task side meets the running task (its stage, attempt, work dir
//! and record count).
//!
//! Invariant: the name is unique per attempt (stage, attempt and a random suffix), so
//! retries and speculative copies of one partition never write the same file.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::TaskContext;
use crate::error::Result;
use crate::io::commit;

impl TaskContext {
    /// The file this task's attempt at partition `part` writes under the job's
    /// temporary `dir`.
    pub(crate) fn attempt_path(&self, dir: &Path, part: u32) -> PathBuf {
        commit::attempt_path(dir, self.stage_id, self.attempt, part)
    }

    /// Writes this task's attempt at partition `part` with `write` (see
    /// [`commit::write_attempt`]), counting its records as the task's output; returns
    /// the attempt's path for the commit.
    pub(crate) fn write_attempt(
        self: &Rc<Self>,
        dir: &Path,
        part: u32,
        write: impl FnOnce(&Path) -> Result<u64>,
    ) -> Result<String> {
        let (path, n) =
            commit::write_attempt(self.attempt_path(dir, part), &self.env.work_dir, write)?;
        self.with_metrics(|m| m.records_out += n);
        Ok(path)
    }
}
