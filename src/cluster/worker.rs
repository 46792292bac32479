//! Worker mode: the job binary, started by an executor daemon, serving that executor's
//! tasks instead of running `main`.
//!
//! The executor starts the binary with `EMBER_WORKER_SOCKET` (and the variables below)
//! set; `Context::from_env()` sees it and calls [`run_if_requested`], which never
//! returns. The worker connects to the socket, says `WorkerReady`, then reads
//! `ToWorker` frames (tasks, broadcasts, kills, session cleanups, exports of cached
//! blocks to move) and answers each task with exactly one `FromWorker { status }`.
//! Frames are a u32 big-endian length and one protobuf message. Tasks run on
//! `EMBER_WORKER_CORES` threads through the same [`run_task`](crate::task::run_task) as
//! local mode; map outputs go to the executor's shuffle directory, so they outlive this
//! process.
//!
//! Invariants: the worker exits when the executor closes the socket (the executor is
//! its only master); a task whose kill arrives before it starts is answered `killed`
//! without running; a panic in user code fails that task only; every status sent is
//! bounded by `ember_proto::limits::fit_status` (failure messages cut to 4 KiB, a
//! result too large for one message turned into that task's failure).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

use ember_proto::{
    from_worker, task_failure, task_status, to_worker, FromWorker, TaskDescription, TaskFailure,
    TaskStatus, ToWorker, WorkerReady,
};
use parking_lot::Mutex;
use prost::Message;
use tracing::{debug, error, info};

use crate::env::ExecutorEnv;
use crate::task::StagePlan;
use ember_proto::worker_frame;

/// The variables an executor sets for its workers.
pub mod vars {
    pub const SOCKET: &str = "EMBER_WORKER_SOCKET";
    pub const EXECUTOR_ID: &str = "EMBER_EXECUTOR_ID";
    pub const CORES: &str = "EMBER_WORKER_CORES";
    pub const MEMORY: &str = "EMBER_EXECUTOR_MEMORY";
    pub const SHUFFLE_DIR: &str = "EMBER_WORKER_SHUFFLE_DIR";
    pub const WORK_DIR: &str = "EMBER_WORKER_DIR";
    pub const BINARY: &str = "EMBER_BINARY_SHA256";
    /// The host peers on other hosts reach this executor at (barrier tasks listen on
    /// its IP when their gang spans hosts).
    pub const HOST: &str = "EMBER_WORKER_HOST";
    /// `1`: barrier tasks listen on TCP even within one host (workers run as
    /// separate users, whose socket directories are private).
    pub const BARRIER_TCP: &str = "EMBER_WORKER_BARRIER_TCP";
}

/// If this process was started as a worker, serves tasks until the executor lets go,
/// then exits; otherwise returns at once.
pub(crate) fn run_if_requested() {
    let Some(socket) = std::env::var_os(vars::SOCKET) else {
        return;
    };
    crate::logging::init(crate::logging::WORKER_DEFAULT);
    let code = match serve(PathBuf::from(socket)) {
        Ok(()) => 0,
        Err(e) => {
            error!("worker {}: {e}", std::process::id());
            1
        }
    };
    std::process::exit(code);
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

fn serve(socket: PathBuf) -> Result<(), String> {
    let executor_id = var(vars::EXECUTOR_ID)?;
    let binary = var(vars::BINARY)?;
    let cores: usize = var(vars::CORES)?
        .parse()
        .map_err(|e| format!("{}: {e}", vars::CORES))?;
    let memory = crate::memory::parse_memory_size(&var(vars::MEMORY)?)?;
    let shuffle_dir = PathBuf::from(var(vars::SHUFFLE_DIR)?);
    let work_dir = PathBuf::from(var(vars::WORK_DIR)?);
    // Fetches carry only the session's shuffle key: workers hold no cluster secret.
    let remote = Arc::new(super::fetch::RemoteShuffle::new());
    let env = Arc::new(
        ExecutorEnv::with_dirs(
            executor_id.clone(),
            binary.clone(),
            shuffle_dir,
            work_dir.clone(),
            memory,
            Some(remote.clone()),
        )
        .map_err(|e| format!("cannot prepare {}: {e}", work_dir.display()))?,
    );
    let stream = UnixStream::connect(&socket).map_err(|e| {
        format!(
            "cannot connect to executor socket {}: {e}",
            socket.display()
        )
    })?;
    let writer = Arc::new(Mutex::new(
        stream.try_clone().map_err(|e| format!("socket: {e}"))?,
    ));
    let _ = env.rendezvous.listen.set(crate::env::BarrierListen {
        tcp_ip: std::env::var(vars::HOST).ok().and_then(|h| resolve(&h)),
        force_tcp: std::env::var(vars::BARRIER_TCP).is_ok_and(|v| v == "1"),
    });
    env.rendezvous
        .set_reporter(Box::new(ToExecutor(writer.clone())));
    write_frame(
        &writer,
        &FromWorker {
            msg: Some(from_worker::Msg::Ready(WorkerReady {
                pid: std::process::id(),
                binary_sha256: binary,
            })),
        },
    )?;
    info!(executor = %executor_id, cores, "worker {} ready", std::process::id());

    let (tasks_tx, tasks_rx) =
        crossbeam_channel::unbounded::<(TaskDescription, Option<Arc<StagePlan>>)>();
    for i in 0..cores.max(1) {
        let rx = tasks_rx.clone();
        let env = env.clone();
        let writer = writer.clone();
        std::thread::Builder::new()
            .name(format!("ember-task-{i}"))
            .spawn(move || {
                while let Ok((task, stage)) = rx.recv() {
                    let finished = if env.killed.remove(&task.task_id).is_some() {
                        killed_status(&env, task.task_id).into()
                    } else {
                        match crate::task::own_plan(task, stage.as_ref()) {
                            Ok((task, stage)) => crate::task::run_task(&env, task, stage),
                            Err((task_id, msg)) => crate::task::failed(&env, task_id, msg).into(),
                        }
                    };
                    let crate::task::Finished { status, linger } = finished;
                    // Bounded here, where it goes on the wire: a huge error or result
                    // fails this task only.
                    let status = ember_proto::limits::fit_status(
                        status,
                        ember_proto::limits::max_message_bytes(),
                    );
                    let frame = FromWorker {
                        msg: Some(from_worker::Msg::Status(status)),
                    };
                    let written = write_frame(&writer, &frame);
                    // A barrier task's peers see it gone only now.
                    drop(linger);
                    if written.is_err() {
                        std::process::exit(0);
                    }
                }
            })
            .map_err(|e| format!("cannot start task thread: {e}"))?;
    }

    // Memory reserved by running tasks, for the executor's heartbeats (and the UI).
    {
        let env = env.clone();
        let writer = writer.clone();
        std::thread::Builder::new()
            .name("ember-memory".into())
            .spawn(move || {
                let mut last = u64::MAX;
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    let used = env.memory.used();
                    if used != last {
                        last = used;
                        let frame = FromWorker {
                            msg: Some(from_worker::Msg::Memory(ember_proto::WorkerMemory {
                                reserved_bytes: used,
                            })),
                        };
                        if write_frame(&writer, &frame).is_err() {
                            return;
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the memory reporter: {e}"))?;
    }

    // Stage plans the executor sent, by plan id, until it says to forget them.
    let mut plans: HashMap<u64, Arc<StagePlan>> = HashMap::new();
    let no_broadcasts = Arc::new(HashMap::new());
    let mut reader = std::io::BufReader::new(stream);
    loop {
        let Some(bytes) = read_frame(&mut reader)? else {
            debug!("executor closed the socket; worker exits");
            return Ok(());
        };
        let msg = ToWorker::decode(bytes.as_slice())
            .map_err(|e| format!("undecodable message from the executor: {e}"))?;
        match msg.msg {
            Some(to_worker::Msg::Run(task)) => {
                if let Some(plan) = &task.plan {
                    remote.learn_key(plan.final_rdd, &plan.shuffle_key);
                }
                // Resolved now, in channel order: a later forget cannot take it away.
                let stage = match &task.plan {
                    Some(_) => None,
                    None => plans.get(&task.plan_id).cloned(),
                };
                let _ = tasks_tx.send((task, stage));
            }
            Some(to_worker::Msg::Plan(p)) => {
                if let Some(plan) = p.plan {
                    remote.learn_key(plan.final_rdd, &plan.shuffle_key);
                    plans.insert(p.id, Arc::new(StagePlan::new(plan, no_broadcasts.clone())));
                }
            }
            Some(to_worker::Msg::ForgetPlans(f)) => {
                for id in f.ids {
                    plans.remove(&id);
                }
            }
            Some(to_worker::Msg::Kill(k)) => {
                // A running task stops at its next batch; a queued one does not start.
                env.kill_task(k.task_id);
            }
            Some(to_worker::Msg::Broadcast(b)) => {
                env.broadcast_bytes
                    .insert(b.id, Arc::new(Vec::from(b.value)));
            }
            Some(to_worker::Msg::Unpersist(u)) => env.blocks.remove_rdd(u.rdd_id),
            Some(to_worker::Msg::Cleanup(c)) => {
                env.blocks.remove_rdd_range(c.id_lo, c.id_hi);
                remote.forget_keys(c.id_lo, c.id_hi);
                let in_range = |id: &u64| *id >= c.broadcast_lo && *id < c.broadcast_hi;
                env.broadcasts.retain(|id, _| !in_range(id));
                env.broadcast_bytes.retain(|id, _| !in_range(id));
            }
            Some(to_worker::Msg::BarrierPeers(p)) => {
                env.rendezvous
                    .deliver(p.stage_attempt, &p.task_ids, &p.addresses);
            }
            Some(to_worker::Msg::ExportBlocks(x)) => export_blocks(&env, &writer, x)?,
            None => {}
        }
    }
}

/// Writes the cached blocks the executor asked for (those held here) to the session's
/// shuffle directory, on a thread of its own (the socket keeps being read), and answers
/// with the ones written.
fn export_blocks(
    env: &Arc<ExecutorEnv>,
    writer: &Arc<Mutex<UnixStream>>,
    x: ember_proto::ExportBlocks,
) -> Result<(), String> {
    let (env, writer) = (env.clone(), writer.clone());
    std::thread::Builder::new()
        .name("ember-export".into())
        .spawn(move || {
            let wanted: Vec<(u32, u32)> =
                x.blocks.iter().map(|b| (b.rdd_id, b.partition)).collect();
            let blocks = env
                .blocks
                .export(&wanted, &env.shuffle_dir())
                .into_iter()
                .map(|((rdd_id, partition), bytes)| ember_proto::ExportedBlock {
                    rdd_id,
                    partition,
                    bytes,
                })
                .collect();
            let frame = FromWorker {
                msg: Some(from_worker::Msg::BlocksExported(
                    ember_proto::BlocksExported {
                        request_id: x.request_id,
                        blocks,
                    },
                )),
            };
            let _ = write_frame(&writer, &frame);
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the block export: {e}"))
}

/// Barrier tasks' addresses, as frames to the executor (which relays them).
struct ToExecutor(Arc<Mutex<UnixStream>>);

impl crate::env::AddressReporter for ToExecutor {
    fn report(&self, task_id: u64, address: String) {
        let frame = FromWorker {
            msg: Some(from_worker::Msg::BarrierAddress(
                ember_proto::BarrierAddress { task_id, address },
            )),
        };
        // A closed socket ends the worker anyway (see the task threads).
        let _ = write_frame(&self.0, &frame);
    }
}

/// The first IP `host` resolves to, if any.
fn resolve(host: &str) -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    (host, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
}

fn killed_status(env: &ExecutorEnv, task_id: u64) -> TaskStatus {
    TaskStatus {
        barrier: None,
        task_id,
        executor_id: env.executor_id.clone(),
        metrics: None,
        outcome: Some(task_status::Outcome::Failure(TaskFailure {
            reason: Some(task_failure::Reason::Killed(
                "killed before it started".into(),
            )),
        })),
    }
}

/// Writes `msg` as one frame with one `write` (the length prefix and the message
/// encoded into one buffer), as the framing of [`worker_frame`] reads it.
fn write_frame(writer: &Mutex<UnixStream>, msg: &FromWorker) -> Result<(), String> {
    use std::io::Write;
    let len = msg.encoded_len();
    if len > worker_frame::MAX_FRAME_BYTES {
        return Err(format!(
            "to the executor: a frame of {len} bytes exceeds the limit of {}",
            worker_frame::MAX_FRAME_BYTES
        ));
    }
    let mut buf = Vec::with_capacity(worker_frame::LENGTH_PREFIX_BYTES + len);
    buf.extend_from_slice(&(len as u32).to_be_bytes());
    msg.encode(&mut buf)
        .map_err(|e| format!("to the executor: cannot encode a frame: {e}"))?;
    writer
        .lock()
        .write_all(&buf)
        .map_err(|e| format!("to the executor: cannot write a frame: {e}"))
}

/// One frame, or `None` at a clean end of stream.
fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, String> {
    worker_frame::read_frame(r).map_err(|e| format!("from the executor: {e}"))
}
