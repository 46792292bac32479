//! Logging set-up for job binaries: a `tracing` subscriber writing to stderr, filtered
//! by `EMBER_LOG` (or `RUST_LOG`). Installed once, and only if the program did not
//! install its own.
//!
//! A job's console shows the progress bar and the program's own output: by default only
//! warnings and errors are logged ([`JOB_DEFAULT`]); `EMBER_LOG=info` brings back
//! ember's per-stage and per-job lines. A worker process (a job binary serving an
//! executor's tasks, whose stderr is the executor's log) keeps the daemons' default
//! ([`WORKER_DEFAULT`]).
//!
//! The filter is a list of `target=level` directives and a bare default level
//! (`tracing_subscriber::filter::Targets`), not the full `EnvFilter` syntax: it needs no
//! regex engine, which keeps job binaries small. A filter that does not parse is
//! reported (as a warning, through the default filter) and the default is used.

use std::sync::Once;

/// The filter of a job's own process: warnings and errors only.
pub(crate) const JOB_DEFAULT: &str = "warn";
/// The filter of a worker process: ember's info lines too, as the daemons log them.
pub(crate) const WORKER_DEFAULT: &str = "warn,ember=info";

/// Installs the subscriber, with `default` as the filter unless `EMBER_LOG` or
/// `RUST_LOG` is set. Only the first call in a process counts.
pub(crate) fn init(default: &'static str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use tracing_subscriber::filter::Targets;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let spec = std::env::var("EMBER_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .unwrap_or_else(|_| default.to_string());
        let parsed = spec.parse::<Targets>();
        let filter = match &parsed {
            Ok(f) => f.clone(),
            Err(_) => default.parse().unwrap_or_default(),
        };
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        let _ = tracing_subscriber::registry()
            .with(fmt)
            .with(filter)
            .try_init();
        if let Err(e) = parsed {
            tracing::warn!(
                "ignoring the log filter {:?} ({e}); using {default:?}",
                crate::io::excerpt(&spec)
            );
        }
    });
}
