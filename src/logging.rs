//! Logging set-up for job binaries: a `tracing` subscriber writing to stderr, filtered
//! by `EMBER_LOG` (or `RUST_LOG`), default `warn,ember=info`. Installed once, and only
//! if the program did not install its own.

use std::sync::Once;

pub(crate) fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("EMBER_LOG")
            .or_else(|_| std::env::var("RUST_LOG"))
            .unwrap_or_else(|_| "warn,ember=info".to_string());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    });
}
