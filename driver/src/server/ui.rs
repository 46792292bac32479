//! A tiny read-only HTTP/1.1 status page: `GET /` answers a plain-text summary of the
//! executors, sessions and running jobs; every other request gets 404.
//!
//! Invariants: it only reads the driver's state, one request per connection, and
//! each connection is bounded in time ([`REQUEST_TIMEOUT`]) and size
//! ([`MAX_REQUEST_BYTES`]), so a slow or hostile client cannot hold it. When the
//! cluster has a secret, a request without `Authorization: Bearer <secret>` (compared
//! in constant time, as for gRPC calls) gets 401 and nothing of the driver's state;
//! without a secret the daemon only listens on loopback addresses.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use super::DriverState;

/// How long a client may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head read.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// Accepts connections until `shutdown` resolves.
pub(crate) async fn serve(
    state: Arc<DriverState>,
    secret: Option<Arc<str>>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (conn, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving.
                    debug!("status page: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        let secret = secret.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(&state, secret.as_deref(), conn).await {
                debug!(%peer, "status page: {e}");
            }
        });
    }
}

/// Whether the request head carries `Authorization: Bearer <secret>` (always true
/// without a secret).
fn authorized(head: &str, secret: Option<&str>) -> bool {
    let Some(secret) = secret else {
        return true;
    };
    head.lines().skip(1).any(|line| {
        let Some((name, value)) = line.split_once(':') else {
            return false;
        };
        name.trim().eq_ignore_ascii_case("authorization")
            && value.trim().strip_prefix("Bearer ").is_some_and(|given| {
                ember_proto::auth::constant_time_eq(given.as_bytes(), secret.as_bytes())
            })
    })
}

async fn handle(
    state: &DriverState,
    secret: Option<&str>,
    mut conn: TcpStream,
) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut conn))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out"))??;
    let request_line = head.lines().next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next(), parts.next());
    let (status, extra, body) = if !authorized(&head, secret) {
        debug!("status page: refused a request without the cluster secret");
        (
            "401 Unauthorized",
            "WWW-Authenticate: Bearer\r\n",
            "the status page requires the cluster secret (Authorization: Bearer <secret>)\n"
                .to_string(),
        )
    } else {
        match (method, path) {
            (Some("GET"), Some("/")) => ("200 OK", "", render(state)),
            _ => ("404 Not Found", "", "not found\n".to_string()),
        }
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await?;
    conn.shutdown().await
}

/// Reads up to the end of the request head (or [`MAX_REQUEST_BYTES`]).
async fn read_head(conn: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while buf.len() < MAX_REQUEST_BYTES && !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The status page's text.
fn render(state: &DriverState) -> String {
    let executors = state.executors.snapshot();
    let details = state.executors.details();
    let sessions = state.sessions.summaries();
    let mut out = String::from("ember-driver\n\n");
    let cores: u32 = executors.iter().map(|e| e.cores).sum();
    let _ = writeln!(out, "executors: {} ({cores} cores)", executors.len());
    for e in &executors {
        let (host, pid, used, silent) = details.get(&e.executor_id).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}  cores {}  running {}  memory {} of {}  shuffle {}  host {} pid {}  last heard {} ms ago",
            e.executor_id,
            e.cores,
            e.running_tasks,
            mib(used),
            mib(e.memory_bytes),
            e.shuffle_address,
            host,
            pid,
            silent.as_millis()
        );
    }
    let _ = writeln!(out, "\nsessions: {}", sessions.len());
    for s in &sessions {
        let _ = writeln!(
            out,
            "  session {}  app {:?}  ids from {}  running jobs {}",
            s.id,
            s.app_name,
            s.id_base,
            s.running_jobs.len()
        );
    }
    let running: Vec<(u64, u64)> = sessions
        .iter()
        .flat_map(|s| s.running_jobs.iter().map(move |j| (*j, s.id)))
        .collect();
    let _ = writeln!(out, "\nrunning jobs: {}", running.len());
    for (job, session) in running {
        let _ = writeln!(out, "  job {job}  session {session}");
    }
    out
}
