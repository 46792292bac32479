//! The daemons' health checks: the standard gRPC health service (`grpc.health.v1`,
//! from `tonic-health`) on each daemon's port, and the client side that the daemons'
//! `health` subcommand runs (a scratch container has no shell or curl, so compose
//! health checks and Kubernetes probes call the daemon binary itself).
//!
//! The health service answers without the cluster secret: it says only SERVING or
//! NOT_SERVING, and a probe should not need a credential.
//!
//! Invariant: [`check`] returns within its timeout, connection included.

use std::time::Duration;

use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
pub use tonic_health::server::{health_reporter, HealthReporter};
pub use tonic_health::ServingStatus;

/// Asks the daemon at `addr` (`http://host:port`) whether it is serving; `Ok` only for
/// SERVING, else the reason (unreachable, NOT_SERVING, timed out).
pub async fn check(addr: &str, timeout: Duration) -> Result<(), String> {
    let addr = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let ask = async {
        let endpoint = tonic::transport::Endpoint::from_shared(addr.clone())
            .map_err(|e| format!("bad address {addr:?}: {e}"))?
            .connect_timeout(timeout);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot reach {addr}: {e}"))?;
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map_err(|s| format!("{addr} answered {:?}: {}", s.code(), s.message()))?;
        use tonic_health::pb::health_check_response::ServingStatus as Wire;
        match reply.into_inner().status() {
            Wire::Serving => Ok(()),
            other => Err(format!("{addr} is {}", other.as_str_name())),
        }
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| Err(format!("{addr} did not answer within {timeout:?}")))
}

/// [`check`] on a runtime of its own, for daemon `daemon`'s `health` subcommand:
/// whether it is serving, and the line to print (stdout if so, stderr if not).
pub fn probe(daemon: &str, addr: &str, timeout: Duration) -> (bool, String) {
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))
        .and_then(|rt| rt.block_on(check(addr, timeout)));
    match outcome {
        Ok(()) => (true, format!("{addr}: serving")),
        Err(e) => (false, format!("{daemon} health: {e}")),
    }
}
