//! Logging set-up for job binaries: a `tracing` subscriber writing to stderr, filtered
//! by `EMBER_LOG` (or `RUST_LOG`), default `warn,ember=info`. Installed once, and only
//! if the program did not install its own.
//!
//! The filter is a list of `target=level` directives and a bare default level
//! (`tracing_subscriber::filter::Targets`), not the full `EnvFilter` syntax: it needs no
//! regex engine, which keeps job binaries small. A filter that does not parse is
//! reported (as a warning, through the default filter) and the default is used.

use std::sync::Once;

pub(crate) fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use tracing_subscriber::filter::Targets;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        const DEFAULT: &str = "warn,ember=info";
        let spec = std::env::var("EMBER_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .unwrap_or_else(|_| DEFAULT.to_string());
        let parsed = spec.parse::<Targets>();
        let filter = match &parsed {
            Ok(f) => f.clone(),
            Err(_) => DEFAULT.parse().unwrap_or_default(),
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
                "ignoring the log filter {:?} ({e}); using {DEFAULT:?}",
                crate::io::excerpt(&spec)
            );
        }
    });
}
