//! The output commit protocol of every sink (`save_as_text_file`,
//! `save_as_object_file`, `save_as_parquet`, `save_as_csv`): the job side
//! ([`save_files`]: prepare `OUT`, run the job through a callback that returns each
//! partition's delivered attempt, commit or clean up) and the task side
//! ([`write_attempt`]: one attempt's file, local or uploaded). It knows nothing of RDDs
//! or tasks: the caller passes a callback and the attempt's names.
//!
//! Layout while a job runs: `OUT/_temporary/<job>/part-NNNNN.<attempt id>` (under a
//! setgid parent directory, `OUT` and the temporaries are made mode 2770 so that tasks
//! running as other users of the group can write there: see `share_with_group`). After the
//! job succeeds, exactly one attempt per partition (the one whose result the scheduler
//! delivered) is renamed to `OUT/part-NNNNN<suffix>` (the suffix names the format, e.g.
//! `.parquet`), `_temporary` is removed, and `_SUCCESS` is written last. A directory
//! without `_SUCCESS` is never a complete output; a job that fails removes the
//! directory it created, and so does a local-mode job interrupted by SIGINT or SIGTERM
//! ([`crate::interrupt`]).
//!
//! In object storage (`s3://bucket/prefix`) the same layout holds with keys for paths:
//! each attempt is uploaded whole under `prefix/_temporary/<job>/` (invisible to
//! readers, which skip `_` names), the commit copies the delivered attempts to
//! `prefix/part-NNNNN<suffix>`, deletes `_temporary` and puts `_SUCCESS` last; a job
//! that fails deletes everything under the prefix. (A task still running when its job
//! failed may finish its upload after that: its attempt stays under `_temporary/`,
//! hidden from every reader, as Hadoop's committers leave such stragglers.)

use std::path::{Path, PathBuf};

use crate::error::{EmberError, Result};
use crate::io::storage::{self, ObjectUrl};

/// The file attempt `attempt` of partition `part` of stage `stage` writes under the
/// job's temporary `dir`: unique per attempt, so retries and speculative copies never
/// collide.
pub(crate) fn attempt_path(dir: &Path, stage: u32, attempt: u32, part: u32) -> PathBuf {
    dir.join(format!(
        "part-{part:05}.stage{stage}-attempt{attempt}-{:08x}",
        rand::random::<u32>()
    ))
}

/// Flushes a sink's buffered file and syncs it to disk: the attempt is complete before
/// its path goes to the commit. Errors name `path`.
pub(crate) fn sync_file(path: &Path, out: std::io::BufWriter<std::fs::File>) -> Result<()> {
    let file = out
        .into_inner()
        .map_err(|e| EmberError::io(path, e.into_error()))?;
    file.sync_all().map_err(|e| EmberError::io(path, e))
}

/// One sink task's attempt at `target` (an [`attempt_path`]): `write` fills the local
/// file it is given (and returns the records written), which is uploaded if the output
/// is in object storage (staged under `work_dir`); errors name the attempt's target.
/// Returns the attempt's path for the commit and the records written.
pub(crate) fn write_attempt(
    target: PathBuf,
    work_dir: &Path,
    write: impl FnOnce(&Path) -> Result<u64>,
) -> Result<(String, u64)> {
    let output = storage::PartOutput::create(target, work_dir)?;
    let n = write(output.local()).map_err(|e| output.name_target(e))?;
    Ok((output.finish()?, n))
}

/// Writes a job's output to `out` (a directory or an `s3://` prefix): refuses an
/// existing one unless `overwrite`, runs the job with `run(tmp)` (which returns each
/// partition's delivered attempt, in partition order), moves those to
/// `part-NNNNN<suffix>` and writes `_SUCCESS` last; on any failure removes what it
/// made.
pub(crate) fn save_files(
    out: &Path,
    overwrite: bool,
    suffix: &str,
    run: impl FnOnce(&Path) -> Result<Vec<String>>,
) -> Result<()> {
    let target = Target::of(out)?;
    let (tmp, _uncommitted) = target.prepare(out, overwrite)?;
    let committed = run(&tmp).and_then(|parts| target.commit(parts, suffix));
    if let Err(e) = committed {
        target.abort();
        return Err(e);
    }
    Ok(())
}

/// Where a job's output goes: the local and the object-storage variant of one
/// protocol, each step the same in both.
enum Target {
    /// A directory (absolute: tasks may run in other processes with other working
    /// directories).
    Dir(PathBuf),
    /// An `s3://bucket/prefix` (never a bucket's root).
    Prefix(ObjectUrl),
}

impl Target {
    fn of(out: &Path) -> Result<Target> {
        if !storage::is_remote(out) {
            let dir = std::path::absolute(out).map_err(|e| EmberError::io(out, e))?;
            return Ok(Target::Dir(dir));
        }
        let url = ObjectUrl::parse(out)?;
        if url.key.is_empty() {
            return Err(EmberError::Config(format!(
                "{url}: write output under a prefix of the bucket, not its root"
            )));
        }
        Ok(Target::Prefix(url))
    }

    /// Refuses (or, with `overwrite`, removes) an existing output and makes the job's
    /// temporary directory; returns it, and for a directory the guard that removes the
    /// output if the process is interrupted before the commit.
    fn prepare(
        &self,
        asked: &Path,
        overwrite: bool,
    ) -> Result<(PathBuf, Option<crate::interrupt::RemoveOnInterrupt>)> {
        let job = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
        match self {
            Target::Dir(out) => {
                if out.exists() {
                    if !overwrite {
                        return Err(EmberError::OutputExists {
                            path: out.to_path_buf(),
                        });
                    }
                    let removed = if out.is_dir() {
                        std::fs::remove_dir_all(out)
                    } else {
                        std::fs::remove_file(out)
                    };
                    removed.map_err(|e| EmberError::io(out, e))?;
                }
                let tmp = out.join("_temporary").join(job);
                // Until committed, an interrupt removes the output as a failure does.
                let uncommitted = crate::interrupt::remove_on_interrupt(out);
                std::fs::create_dir_all(&tmp).map_err(|e| EmberError::io(&tmp, e))?;
                share_with_group(out, &tmp)?;
                Ok((tmp, Some(uncommitted)))
            }
            Target::Prefix(url) => {
                if !storage::prefix_is_empty(url)? {
                    if !overwrite {
                        return Err(EmberError::OutputExists {
                            path: asked.to_path_buf(),
                        });
                    }
                    storage::delete_prefix(url)?;
                }
                let tmp = url.join("_temporary").join(&job);
                Ok((PathBuf::from(tmp.to_string()), None))
            }
        }
    }

    /// Moves the delivered attempts into place (`part-NNNNN<suffix>`), removes
    /// `_temporary` and writes `_SUCCESS` last.
    fn commit(&self, parts: Vec<String>, suffix: &str) -> Result<()> {
        match self {
            Target::Dir(out) => {
                for (i, attempt) in parts.iter().enumerate() {
                    let dest = out.join(format!("part-{i:05}{suffix}"));
                    std::fs::rename(attempt, &dest).map_err(|e| EmberError::io(&dest, e))?;
                }
                let tmp = out.join("_temporary");
                std::fs::remove_dir_all(&tmp).map_err(|e| EmberError::io(&tmp, e))?;
                let success = out.join("_SUCCESS");
                std::fs::write(&success, b"").map_err(|e| EmberError::io(&success, e))
            }
            Target::Prefix(url) => {
                for (i, attempt) in parts.iter().enumerate() {
                    storage::copy_object(
                        &ObjectUrl::parse(attempt)?,
                        &url.join(&format!("part-{i:05}{suffix}")),
                    )?;
                }
                storage::delete_prefix(&url.join("_temporary"))?;
                storage::put_bytes(&url.join("_SUCCESS"), Vec::new())
            }
        }
    }

    /// Removes everything the job made (best effort: the job's own error is reported).
    fn abort(&self) {
        match self {
            Target::Dir(out) => {
                let _ = std::fs::remove_dir_all(out);
            }
            Target::Prefix(url) => {
                let _ = storage::delete_prefix(url);
            }
        }
    }
}

/// Under a setgid parent directory (`chmod g+s`), makes `out`, `out/_temporary` and the
/// job's `tmp` dir group-writable and setgid (mode 2770): executors started with
/// `--worker-uids` run tasks as other users of one group, who must be able to write
/// their attempts there. Elsewhere the modes are left to the umask.
fn share_with_group(out: &Path, tmp: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    const SETGID: u32 = 0o2000;
    let parent = out.parent().unwrap_or(Path::new("/"));
    let setgid = std::fs::metadata(parent).is_ok_and(|m| m.permissions().mode() & SETGID != 0);
    if !setgid {
        return Ok(());
    }
    for dir in [out, &out.join("_temporary"), tmp] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2770))
            .map_err(|e| EmberError::io(dir, e))?;
    }
    Ok(())
}
