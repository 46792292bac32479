//! The job client: a context whose master is `http://host:port` talks to the driver
//! daemon through this.
//!
//! The session itself (connecting, the binary upload, reopening it after a driver
//! restart) is [`super::session`]'s. Each action is one `SubmitJob` call whose streamed
//! events are turned back into the scheduler's [`JobEvent`]s. When that stream breaks
//! because the driver went away and the session comes back (a driver restarted with
//! its state directory), the job is submitted again for the partitions whose results
//! have not arrived, with every broadcast the client has sent: the restarted driver
//! skips the stages whose map outputs the executors kept. The context's cleaner
//! forgets what no live RDD reaches through a [`Releaser`] (`ReleaseShuffles`,
//! `Unpersist`; each call bounded in time, a failure only logged).
//!
//! Invariants: every job's event channel ends with `JobSucceeded` or `JobFailed`, even
//! when the driver is unreachable or goes away mid-job for good (then the failure
//! names the driver and the cause), so a caller never hangs; each partition's result
//! is forwarded once (a resubmission asks only for the missing ones); each broadcast
//! value is sent to the driver once per session generation.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use ember_proto::auth;
use ember_proto::bytes::Bytes;
use ember_proto::{
    BroadcastValue, Plan, ReleaseShufflesRequest, SessionOpened, SubmitJobRequest, UnpersistRequest,
};
use ember_scheduler::{wire, JobEvent, JobFailure};
use parking_lot::Mutex;
use tracing::{debug, warn};

use super::runtime;
pub(crate) use super::session::status_text;
use super::session::{Driver, Link};
use crate::backend::Backend;
use crate::cleaner::ReleaseTarget;
use crate::error::Result;

/// A connected client session.
pub(crate) struct ClusterClient {
    link: Arc<Link>,
    pub session: SessionOpened,
    /// Holds the session stream open (and reopens it); aborting it ends the session.
    session_task: tokio::task::JoinHandle<()>,
    /// The broadcasts sent to the driver.
    broadcasts: Arc<Mutex<SentBroadcasts>>,
    /// Job id -> the switch that stops its event-forwarding task (which drops the
    /// stream: the driver then cancels the job).
    running: Arc<Mutex<HashMap<u64, tokio::sync::oneshot::Sender<()>>>>,
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        self.running.lock().clear();
        self.session_task.abort();
    }
}

impl ClusterClient {
    /// Connects to the driver at `url`, makes sure it has this binary, and opens a
    /// session.
    /// `conf`: the context's settings, shown on the driver's Environment page.
    pub(crate) fn connect(
        url: &str,
        app_name: &str,
        conf: Vec<(String, String)>,
    ) -> Result<ClusterClient> {
        runtime::block_on(async {
            let (link, stream) = Link::open(url, app_name, conf).await?;
            let session = link.session.clone();
            let session_task = tokio::spawn(link.clone().hold(stream));
            Ok(ClusterClient {
                link,
                session,
                session_task,
                broadcasts: Arc::default(),
                running: Arc::new(Mutex::new(HashMap::new())),
            })
        })
    }

    /// Submits a plan; the job's events (always ending in success or failure) arrive on
    /// the returned channel. `broadcasts` are all of the context's broadcasts; only
    /// those the driver has not seen are sent.
    pub(crate) fn submit(
        &self,
        plan: Plan,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Receiver<JobEvent> {
        let (tx, rx) = crossbeam_channel::unbounded();
        if let Some(why) = self.link.lost() {
            fail(&tx, why);
            return rx;
        }
        let (driver, generation) = self.link.driver();
        let new_broadcasts = self.broadcasts.lock().unsent(generation, broadcasts);
        let job = Job {
            link: self.link.clone(),
            tx,
            running: self.running.clone(),
            broadcasts: self.broadcasts.clone(),
            all_partitions: partitions_of(&plan),
            plan,
        };
        runtime::get().spawn(job.follow(driver, generation, new_broadcasts));
        rx
    }

    /// Cancels a running job: dropping its stream tells the driver.
    pub(crate) fn cancel(&self, job_id: u64) {
        if let Some(stop) = self.running.lock().remove(&job_id) {
            let _ = stop.send(());
        }
    }

    /// Tells the driver (and through it every executor) to drop the cached blocks of
    /// an RDD. Waits for the driver's answer, so a job submitted afterwards cannot
    /// overtake it and find the blocks still there.
    pub(crate) fn unpersist(&self, rdd_id: u32) {
        self.releaser().unpersist(rdd_id);
    }

    /// What the context's cleaner forgets shuffles and cached blocks through.
    pub(crate) fn releaser(&self) -> Releaser {
        Releaser {
            link: self.link.clone(),
            session_id: self.session.session_id,
            token: self.session.session_token.clone(),
        }
    }
}

/// The broadcasts a client sent its driver: which ones the driver of the current
/// session generation holds, and every value sent (a restarted driver holds none, so a
/// resubmitted job sends them all again). One lock for both.
#[derive(Default)]
struct SentBroadcasts {
    generation: u64,
    /// Accepted by the driver of `generation`, or being sent with a job in flight.
    held: HashSet<u64>,
    values: HashMap<u64, Bytes>,
}

impl SentBroadcasts {
    /// Forgets what an earlier generation's driver held.
    fn at(&mut self, generation: u64) {
        if self.generation != generation {
            self.generation = generation;
            self.held.clear();
        }
    }

    /// The broadcasts of `broadcasts` the driver of `generation` has not been sent,
    /// marked sent (and kept for a resubmission).
    fn unsent(
        &mut self,
        generation: u64,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Vec<BroadcastValue> {
        self.at(generation);
        let (held, values) = (&mut self.held, &mut self.values);
        broadcasts
            .iter()
            .filter(|(id, _)| held.insert(**id))
            .map(|(id, v)| {
                let value = values
                    .entry(*id)
                    .or_insert_with(|| Bytes::from(v.clone()))
                    .clone();
                BroadcastValue { id: *id, value }
            })
            .collect()
    }

    /// Every broadcast sent so far, marked sent to generation `generation`.
    fn all(&mut self, generation: u64) -> Vec<BroadcastValue> {
        self.at(generation);
        self.held.extend(self.values.keys().copied());
        let mut all: Vec<BroadcastValue> = (self.values.iter())
            .map(|(id, v)| BroadcastValue {
                id: *id,
                value: v.clone(),
            })
            .collect();
        all.sort_by_key(|b| b.id);
        all
    }

    /// The driver did not take `ids` (it refused their job): the next job sends them.
    fn not_taken(&mut self, ids: &[u64]) {
        self.held.retain(|id| !ids.contains(id));
    }
}

/// Every partition a plan computes: its `partitions`, or all of its final RDD's.
fn partitions_of(plan: &Plan) -> Vec<u32> {
    if !plan.partitions.is_empty() {
        return plan.partitions.clone();
    }
    let n = (plan.nodes.iter())
        .find(|n| n.id == plan.final_rdd)
        .map_or(0, |n| n.num_partitions);
    (0..n).collect()
}

/// One submitted job, followed until it ends (across driver restarts).
struct Job {
    link: Arc<Link>,
    tx: Sender<JobEvent>,
    running: Arc<Mutex<HashMap<u64, tokio::sync::oneshot::Sender<()>>>>,
    broadcasts: Arc<Mutex<SentBroadcasts>>,
    plan: Plan,
    all_partitions: Vec<u32>,
}

/// How one submission of a job ended.
enum Ended {
    /// The job ended (its last event forwarded), or the client stopped following it.
    Done,
    /// The stream broke: resubmit if the session comes back.
    Broken(String),
}

impl Job {
    /// Submits the job (again after each driver restart, for the partitions still
    /// missing) and forwards its events.
    async fn follow(self, mut driver: Driver, mut generation: u64, first: Vec<BroadcastValue>) {
        let url = self.link.url.clone();
        let mut done: BTreeSet<u32> = BTreeSet::new();
        let mut broadcasts = first;
        let mut resubmitted = false;
        let mut job_id = None;
        loop {
            let mut plan = self.plan.clone();
            if resubmitted {
                let missing: Vec<u32> = (self.all_partitions.iter().copied())
                    .filter(|p| !done.contains(p))
                    .collect();
                if missing.is_empty() {
                    // Every result arrived before the driver went: the job is done.
                    let _ = self.tx.send(JobEvent::JobSucceeded {
                        job_id: job_id.unwrap_or(u64::MAX),
                    });
                    break;
                }
                warn!(
                    "resubmitting a job to the driver at {url} for its {} partitions without \
                     a result ({} had one)",
                    missing.len(),
                    done.len()
                );
                plan.partitions = missing;
            }
            let ids: Vec<u64> = broadcasts.iter().map(|b| b.id).collect();
            let request = SubmitJobRequest {
                session_id: self.link.session.session_id,
                plan: Some(plan),
                new_broadcasts: std::mem::take(&mut broadcasts),
            };
            let request = auth::with_session_token(
                tonic::Request::new(request),
                &self.link.session.session_token,
            );
            let submitted = match request {
                Ok(request) => driver.submit_job(request).await,
                Err(s) => Err(s),
            };
            let ended = match submitted {
                Ok(r) => self.forward(r.into_inner(), &mut done, &mut job_id).await,
                Err(s) if is_connection(&s) && self.link.reconnects() => {
                    Ended::Broken(status_text(&s))
                }
                Err(s) => {
                    // The driver did not take the job, so not its broadcasts either:
                    // the next job must send them.
                    self.broadcasts.lock().not_taken(&ids);
                    fail(
                        &self.tx,
                        format!("the driver at {url} refused the job: {}", status_text(&s)),
                    );
                    break;
                }
            };
            let why = match ended {
                Ended::Done => break,
                Ended::Broken(why) if !self.link.reconnects() => {
                    fail(
                        &self.tx,
                        format!("lost the connection to the driver at {url}: {why}"),
                    );
                    break;
                }
                Ended::Broken(why) => why,
            };
            match self.link.after_break(generation, &why).await {
                Ok((next, g)) => {
                    driver = next;
                    generation = g;
                    resubmitted = true;
                    broadcasts = self.broadcasts.lock().all(g);
                }
                Err(lost) => {
                    fail(
                        &self.tx,
                        format!("lost the connection to the driver at {url}: {lost}"),
                    );
                    break;
                }
            }
        }
        if let Some(id) = job_id {
            self.running.lock().remove(&id);
        }
    }

    /// Forwards one submission's events until the job ends, the client cancels it, or
    /// the stream breaks; `done` gains the partitions whose results were forwarded.
    async fn forward(
        &self,
        mut stream: tonic::Streaming<ember_proto::JobEvents>,
        done: &mut BTreeSet<u32>,
        job_id: &mut Option<u64>,
    ) -> Ended {
        let url = &self.link.url;
        let (cancel_tx, mut cancel_rx) = tokio::sync::oneshot::channel::<()>();
        let mut cancel_tx = Some(cancel_tx);
        loop {
            let next = tokio::select! {
                m = stream.message() => m,
                _ = &mut cancel_rx, if cancel_tx.is_none() => {
                    debug!("job {job_id:?} cancelled by the client");
                    return Ended::Done;
                }
            };
            let batch = match next {
                Ok(Some(batch)) if !batch.events.is_empty() => batch,
                Ok(Some(_)) => {
                    fail(
                        &self.tx,
                        format!("the driver at {url} sent an empty batch of job events"),
                    );
                    return Ended::Done;
                }
                Ok(None) => {
                    fail(
                        &self.tx,
                        format!("the driver at {url} ended the job's event stream early"),
                    );
                    return Ended::Done;
                }
                Err(s) => return Ended::Broken(status_text(&s)),
            };
            for ev in batch.events {
                let ev = match wire::from_wire(ev) {
                    Ok(ev) => ev,
                    Err(e) => {
                        fail(
                            &self.tx,
                            format!("the driver at {url} sent a malformed job event: {e}"),
                        );
                        return Ended::Done;
                    }
                };
                let end = ev.ends_job();
                match &ev {
                    JobEvent::Started { job_id: id, .. } => {
                        if let Some(old) = job_id.replace(*id) {
                            self.running.lock().remove(&old);
                        }
                        if let Some(c) = cancel_tx.take() {
                            self.running.lock().insert(*id, c);
                        }
                    }
                    JobEvent::TaskResult { partition, .. } => {
                        done.insert(*partition);
                    }
                    _ => {}
                }
                if self.tx.send(ev).is_err() || end {
                    return Ended::Done;
                }
            }
        }
    }
}

/// Whether a call failed because the connection to the driver did (not because the
/// driver refused it).
fn is_connection(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// How long one cleanup call (`Unpersist`, `ReleaseShuffles`) may take.
const CLEANUP_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The session-scoped calls that forget things (for `unpersist` and the cleaner):
/// blocking, bounded in time, failures logged (the session's end cleans up anyway).
pub(crate) struct Releaser {
    link: Arc<Link>,
    session_id: u64,
    token: String,
}

impl Releaser {
    fn request<T>(&self, msg: T) -> std::result::Result<tonic::Request<T>, tonic::Status> {
        let mut request = tonic::Request::new(msg);
        request.set_timeout(CLEANUP_CALL_TIMEOUT);
        auth::with_session_token(request, &self.token)
    }

    /// Drops the cached blocks of an RDD on every executor; waits for the driver.
    pub(crate) fn unpersist(&self, rdd_id: u32) {
        let mut driver = self.link.driver().0;
        let request = self.request(UnpersistRequest {
            session_id: self.session_id,
            rdd_id,
        });
        let sent = runtime::block_on(async move { driver.unpersist(request?).await });
        if let Err(s) = sent {
            warn!("unpersist of rdd {rdd_id} failed: {}", status_text(&s));
        }
    }

    /// Cancels the session's jobs of job group `group` (all with `None`), running or
    /// waiting: the driver answers once it has handed the cancel to its scheduler.
    pub(crate) fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()> {
        let mut driver = self.link.driver().0;
        let request = self.request(ember_proto::CancelJobsRequest {
            session_id: self.session_id,
            job_group: group.map(str::to_string),
        });
        let sent = runtime::block_on(async move { driver.cancel_jobs(request?).await });
        match sent {
            Ok(r) => {
                debug!(
                    waiting_cancelled = r.into_inner().waiting_cancelled,
                    "cancelled jobs"
                );
                Ok(())
            }
            Err(s) => Err(crate::error::EmberError::Cluster(format!(
                "cancelling jobs failed: {}",
                status_text(&s)
            ))),
        }
    }

    /// Tells the driver that no live RDD reaches `shuffle_ids` (at most
    /// `MAX_RELEASED_SHUFFLES`): their map outputs and files go.
    pub(crate) fn release_shuffles(&self, shuffle_ids: &[u32]) {
        let mut driver = self.link.driver().0;
        let request = self.request(ReleaseShufflesRequest {
            session_id: self.session_id,
            shuffle_ids: shuffle_ids.to_vec(),
        });
        let sent = runtime::block_on(async move { driver.release_shuffles(request?).await });
        match sent {
            Ok(_) => debug!(count = shuffle_ids.len(), "released shuffles"),
            Err(s) => warn!(
                "release of {} shuffles failed: {}",
                shuffle_ids.len(),
                status_text(&s)
            ),
        }
    }
}

fn fail(tx: &Sender<JobEvent>, message: String) {
    let _ = tx.send(JobEvent::JobFailed {
        job_id: u64::MAX,
        failure: JobFailure::Cancelled(message),
    });
}

impl Backend for ClusterClient {
    fn submit(
        &self,
        plan: ember_proto::Plan,
        broadcasts: &HashMap<u64, Vec<u8>>,
    ) -> Receiver<JobEvent> {
        ClusterClient::submit(self, plan, broadcasts)
    }

    fn cancel(&self, job_id: u64, _reason: &str) {
        ClusterClient::cancel(self, job_id)
    }

    fn cancel_jobs(&self, group: Option<&str>) -> crate::error::Result<()> {
        self.releaser().cancel_jobs(group)
    }

    fn unpersist(&self, rdd_id: u32) {
        ClusterClient::unpersist(self, rdd_id)
    }

    fn release_target(&self) -> Box<dyn ReleaseTarget> {
        Box::new(self.releaser())
    }

    fn session_token(&self) -> Option<String> {
        Some(self.session.session_token.clone())
    }
}

impl ReleaseTarget for Releaser {
    fn release_shuffles(&self, ids: &[u32]) {
        Releaser::release_shuffles(self, ids)
    }

    fn unpersist(&self, rdd_id: u32) {
        Releaser::unpersist(self, rdd_id)
    }
}
