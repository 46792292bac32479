//! The driver daemon's start-up credential rules: which secrets it loads and which
//! combinations it refuses to start with (exit code 2, the error naming the flag).
//!
//! Rules:
//! * The **cluster secret** (`--secret-file`, else `EMBER_SECRET_FILE`, else
//!   `EMBER_SECRET`) is required on a non-loopback `--host`: executors run uploaded
//!   code, so an open driver is remote code execution for anyone who reaches it.
//! * With a cluster secret, an **executor secret** (`--executor-secret-file`, else
//!   `EMBER_EXECUTOR_SECRET_FILE`) is required and must differ from it: clients hold
//!   the cluster secret and must not be able to act as executors.
//! * The **operator secret** (`--operator-secret-file`) is optional and must differ from
//!   both: every client holds the cluster secret and every executor the executor secret,
//!   and neither may open the operator's UI, REST API and metrics.
//! * Off loopback every secret given has at least [`auth::MIN_SECRET_CHARS`]
//!   characters. Errors name the flag or file, never the secret.

use std::path::Path;

use ember_proto::{auth, operator_secret};

/// The secrets the driver runs with, after the rules above.
pub struct Credentials {
    /// Clients' secret; none only on loopback.
    pub cluster: Option<String>,
    /// Executors' secret; present whenever `cluster` is.
    pub executor: Option<String>,
    /// The operator's secret, if given.
    pub operator: Option<String>,
}

/// Where the driver's secrets come from (the command line's flags) and its `--host`.
pub struct Sources<'a> {
    pub host: &'a str,
    pub secret_file: Option<&'a Path>,
    pub executor_secret_file: Option<&'a Path>,
    pub operator_secret_file: Option<&'a Path>,
}

/// Loads the three secrets and checks every rule; the error is one line for stderr.
pub fn load(src: &Sources<'_>) -> Result<Credentials, String> {
    let cluster = auth::load_cluster_secret(src.secret_file, src.host)?;
    if cluster.is_none() && !auth::is_loopback_host(src.host) {
        return Err(format!(
            "refusing to listen on {} without a cluster secret: executors run uploaded \
             code, so an open driver is remote code execution for anyone who reaches it. \
             Give --secret-file or set {}, or listen on a loopback address.",
            src.host,
            auth::SECRET_ENV
        ));
    }
    let executor = load_executor_secret(src, cluster.as_deref())?;
    let operator = operator_secret::load_distinct(
        src.operator_secret_file,
        src.host,
        &[
            ("cluster", cluster.as_deref()),
            ("executor", executor.as_deref()),
        ],
    )?;
    Ok(Credentials {
        cluster,
        executor,
        operator,
    })
}

/// The executor secret, after the credential rules: required with a cluster secret,
/// different from it, and (like the cluster secret, which [`load`] checked) at least
/// [`auth::MIN_SECRET_CHARS`] characters off loopback.
fn load_executor_secret(src: &Sources<'_>, secret: Option<&str>) -> Result<Option<String>, String> {
    const FLAG: &str = auth::EXECUTOR_SECRET_FLAG;
    let executor = auth::load_executor_secret(src.executor_secret_file, src.host)?;
    match (secret, &executor) {
        (Some(_), None) => Err(format!(
            "a cluster secret needs an executor secret too ({FLAG} or {}): clients hold \
             the cluster secret and must not be able to act as executors",
            auth::EXECUTOR_SECRET_FILE_ENV
        )),
        (Some(c), Some(e)) if c == e => Err(format!(
            "{FLAG} holds the cluster secret: the executor secret must differ from it"
        )),
        _ => Ok(executor),
    }
}
