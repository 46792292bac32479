//! `pipe` (Spark's `PipedRDD`): each partition's records fed, one `Display` line each,
//! to the stdin of an external command, whose stdout lines are the records of the
//! result.
//!
//! Per partition the task spawns the command (an argv, no shell) in a clean
//! environment: only the variables named in [`INHERITED_ENV`] (and `LC_*`) are passed
//! on from the task's process, then [`PipeOptions::env`] on top. The worker's own
//! variables (`EMBER_SECRET`, `EMBER_WORKER_*`, ...) never reach the command. A writer thread writes the lines the task
//! formats to the command's stdin (then closes it); a reader thread turns its stdout
//! into lines; a third thread drains its stderr, keeping only its first
//! [`STDERR_KEPT`] bytes. The task thread waits on "room for more input" and "output
//! available" at once, so neither a command that writes before it has read everything
//! nor one that reads everything before it writes can deadlock the task.
//!
//! Invariants:
//! - Output lines end at `\n` (a trailing `\r` is dropped, as Java's line readers do);
//!   a last line without a terminator is still a record; output that is not UTF-8 fails
//!   the task (as Spark's strict decoding does), never silently altered.
//! - A command that cannot be started, a non-zero exit (or death by signal), and a
//!   failure writing its stdin (other than a broken pipe: a command may stop reading
//!   early, as `head` does, and still succeed) fail the task with
//!   [`EmberError::Pipe`], which names a bounded excerpt of the command, the partition,
//!   the exit status and a bounded excerpt of stderr.
//! - An input error stops the command (killed) and fails the task with that error.
//! - When the task stops reading early (e.g. `take`), dropping the output kills and
//!   reaps the command; no zombie is left behind. (Only the command itself: children it
//!   puts in the background and that keep its stdout open keep the task waiting for
//!   the end of that output, as in Spark.)

use std::fmt::Display;
use std::io::{self, Read, Write};
use std::panic::Location;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::rc::Rc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Select, Sender};
use ember_proto::RddNode;
use serde::{Deserialize, Serialize};

use super::Rdd;
use crate::data::Data;
use crate::data::{decode, encode};
use crate::error::{EmberError, Result};
use crate::io::excerpt;
use crate::task::{Batches, ComputeFn, Erased, TaskContext};

/// Bytes of a command's stderr kept for the error message (the rest is read and
/// dropped, so the command never blocks on a full stderr pipe).
pub const STDERR_KEPT: usize = 4096;

/// The variables a piped command inherits from the task's process (when set there),
/// besides every `LC_*` locale variable. Everything else, the worker's `EMBER_*`
/// variables included, stays out; [`PipeOptions::env`] adds what the user asks for.
pub const INHERITED_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR"];

/// Options of [`Rdd::pipe_with`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PipeOptions {
    /// Environment variables set for the command, on top of the clean environment
    /// ([`INHERITED_ENV`] and `LC_*`); a name given twice takes its last value.
    pub env: Vec<(String, String)>,
}

/// The task process's variables a command inherits: [`INHERITED_ENV`] and `LC_*`.
fn inherited_env() -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(|(name, _)| {
        name.to_str()
            .is_some_and(|n| INHERITED_ENV.contains(&n) || n.starts_with("LC_"))
    })
}

impl PipeOptions {
    /// With `name=value` in the command's environment.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
}

#[derive(Serialize, Deserialize)]
struct PipeSpec {
    argv: Vec<String>,
    opts: PipeOptions,
}

impl<T: Data + Display> Rdd<T> {
    /// Each partition's records, one `Display` line each, piped through `command` (an
    /// argv: `command[0]` is the program, found on `PATH`, the rest its arguments; no
    /// shell); the result's records are the command's stdout lines. A command that
    /// cannot be started or exits unsuccessfully fails the task. An empty `command` is
    /// an invalid-argument error at the first action. The command runs in a clean
    /// environment: [`INHERITED_ENV`] and `LC_*` from the task's process, nothing else
    /// (use [`pipe_with`](Self::pipe_with) to add variables).
    #[track_caller]
    pub fn pipe(&self, command: &[&str]) -> Rdd<String> {
        self.pipe_with(command, PipeOptions::default())
    }

    /// [`pipe`](Self::pipe) with options (environment variables).
    #[track_caller]
    pub fn pipe_with(&self, command: &[&str], opts: PipeOptions) -> Rdd<String> {
        let spec = PipeSpec {
            argv: command.iter().map(|s| s.to_string()).collect(),
            opts,
        };
        let compute: ComputeFn = pipe_compute::<T>;
        let rdd = self.narrow_child(
            "pipe",
            Location::caller(),
            vec![self.node.clone()],
            true,
            self.node.num_partitions,
            compute,
            encode("pipe", &spec),
        );
        if command.is_empty() {
            return rdd.invalid("pipe needs a command, got an empty argv");
        }
        rdd
    }
}

fn pipe_compute<T: Data + Display>(
    tc: &Rc<TaskContext>,
    node: &RddNode,
    part: u32,
) -> Result<Erased> {
    let spec: PipeSpec = decode("pipe", &node.payload)?;
    let input = tc.compute::<T>(TaskContext::dep_parent(node, 0)?, part)?;
    let piped = Piped::start(spec, part, input)?;
    let out: Batches<String> = Box::new(piped);
    Ok(Box::new(out))
}

/// A running command and the threads around it; an iterator of its output batches.
struct Piped<T> {
    command: String,
    partition: u32,
    child: Child,
    input: Batches<T>,
    /// Formatted input not yet handed to the writer.
    pending: Option<Vec<u8>>,
    /// To the writer thread; `None` once the input is exhausted (closing stdin).
    stdin: Option<Sender<Vec<u8>>>,
    writer: Option<JoinHandle<io::Result<()>>>,
    lines: Receiver<io::Result<Vec<String>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    done: bool,
}

impl<T: Data + Display> Piped<T> {
    fn start(spec: PipeSpec, partition: u32, input: Batches<T>) -> Result<Self> {
        let command = excerpt(&spec.argv.join(" ")).to_string();
        let fail = |message: String| EmberError::Pipe {
            command: command.clone(),
            partition,
            message,
        };
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| fail("empty argv".into()))?;
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(inherited_env())
            .envs(spec.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot start the command: {e}")))?;
        tracing::debug!(command = %command, partition, pid = child.id(), "pipe started");
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail("the command's pipes were not set up".into()));
                }
            };
        let (in_tx, in_rx) = crossbeam_channel::bounded::<Vec<u8>>(2);
        let (out_tx, out_rx) = crossbeam_channel::bounded(4);
        let spawned = (|| -> io::Result<_> {
            let writer = std::thread::Builder::new()
                .name(format!("pipe-stdin-{partition}"))
                .spawn(move || write_stdin(stdin, in_rx))?;
            // Detached: it ends at the command's end of stdout (or when the task
            // drops its receiver).
            std::thread::Builder::new()
                .name(format!("pipe-stdout-{partition}"))
                .spawn(move || read_lines(stdout, out_tx))?;
            let drain = std::thread::Builder::new()
                .name(format!("pipe-stderr-{partition}"))
                .spawn(move || drain_stderr(stderr))?;
            Ok((writer, drain))
        })();
        let (writer, drain) = match spawned {
            Ok(t) => t,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!("cannot start its I/O threads: {e}")));
            }
        };
        Ok(Piped {
            command,
            partition,
            child,
            input,
            pending: None,
            stdin: Some(in_tx),
            writer: Some(writer),
            lines: out_rx,
            stderr: Some(drain),
            done: false,
        })
    }

    fn error(&self, message: String) -> EmberError {
        EmberError::Pipe {
            command: self.command.clone(),
            partition: self.partition,
            message,
        }
    }

    /// Formats the next input batch into `pending`, or closes stdin at its end.
    fn refill(&mut self) -> Result<()> {
        match self.input.next() {
            Some(Ok(batch)) => {
                let mut buf = Vec::with_capacity(batch.len() * 8);
                for x in &batch {
                    // Writing into a Vec cannot fail.
                    let _ = writeln!(buf, "{x}");
                }
                if !buf.is_empty() {
                    self.pending = Some(buf);
                }
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => {
                self.stdin = None;
                Ok(())
            }
        }
    }

    /// The next output batch, feeding input as the command takes it.
    fn step(&mut self) -> Result<Option<Vec<String>>> {
        loop {
            if self.pending.is_none() && self.stdin.is_some() {
                self.refill()?;
                continue;
            }
            let received = match (&self.pending, &self.stdin) {
                (Some(_), Some(tx)) => {
                    let mut sel = Select::new();
                    let send = sel.send(tx);
                    let recv = sel.recv(&self.lines);
                    let op = sel.select();
                    if op.index() == send {
                        let chunk = self.pending.take().expect("pending input");
                        if op.send(tx, chunk).is_err() {
                            // The writer stopped (the command closed its stdin): no
                            // more input is wanted.
                            self.stdin = None;
                        }
                        continue;
                    }
                    debug_assert_eq!(op.index(), recv);
                    op.recv(&self.lines)
                }
                _ => self.lines.recv(),
            };
            match received {
                Ok(Ok(lines)) if lines.is_empty() => continue,
                Ok(Ok(lines)) => return Ok(Some(lines)),
                Ok(Err(e)) => return Err(self.error(format!("reading its stdout failed: {e}"))),
                Err(_) => return self.finish().map(|()| None),
            }
        }
    }

    /// After the end of stdout: closes stdin, waits for the exit, checks it.
    fn finish(&mut self) -> Result<()> {
        self.stdin = None;
        self.pending = None;
        let status = self
            .child
            .wait()
            .map_err(|e| self.error(format!("waiting for it failed: {e}")))?;
        let written = self.writer.take().map(|w| w.join());
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() {
            return Err(self.error(exit_message(status, &stderr)));
        }
        match written {
            Some(Ok(Err(e))) => Err(self.error(format!("writing its stdin failed: {e}"))),
            Some(Err(_)) => Err(self.error("its stdin writer panicked".into())),
            _ => Ok(()),
        }
    }

    /// Stops the command (killed and reaped) after an error or an early drop.
    fn abort(&mut self) {
        self.done = true;
        self.stdin = None;
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl<T: Data + Display> Iterator for Piped<T> {
    type Item = Result<Vec<String>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(lines)) => Some(Ok(lines)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.abort();
                Some(Err(e))
            }
        }
    }
}

impl<T> Drop for Piped<T> {
    fn drop(&mut self) {
        if !self.done {
            self.stdin = None;
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
            let _ = self.child.wait();
        }
    }
}

fn exit_message(status: ExitStatus, stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    if text.is_empty() {
        format!("exited unsuccessfully ({status}), no stderr output")
    } else {
        format!(
            "exited unsuccessfully ({status}); stderr: {}",
            excerpt(text)
        )
    }
}

/// Writes every chunk to the command's stdin, then closes it. A broken pipe (the
/// command stopped reading) ends the writing without an error.
fn write_stdin(mut stdin: std::process::ChildStdin, chunks: Receiver<Vec<u8>>) -> io::Result<()> {
    for chunk in chunks {
        match stdin.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    match stdin.flush() {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

/// Sends the command's stdout as batches of lines, one batch per read.
fn read_lines(mut stdout: ChildStdout, tx: Sender<io::Result<Vec<String>>>) {
    let mut buf = vec![0u8; 64 << 10];
    let mut partial: Vec<u8> = Vec::new();
    let mut line_no = 0u64;
    let to_line = |bytes: &[u8], line_no: u64| -> io::Result<String> {
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "output line {line_no} is not UTF-8: {}",
                    excerpt(&String::from_utf8_lossy(bytes))
                ),
            )
        })
    };
    loop {
        let n = match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        // Only the bytes just read can hold a newline: the partial line before them
        // was searched already (searching it again made a long line quadratic).
        let searched = partial.len();
        partial.extend_from_slice(&buf[..n]);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut from = searched;
        while let Some(i) = memchr::memchr(b'\n', &partial[from..]) {
            let end = from + i;
            line_no += 1;
            match to_line(&partial[start..end], line_no) {
                Ok(line) => lines.push(line),
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
            start = end + 1;
            from = start;
        }
        partial.drain(..start);
        if !lines.is_empty() && tx.send(Ok(lines)).is_err() {
            return;
        }
    }
    if !partial.is_empty() {
        let _ = tx.send(to_line(&partial, line_no + 1).map(|l| vec![l]));
    }
}

/// Reads stderr to its end, keeping the first [`STDERR_KEPT`] bytes.
fn drain_stderr(mut stderr: std::process::ChildStderr) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    kept
}
