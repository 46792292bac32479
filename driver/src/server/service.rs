//! The tonic `Driver` service: decodes each call and delegates to the room that owns
//! it (executors, binaries, sessions, jobs, releases). It holds no state of its own.

use std::sync::Arc;

use ember_proto::auth::{require, Role};
use ember_proto::driver_server::Driver;
use ember_proto::{
    BinaryChunk, BinaryRef, CancelJobsRequest, CancelJobsResponse, ClusterStatus, Empty,
    ExecutorMessage, HasBinaryResponse, OpenSessionRequest, ReleaseShufflesRequest,
    SubmitJobRequest, UnpersistRequest,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::executors::{self, OutboundStream};
use super::jobs::{self, JobStream};
use super::sessions::{self, SessionStream};
use super::DriverState;
use ember_scheduler::events::SchedulerEvent;

/// The `Driver` gRPC service of one daemon.
pub struct DriverService {
    state: Arc<DriverState>,
}

impl DriverService {
    pub(crate) fn new(state: Arc<DriverState>) -> Self {
        DriverService { state }
    }
}

#[tonic::async_trait]
impl Driver for DriverService {
    type ExecutorChannelStream = OutboundStream;
    type FetchBinaryStream = ReceiverStream<Result<BinaryChunk, Status>>;
    type OpenSessionStream = SessionStream;
    type SubmitJobStream = JobStream;

    async fn executor_channel(
        &self,
        request: Request<Streaming<ExecutorMessage>>,
    ) -> Result<Response<Self::ExecutorChannelStream>, Status> {
        require(&request, Role::Executor, "ExecutorChannel")?;
        let stream = executors::open_channel(self.state.clone(), request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn has_binary(
        &self,
        request: Request<BinaryRef>,
    ) -> Result<Response<HasBinaryResponse>, Status> {
        require(&request, Role::Client, "HasBinary")?;
        let sha = request.into_inner().sha256;
        super::binaries::check_sha256(&sha)?;
        Ok(Response::new(HasBinaryResponse {
            present: self.state.binaries.contains(&sha),
        }))
    }

    async fn upload_binary(
        &self,
        request: Request<Streaming<BinaryChunk>>,
    ) -> Result<Response<BinaryRef>, Status> {
        require(&request, Role::Client, "UploadBinary")?;
        let r = self.state.binaries.upload(request.into_inner()).await?;
        Ok(Response::new(r))
    }

    async fn fetch_binary(
        &self,
        request: Request<BinaryRef>,
    ) -> Result<Response<Self::FetchBinaryStream>, Status> {
        require(&request, Role::Executor, "FetchBinary")?;
        let sha = request.into_inner().sha256;
        let stream = self.state.binaries.fetch(&sha).await?;
        Ok(Response::new(stream))
    }

    async fn open_session(
        &self,
        request: Request<OpenSessionRequest>,
    ) -> Result<Response<Self::OpenSessionStream>, Status> {
        require(&request, Role::Client, "OpenSession")?;
        let connection = request.remote_addr();
        let token = ember_proto::auth::session_token(&request).map(str::to_string);
        let stream = sessions::open(
            &self.state,
            request.into_inner(),
            token.as_deref(),
            connection,
        )?;
        Ok(Response::new(stream))
    }

    async fn submit_job(
        &self,
        request: Request<SubmitJobRequest>,
    ) -> Result<Response<Self::SubmitJobStream>, Status> {
        require(&request, Role::Client, "SubmitJob")?;
        let token = ember_proto::auth::session_token(&request).map(str::to_string);
        let stream = jobs::submit(&self.state, request.into_inner(), token.as_deref())?;
        Ok(Response::new(stream))
    }

    async fn unpersist(
        &self,
        request: Request<UnpersistRequest>,
    ) -> Result<Response<Empty>, Status> {
        require(&request, Role::Client, "Unpersist")?;
        let token = ember_proto::auth::session_token(&request).map(str::to_string);
        let req = request.into_inner();
        let token = token.as_deref();
        self.state
            .sessions
            .with_session(req.session_id, token, |s| {
                if !s.range.ids().contains(&req.rdd_id) {
                    return Err(Status::invalid_argument(format!(
                        "rdd {} is outside this session's id range [{}, {})",
                        req.rdd_id,
                        s.range.ids().start,
                        s.range.ids().end
                    )));
                }
                Ok(())
            })?;
        self.state
            .scheduler
            .send(SchedulerEvent::Unpersist { rdd_id: req.rdd_id });
        self.state.executors.unpersist(req.rdd_id);
        Ok(Response::new(Empty {}))
    }

    async fn release_shuffles(
        &self,
        request: Request<ReleaseShufflesRequest>,
    ) -> Result<Response<Empty>, Status> {
        require(&request, Role::Client, "ReleaseShuffles")?;
        let token = ember_proto::auth::session_token(&request).map(str::to_string);
        let req = request.into_inner();
        let shuffle_ids = super::release::check_release(&self.state, &req, token.as_deref())?;
        if !shuffle_ids.is_empty() {
            // The scheduler forgets them once no job reads them, then its launcher has
            // every executor delete their files (`RemoveShuffles`).
            self.state
                .scheduler
                .send(SchedulerEvent::RemoveShuffles { shuffle_ids });
        }
        Ok(Response::new(Empty {}))
    }

    async fn cancel_jobs(
        &self,
        request: Request<CancelJobsRequest>,
    ) -> Result<Response<CancelJobsResponse>, Status> {
        require(&request, Role::Client, "CancelJobs")?;
        let token = ember_proto::auth::session_token(&request).map(str::to_string);
        let req = request.into_inner();
        if let Some(g) = &req.job_group {
            if g.is_empty() {
                return Err(Status::invalid_argument(
                    "CancelJobs names an empty job group (jobs without a group are in none)",
                ));
            }
            let max = ember_proto::limits::MAX_JOB_PROPERTY_BYTES;
            if g.len() > max {
                return Err(Status::invalid_argument(format!(
                    "the job group is {} bytes, over the limit of {max}",
                    g.len()
                )));
            }
        }
        let group = req.job_group;
        let waiting_cancelled = self.state.sessions.cancel_jobs(
            req.session_id,
            token.as_deref(),
            group.as_deref(),
            &self.state.to_scheduler,
        )?;
        tracing::info!(
            session = req.session_id,
            group = group.as_deref().map(super::names::logged).as_deref(),
            waiting_cancelled,
            "cancelling jobs"
        );
        Ok(Response::new(CancelJobsResponse { waiting_cancelled }))
    }

    async fn status(&self, request: Request<Empty>) -> Result<Response<ClusterStatus>, Status> {
        require(&request, Role::Client, "Status")?;
        Ok(Response::new(self.state.status()))
    }
}
