//! The driver binary's subcommands besides the daemon: `health` (a probe for compose
//! health checks and Kubernetes, which have no shell in the images) and `history` (the
//! history server over event logs). Each returns the process's exit code and reports its
//! errors on stderr.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use ember_proto::listener::ConnectionLimits;
use ember_proto::{auth, operator_secret};
use tokio::net::TcpListener;

use crate::signals::ShutdownSignals;
use crate::{init_logging, raise_open_files_limit};

/// The `history` subcommand: serves until SIGINT or SIGTERM, logging (warn) its refusals,
/// each event-log line it skips and each log it cannot show (file and line).
pub(crate) fn history(
    dir: PathBuf,
    host: &str,
    port: u16,
    secret_file: Option<&std::path::Path>,
    limits: ConnectionLimits,
) -> ExitCode {
    init_logging();
    let secret = match operator_secret::load(secret_file, host) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ember-driver history: {e}");
            return ExitCode::from(2);
        }
    };
    if secret.is_none() && !auth::is_loopback_host(host) {
        eprintln!(
            "ember-driver history: refusing to serve on {host} without an operator secret \
             ({} or {})",
            operator_secret::FLAG,
            operator_secret::FILE_ENV
        );
        return ExitCode::from(2);
    }
    if let Err(e) = ember_ui::server::check_history_dir(&dir) {
        eprintln!("ember-driver history: cannot read {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let auth = match secret {
        Some(s) => ember_ui::Auth::Secret(s.into()),
        None => ember_ui::Auth::Open,
    };
    raise_open_files_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ember-driver history: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served: anyhow::Result<()> = runtime.block_on(async move {
        let signals = ShutdownSignals::install();
        let listener = TcpListener::bind((host, port))
            .await
            .with_context(|| format!("cannot listen on {host}:{port}"))?;
        println!("ember-driver history on http://{}", listener.local_addr()?);
        std::io::stdout().flush()?;
        ember_ui::serve_with(
            ember_ui::server::bounded(listener, limits),
            ember_ui::Source::History(dir),
            auth,
            None,
            signals.wait(),
        )
        .await?;
        Ok(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ember-driver history: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The `health` subcommand.
pub(crate) fn health(addr: &str, timeout_ms: u64) -> ExitCode {
    let timeout = Duration::from_millis(timeout_ms);
    match ember_proto::health::probe("ember-driver", addr, timeout) {
        (true, line) => println!("{line}"),
        (false, line) => {
            eprintln!("{line}");
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}
